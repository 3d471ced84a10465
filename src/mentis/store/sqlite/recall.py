"""Read-only SQL for ``recall``: the documented views, an authorizer, time/row/byte limits.

:class:`SqliteRecall` is the part of :class:`mentis.store.sqlite.store.SqliteStore` that runs them.
Queries run on a separate read-only connection (``mode=ro``) whose TEMP views read every value out
of hash-covered bodies and call ``mentis_visible(scope)`` — the caller's scope, on each row's scope key
(``mentis.ledger.bodies.scope_key``: its repository, or a private partition of it) — on every row.
Views end in ``LIMIT -1`` so SQLite never flattens them into the outer query: the authorizer then
sees every base-table read as coming from inside a view, and anything else is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import sqlite3
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mentis.errors import IntegrityError, QueryError
from mentis.ledger.bodies import status_sql
from mentis.store.protocol import SqlParams, SqlResult
from mentis.store.shared.recall_limits import (
    COLUMN_LIMIT,
    LIKE_PATTERN_LIMIT,
    VALUE_LIMIT_BYTES,
    VIEW_NAMES,
    Deadline,
    RecallBounds,
    ResultBudget,
    limit_connection,
)
from mentis.store.sqlite.connection import translating
from mentis.store.sqlite.thought_schema import THOUGHT_VIEWS

READ_BUSY_TIMEOUT_MS = 30_000
RECALL_CONNECTIONS = 4
"""Recall statements that may run at once on one store (each on its own read-only connection)."""

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
       {attempt_status} AS status,
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
WHERE mentis_visible(a.scope) LIMIT -1;

CREATE TEMP VIEW corrections AS
SELECT json_extract(b.body, '$.attempt_id') AS attempt_id,
       json_extract(b.body, '$.repository') AS repository,
       json_extract(b.body, '$.reason') AS reason,
       json_extract(b.body, '$.latest_commit') AS latest_commit,
       json_extract(b.body, '$.at') AS at,
       json_extract(b.body, '$.agent_id') AS agent_id
FROM main.correction_idx c JOIN checked_bodies b ON b.rowid = c.rowid
JOIN main.attempt_idx a ON a.rowid = c.attempt_rowid
WHERE mentis_visible(a.scope) LIMIT -1;

CREATE TEMP VIEW tasks AS
SELECT t.repository AS repository, t.task_id AS task_id,
       (SELECT json_extract(b.body, '$.task_title') FROM main.attempt_idx a
          JOIN checked_bodies b ON b.rowid = a.rowid
         WHERE a.repository = t.repository AND a.task_id = t.task_id AND mentis_visible(a.scope)
           AND json_extract(b.body, '$.task_title') IS NOT NULL
         ORDER BY a.rowid DESC LIMIT 1) AS title,
       (SELECT min(json_extract(b.body, '$.created_at')) FROM main.attempt_idx a
          JOIN checked_bodies b ON b.rowid = a.rowid
         WHERE a.repository = t.repository AND a.task_id = t.task_id AND mentis_visible(a.scope))
         AS created_at,
       (SELECT count(*) FROM main.attempt_idx a
         WHERE a.repository = t.repository AND a.task_id = t.task_id AND mentis_visible(a.scope))
         AS attempt_count
FROM main.task_idx t
WHERE EXISTS(SELECT 1 FROM main.attempt_idx a
              WHERE a.repository = t.repository AND a.task_id = t.task_id AND mentis_visible(a.scope))
LIMIT -1;
""".replace("{attempt_status}", status_sql("json_extract(b.body, '$.check.status')"))
_INNER_VIEWS = frozenset({"checked_bodies"})
"""Views the documented ones read through; not queryable themselves."""
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
_DENIED_FUNCTIONS = frozenset(
    {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "json_patch"}
)
"""``json_patch`` merges objects in time quadratic in their sizes, in one uninterruptible call."""


class _BodyChanged(Exception):
    pass


def _checked_body(body: bytes, body_hash: str) -> bytes:
    """A body, if it still matches the hash its ledger entry holds."""
    if hashlib.sha256(body).hexdigest() != body_hash:
        raise _BodyChanged(body_hash)
    return body


