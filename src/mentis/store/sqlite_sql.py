"""Read-only SQL for ``recall``: the documented views, an authorizer, time/row/byte limits.

A mixin of :class:`mentis.store.sqlite.SqliteStore`. Queries run on a separate read-only
connection (``mode=ro``) whose TEMP views read every value out of hash-covered bodies and call
``mentis_visible(repository)`` — the caller's scope — on every row. Views end in ``LIMIT -1`` so
SQLite never flattens them into the outer query: the authorizer then sees every base-table read
as coming from inside a view, and anything else is refused.
"""

from __future__ import annotations

import base64
import hashlib
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from mentis.errors import IntegrityError, QueryError
from mentis.store.base import SqlResult
from mentis.store.sqlite_base import SqliteBase
from mentis.store.sqlite_thoughts import THOUGHT_VIEWS

READ_BUSY_TIMEOUT_MS = 30_000

# Views for `recall` SQL: every returned value is read out of a body (hash-covered data).
_VIEWS = """
CREATE TEMP VIEW checked_bodies AS
SELECT b.rowid AS rowid, mentis_body(b.body, e.body_hash) AS body
FROM main.bodies b JOIN main.entries e ON e.rowid = b.rowid LIMIT -1;
CREATE TEMP VIEW attempts AS
SELECT json_extract(b.body, '$.attempt_id') AS attempt_id,
       json_extract(b.body, '$.repository') AS repository,
       json_extract(b.body, '$.task_id') AS task_id,
       json_extract(b.body, '$.task_title') AS task_title,
       json_extract(b.body, '$.agent_id') AS agent_id,
       json_extract(b.body, '$.session_id') AS session_id,
       json_extract(b.body, '$.created_at') AS created_at,
       coalesce(json_extract(b.body, '$.check.status'), 'unverified') AS status,
       json_extract(b.body, '$.action') AS action,
       json_extract(b.body, '$.observation') AS observation,
       json_extract(b.body, '$.inference') AS inference,
       json(json_extract(b.body, '$.files')) AS files,
       json(json_extract(b.body, '$.tags')) AS tags,
       json_extract(b.body, '$.code_context.commit') AS "commit",
       json_extract(b.body, '$.code_context.branch') AS branch,
       json_extract(b.body, '$.code_context.dirty') AS dirty,
       json_extract(b.body, '$.check.command') AS check_command,
       json_extract(b.body, '$.check.exit_code') AS check_exit_code,
       json_extract(b.body, '$.check.output') AS check_output,
       EXISTS(SELECT 1 FROM main.correction_idx c WHERE c.attempt_rowid = a.rowid) AS outdated
FROM main.attempt_idx a JOIN checked_bodies b ON b.rowid = a.rowid
WHERE mentis_visible(a.repository) LIMIT -1;

CREATE TEMP VIEW corrections AS
SELECT json_extract(b.body, '$.attempt_id') AS attempt_id,
       json_extract(b.body, '$.repository') AS repository,
       json_extract(b.body, '$.reason') AS reason,
       json_extract(b.body, '$.latest_commit') AS latest_commit,
       json_extract(b.body, '$.at') AS at,
       json_extract(b.body, '$.agent_id') AS agent_id
FROM main.correction_idx c JOIN checked_bodies b ON b.rowid = c.rowid
JOIN main.attempt_idx a ON a.rowid = c.attempt_rowid
WHERE mentis_visible(a.repository) LIMIT -1;

CREATE TEMP VIEW tasks AS
SELECT t.repository AS repository, t.task_id AS task_id,
       json_extract(tb.body, '$.task_title') AS title,
       (SELECT min(json_extract(b.body, '$.created_at')) FROM main.attempt_idx a
          JOIN checked_bodies b ON b.rowid = a.rowid
         WHERE a.repository = t.repository AND a.task_id = t.task_id) AS created_at,
       (SELECT count(*) FROM main.attempt_idx a
         WHERE a.repository = t.repository AND a.task_id = t.task_id) AS attempt_count
FROM main.task_idx t LEFT JOIN checked_bodies tb ON tb.rowid = t.title_rowid
WHERE mentis_visible(t.repository) LIMIT -1;
"""
_INNER_VIEWS = frozenset({"checked_bodies"})
"""Views the documented ones read through; not queryable themselves."""
VIEW_NAMES = frozenset({"attempts", "corrections", "tasks", "thoughts", "relations"})
_SYSTEM = frozenset(
    {
        "sqlite_master",
        "sqlite_schema",
        "sqlite_temp_master",
        "sqlite_temp_schema",
        "sqlite_sequence",
        "sqlite_stat1",
        "sqlite_stat4",
    }
)
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})


class _BodyChanged(Exception):
    pass


