"""Read-only SQL for ``recall`` on PostgreSQL: the documented views, under a role that may read
nothing else, in a read-only transaction with a statement timeout and the same row/byte limits.

:class:`PostgresRecall` is the part of :class:`mentis.store.postgres.store.PostgresStore` that runs
them. One statement runs as a server-side cursor (``DECLARE … CURSOR FOR`` admits one SELECT and no
data-modifying CTE), under ``SET LOCAL ROLE mentis_recall`` with ``search_path`` set to the views'
schema. The caller's repositories are written to ``recall_scope`` for this backend before the
transaction starts, so nothing the statement does can widen them. Afterwards ``DISCARD ALL`` drops
whatever session state the statement may have set (settings, advisory locks) before the connection
is reused.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
import time
import uuid
from typing import Any

import numpy as np

from mentis.errors import QueryError
from mentis.store.postgres.connection import Conn, PgError, PgPool, query_error
from mentis.store.postgres.schema import RECALL_ROLE, RECALL_SCHEMA
from mentis.store.protocol import SqlParams, SqlResult
from mentis.store.shared.recall_limits import VIEW_NAMES, RecallBounds, ResultBudget

_FETCH = 10
WORK_MEM = "4MB"
"""Memory one sort or hash of a recall statement may use before it spills to a temporary file."""
TEMP_FILE_LIMIT = "256MB"
"""Temporary-file space a recall statement may use (set when the server lets this user set it)."""
_ROW_TOO_BIG = "mentis recall row over the byte cap"
_RESOURCE_CLASSES = frozenset({"53", "54"})
"""SQLSTATE classes of a statement over a resource limit (temp_file_limit, memory, program limits)."""
_LEADING = re.compile(r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*(\w+)", re.S)
_READS = frozenset({"select", "with", "values", "table"})


def to_pyformat(sql: str) -> str:
    """``:name`` placeholders (SQLite style) to ``%(name)s``; ``%`` escaped; literals left alone."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            end = i + 1
            while end < n:
                if sql[end] == ch:
                    if end + 1 < n and sql[end + 1] == ch:
                        end += 2
                        continue
                    break
                end += 1
            out.append(sql[i : end + 1].replace("%", "%%"))
            i = end + 1
        elif ch == ":" and i + 1 < n and sql[i + 1] == ":":
            out.append("::")
            i += 2
        elif ch == ":" and i + 1 < n and (sql[i + 1].isalpha() or sql[i + 1] == "_"):
            m = re.match(r"\w+", sql[i + 1 :])
            assert m is not None
            out.append(f"%({m.group(0)})s")
            i += 1 + len(m.group(0))
        elif ch == "%":
            out.append("%%")
            i += 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, uuid.UUID | dt.timedelta):
        return str(value)
    return str(value)


class PostgresRecall:
    """``recall`` statements over the views of one database (the store's ``run_sql``), each on a
    connection of ``pool``."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool
        self._temp_limit_allowed: bool | None = None
        """Whether this database user may set ``temp_file_limit`` (None: not tried yet)."""

    def _limit_temp_files(self, conn: Conn) -> None:
        """``SET LOCAL temp_file_limit`` if this user may (superuser, or granted SET on it)."""
        if self._temp_limit_allowed is False:
            return
        conn.execute("SAVEPOINT mentis_temp_limit")
        try:
            conn.execute(f"SET LOCAL temp_file_limit = '{TEMP_FILE_LIMIT}'")
        except PgError:
            conn.execute("ROLLBACK TO SAVEPOINT mentis_temp_limit")
            self._temp_limit_allowed = False
            return
        conn.execute("RELEASE SAVEPOINT mentis_temp_limit")
        self._temp_limit_allowed = True

    def run(self, sql: str, params: SqlParams | None, bounds: RecallBounds) -> SqlResult:
        """Run one ``recall`` statement over the views."""
        visible, max_rows, max_bytes, timeout_s = bounds
        text = sql.strip().rstrip(";").strip()
        first = _LEADING.match(text)
        if first is None or first.group(1).lower() not in _READS:
            raise QueryError(
                f"query refused: recall SQL may only SELECT from the views {', '.join(sorted(VIEW_NAMES))}"
            )
        inner = to_pyformat(text) if params else text
        # The row-size guard runs on the server, so a row over the byte cap is never sent whole.
        query = (
            f"SELECT q.* FROM (\n{inner}\n) AS q WHERE (CASE WHEN pg_column_size(q.*) > {int(max_bytes)} "
            f"THEN '{_ROW_TOO_BIG}' END)::int IS NULL"
        )
        deadline = time.monotonic() + timeout_s
        columns: list[str] = []
        budget = ResultBudget(jsonable, max_rows=max_rows, max_bytes=max_bytes)
        with self._pool.connection("recall") as conn:
            repos = [  # scope keys: each repository, and each private partition of one
                c
                for (c,) in conn.execute("SELECT chain FROM heads UNION SELECT scope FROM scope_keys")
                if visible(c)
            ]
            conn.execute(
                "INSERT INTO recall_scope(pid, repositories) VALUES(pg_backend_pid(), %s) "
                "ON CONFLICT(pid) DO UPDATE SET repositories = excluded.repositories",
                (repos,),
            )
            try:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                conn.execute(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}")
                conn.execute(f"SET LOCAL work_mem = '{WORK_MEM}'")
                conn.execute("SET LOCAL hash_mem_multiplier = 1")
                self._limit_temp_files(conn)
                conn.execute(f"SET LOCAL search_path = {RECALL_SCHEMA}")
                conn.execute(f"SET LOCAL ROLE {RECALL_ROLE}")
                try:
                    with conn.cursor(name="mentis_recall") as cur:
                        cur.execute(query, params or None)
                        columns = [d.name for d in cur.description or ()]
                        while True:
                            left_ms = int((deadline - time.monotonic()) * 1000)
                            if left_ms <= 0:
                                raise QueryError(f"query ran past the {timeout_s:g} s limit and was stopped")
                            conn.execute(f"SET LOCAL statement_timeout = {left_ms}")
                            batch = cur.fetchmany(_FETCH)
                            if not batch or not budget.take(batch):
                                break
                except PgError as exc:
                    if _ROW_TOO_BIG in str(exc):
                        budget.truncated, budget.reason = True, f"more than {max_bytes:,} bytes"
                    elif (getattr(exc, "sqlstate", None) or "")[:2] in _RESOURCE_CLASSES:
                        raise QueryError(f"query stopped: {str(exc).strip()}") from None
                    else:
                        raise query_error(exc, timeout_s) from None
            finally:
                if not conn.closed:
                    conn.rollback()
                    conn.execute("DISCARD ALL")
                    conn.execute("DELETE FROM recall_scope WHERE pid = pg_backend_pid()")
        return SqlResult(
            columns=columns, rows=budget.rows, truncated=budget.truncated, truncation_reason=budget.reason
        )