class SqliteRecall:
    """``recall`` statements over the views of one SQLite file (the store's ``run_sql``).

    Each statement runs on a connection of its own from a small pool, without the store's lock,
    so a slow statement delays no other caller; at most :data:`RECALL_CONNECTIONS` run at once,
    and a call that finds none free within its time limit is refused.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._recall_pool: queue.LifoQueue[sqlite3.Connection] | None = None
        self._recall_open = 0
        self._recall_threads: ThreadPoolExecutor | None = None

    def run(self, sql: str, params: SqlParams | None, bounds: RecallBounds) -> SqlResult:
        """Run one ``recall`` statement over the views."""
        visible, max_rows, max_bytes, timeout_s = bounds
        started = time.monotonic()
        conn = self._recall_connection(timeout_s)
        seen: dict[str, int] = {}

        def visible_row(repo: str) -> int:
            if repo not in seen:
                seen[repo] = 1 if visible(repo) else 0
            return seen[repo]

        try:
            conn.create_function("mentis_visible", 1, visible_row)
            left = max(timeout_s - (time.monotonic() - started), 0.001)
            # On a thread of the recall executor: a free one exists for every pooled connection.
            result = self._recall_executor().submit(_execute, conn, sql, params, left, max_rows, max_bytes)
            columns, budget = result.result()
        except sqlite3.Error as exc:
            self._recall_release(conn, broken=True)
            raise _query_error(exc, timeout_s, fired=getattr(exc, "deadline_fired", False)) from None
        except BaseException:
            self._recall_release(conn, broken=True)
            raise
        self._recall_release(conn, broken=False)
        return SqlResult(
            columns=columns, rows=budget.rows, truncated=budget.truncated, truncation_reason=budget.reason
        )

    def _recall_executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._recall_threads is None:
                self._recall_threads = ThreadPoolExecutor(
                    RECALL_CONNECTIONS, thread_name_prefix="mentis-recall", initializer=_lower_priority
                )
            return self._recall_threads

    def close(self) -> None:
        with self._lock:
            pool, self._recall_pool = self._recall_pool, None
            threads, self._recall_threads = self._recall_threads, None
        if threads is not None:
            threads.shutdown(wait=True)
        while pool is not None and not pool.empty():
            pool.get_nowait().close()

    def _recall_connection(self, timeout_s: float) -> sqlite3.Connection:
        with self._lock:
            if self._recall_pool is None:
                self._recall_pool = queue.LifoQueue()
            pool = self._recall_pool
            if pool.empty() and self._recall_open < RECALL_CONNECTIONS:
                self._recall_open += 1
                opening = True
            else:
                opening = False
        if opening:
            try:
                return self._open_recall()
            except BaseException:
                with self._lock:
                    self._recall_open -= 1
                raise
        try:
            return pool.get(timeout=timeout_s)
        except queue.Empty:
            raise QueryError(
                f"recall is busy: {RECALL_CONNECTIONS} statements were running for the whole "
                f"{timeout_s:g} s limit; try again"
            ) from None

    def _recall_release(self, conn: sqlite3.Connection, *, broken: bool) -> None:
        conn.create_function("mentis_visible", 1, lambda repo: 0)
        with self._lock:
            pool = self._recall_pool
            if pool is None or (broken and not _usable(conn)):
                self._recall_open -= 1
                conn.close()
                return
        pool.put(conn)

    def _open_recall(self) -> sqlite3.Connection:
        with translating("recall", self._path):
            uri = Path(self._path).resolve().as_uri() + "?mode=ro"
            ro = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            ro.execute(f"PRAGMA busy_timeout={READ_BUSY_TIMEOUT_MS}")
            limit_connection(ro)  # first: setting temp_store drops TEMP views
            ro.create_function("mentis_visible", 1, lambda repo: 0)
            ro.create_function("mentis_body", 2, _checked_body, deterministic=True)
            ro.executescript(_VIEWS + THOUGHT_VIEWS)
            tables = frozenset(n for (n,) in ro.execute("SELECT name FROM main.sqlite_master")) | _SYSTEM
            ro.set_authorizer(_Authorizer(tables))
        return ro


RECALL_NICE = 10
"""Scheduling niceness of the threads that run recall statements (Linux: per thread), so a
statement burning CPU yields to the server's other work."""


def _lower_priority() -> None:
    if sys.platform == "linux":  # a sandbox may forbid it: the statement still runs
        with contextlib.suppress(OSError):
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), RECALL_NICE))


def _execute(
    conn: sqlite3.Connection,
    sql: str,
    params: SqlParams | None,
    timeout_s: float,
    max_rows: int,
    max_bytes: int,
) -> tuple[list[str], ResultBudget]:
    """Run one statement under its deadline; an sqlite3 error says whether the deadline fired."""
    deadline = Deadline(conn.interrupt, timeout_s)
    cur: sqlite3.Cursor | None = None
    try:
        cur = conn.execute(sql, params or {})
        columns = [d[0] for d in cur.description or ()]
        budget = ResultBudget(lambda v: v, max_rows=max_rows, max_bytes=max_bytes)
        budget.take(iter(cur.fetchone, None))
    except sqlite3.Error as exc:
        exc.deadline_fired = deadline.fired  # type: ignore[attr-defined]
        raise
    finally:
        deadline.stop()
        if cur is not None:
            cur.close()
        conn.execute("ROLLBACK") if conn.in_transaction else None
    return columns, budget


def _usable(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("SELECT 1").fetchone()
    except sqlite3.Error:
        return False
    return True


def _query_error(exc: sqlite3.Error, timeout_s: float, *, fired: bool) -> Exception:
    """The error for a failed recall statement."""
    text = str(exc)
    if "user-defined function raised exception" in text:
        return IntegrityError(
            "ledger does not verify: a body changed after the store was opened; run `mentis verify-integrity`"
        )
    if fired or "interrupted" in text:
        return QueryError(f"query ran past the {timeout_s:g} s limit and was stopped")
    if isinstance(exc, sqlite3.ProgrammingError) and "one statement" in text:
        return QueryError("sql: give one SELECT statement at a time")
    if "too big" in text:
        return QueryError(
            f"query stopped: a string or blob in recall SQL may be at most {VALUE_LIMIT_BYTES:,} bytes"
        )
    if "pattern too complex" in text:
        return QueryError(
            f"query stopped: a LIKE or GLOB pattern may be at most {LIKE_PATTERN_LIMIT} characters"
        )
    if "too many columns" in text:
        return QueryError(f"query stopped: a result may have at most {COLUMN_LIMIT} columns")
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
        return QueryError(
            f"query refused: recall SQL may only SELECT from the views {', '.join(sorted(VIEW_NAMES))}"
        )
    return QueryError(f"query failed: {text}")


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