def _checked_body(body: bytes, body_hash: str) -> bytes:
    """A body, if it still matches the hash its ledger entry holds."""
    if hashlib.sha256(body).hexdigest() != body_hash:
        raise _BodyChanged(body_hash)
    return body


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


class RecallSql(SqliteBase):
    """``run_sql`` over the views; mixed into SqliteStore (``self`` is the store)."""

    def run_sql(
        self,
        sql: str,
        params: dict[str, Any] | None,
        *,
        visible: Callable[[str], bool],
        max_rows: int,
        max_bytes: int,
        timeout_s: float,
    ) -> SqlResult:
        with self._lock:
            conn = self._readonly()
            conn.create_function("mentis_visible", 1, lambda repo: 1 if visible(repo) else 0)
            deadline = time.monotonic() + timeout_s
            conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 2_000)
            try:
                try:
                    cur = conn.execute(sql, params or {})
                    columns = [d[0] for d in cur.description or ()]
                    rows: list[list[Any]] = []
                    size = 2
                    truncated, reason = False, None
                    while True:
                        row = cur.fetchone()
                        if row is None:
                            break
                        if len(rows) == max_rows:
                            truncated, reason = True, f"more than {max_rows} rows"
                            break
                        values = [_jsonable(v) for v in row]
                        size += len(orjson.dumps(values)) + 1
                        if size > max_bytes:
                            truncated, reason = True, f"more than {max_bytes:,} bytes"
                            break
                        rows.append(values)
                finally:
                    conn.execute("ROLLBACK") if conn.in_transaction else None
            except sqlite3.Error as exc:
                text = str(exc)
                if "user-defined function raised exception" in text:
                    raise IntegrityError(
                        "ledger does not verify: a body changed after the store was opened; "
                        "run `mentis verify`"
                    ) from None
                if "interrupted" in text:
                    raise QueryError(f"query ran past the {timeout_s:g} s limit and was stopped") from None
                if isinstance(exc, sqlite3.ProgrammingError) and "one statement" in text:
                    raise QueryError("sql: give one SELECT statement at a time") from None
                if any(
                    m in text
                    for m in (
                        "not authorized",
                        "prohibited",
                        "authorization denied",
                        "cannot modify",
                        "readonly",
                        "read-only",
                    )
                ):
                    raise QueryError(
                        "query refused: recall SQL may only SELECT from the views "
                        f"{', '.join(sorted(VIEW_NAMES))}"
                    ) from None
                raise QueryError(f"query failed: {text}") from None
            finally:
                conn.set_progress_handler(None, 0)
        return SqlResult(columns=columns, rows=rows, truncated=truncated, truncation_reason=reason)

    def ledger_summary(self) -> list[tuple[str, str, int, str]]:
        """``(chain, kind, entries, newest at)`` for every chain and entry kind: keys only, no content."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT chain, kind, count(*), max(at) FROM entries GROUP BY chain, kind ORDER BY chain, kind"
            ).fetchall()
        return [(str(c), str(k), int(n), str(at)) for c, k, n, at in rows]

    def size_bytes(self) -> int:
        """Bytes on disk: the SQLite file and its write-ahead log."""
        paths = (Path(self.path), Path(self.path + "-wal"))
        return sum(p.stat().st_size for p in paths if p.exists())

    def _readonly(self) -> sqlite3.Connection:
        if self._ro is None:
            uri = Path(self.path).resolve().as_uri() + "?mode=ro"
            ro = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            ro.execute(f"PRAGMA busy_timeout={READ_BUSY_TIMEOUT_MS}")
            ro.create_function("mentis_visible", 1, lambda repo: 1)
            ro.create_function("mentis_body", 2, _checked_body, deterministic=True)
            ro.executescript(_VIEWS + THOUGHT_VIEWS)
            tables = frozenset(n for (n,) in ro.execute("SELECT name FROM main.sqlite_master")) | _SYSTEM
            self._authorizer = _Authorizer(tables)
            ro.set_authorizer(self._authorizer)
            self._ro = ro
        return self._ro


class _Authorizer:
    """Allow SELECT (and CTEs) over the documented views only; reads inside a view are the view's.

    ``tables`` are the store's real table names: an unqualified name the statement did not define
    as a CTE is one of them, and is refused.
    """

    def __init__(self, tables: frozenset[str]) -> None:
        self.tables = tables

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None
    ) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            if source in VIEW_NAMES or source in _INNER_VIEWS:
                return sqlite3.SQLITE_OK
            if arg1 in VIEW_NAMES and db in ("temp", None):
                return sqlite3.SQLITE_OK
            if db is None and arg1 not in self.tables:  # a CTE the statement defines
                return sqlite3.SQLITE_OK
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_DENY if (arg2 or "").lower() in _DENIED_FUNCTIONS else sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY
