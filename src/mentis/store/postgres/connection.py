"""Plumbing of the PostgreSQL store: the driver (imported here and nowhere else), the connection
pool, transactions, the per-repository chain lock and error translation (the shared SQL is
:mod:`mentis.store.shared.core`'s)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mentis.errors import IntegrityError, MissingExtra, QueryError, StoreError
from mentis.store.shared.recall_limits import VIEW_NAMES

try:
    import psycopg
    import psycopg_pool
    from pgvector.psycopg import register_vector
    from psycopg import errors as pg_errors
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtra(exc.name or "psycopg", "postgres") from None

Conn = psycopg.Connection[tuple[Any, ...]]
PgError = psycopg.Error
QueryCanceled = pg_errors.QueryCanceled
InsufficientPrivilege = pg_errors.InsufficientPrivilege

LOCK_CLASS = 0x6D656E
"""First key of ``pg_advisory_xact_lock(LOCK_CLASS, hashtext(chain))``: one lock per repository."""
MIGRATION_LOCK = 0x6D656F
POOL_MAX = 8
POOL_TIMEOUT_S = 30.0
BODY_CHANGED = "MT001"
"""SQLSTATE raised by ``mentis_checked_body`` when a body no longer matches its hash."""


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def connection_pool(
    url: str, max_size: int, name: str, configure: Callable[[Conn], None] | None = None
) -> psycopg_pool.ConnectionPool:
    """An autocommit pool of connections to ``url``, not yet open (callers open it inside their
    own error translation)."""
    return psycopg_pool.ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        timeout=POOL_TIMEOUT_S,
        kwargs={"autocommit": True},
        configure=configure,
        open=False,
        name=name,
    )


def store_error(what: str, url: str, exc: BaseException) -> Exception:
    """The Mentis error for a driver error (the one mapping; tested to cover each class)."""
    where = redact(url)
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return StoreError(
            f"{what} failed: no connection to {where} within {POOL_TIMEOUT_S:g} s; "
            "check that the server is up and not out of connections"
        )
    if isinstance(exc, psycopg.OperationalError) and not isinstance(exc, pg_errors.QueryCanceled):
        return StoreError(
            f"{what} failed: cannot reach {where}: {exc}; check MENTIS_DATABASE_URL and the server"
        )
    if isinstance(exc, pg_errors.QueryCanceled):
        return StoreError(f"{what} failed on {where}: the statement was cancelled ({exc})")
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate == BODY_CHANGED:
        return IntegrityError(
            "ledger does not verify: a body changed after the store was opened; run `mentis verify-integrity`"
        )
    if isinstance(exc, pg_errors.DiskFull):
        return StoreError(f"{what} failed on {where}: {exc}; free some disk space on the server")
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return StoreError(
            f"{what} failed on {where}: {exc}; the database user needs to own the Mentis tables "
            "(and CREATEROLE for the recall role)"
        )
    if (
        isinstance(exc, pg_errors.UndefinedFile | pg_errors.FeatureNotSupported)
        or "vector" in str(exc).lower()
    ):
        return StoreError(f"{what} failed on {where}: {exc}; install the pgvector extension on the server")
    if isinstance(exc, psycopg.Error):
        return StoreError(f"{what} failed on {where}: {exc}")
    return StoreError(f"{what} failed on {where}: {exc}")


def query_error(exc: BaseException, timeout_s: float) -> Exception:
    """The error for a failed recall SQL statement."""
    if getattr(exc, "sqlstate", None) == BODY_CHANGED:
        return IntegrityError(
            "ledger does not verify: a body changed after the store was opened; run `mentis verify-integrity`"
        )
    if isinstance(exc, pg_errors.QueryCanceled):
        return QueryError(f"query ran past the {timeout_s:g} s limit and was stopped")
    if isinstance(
        exc,
        pg_errors.InsufficientPrivilege
        | pg_errors.ReadOnlySqlTransaction
        | pg_errors.UndefinedTable
        | pg_errors.InvalidCursorDefinition
        | pg_errors.FeatureNotSupported,
    ) or (isinstance(exc, pg_errors.SyntaxError) and "DECLARE" not in str(exc)):
        return QueryError(
            "query refused: recall SQL may only SELECT from the views "
            f"{', '.join(sorted(VIEW_NAMES))} ({exc})"
        )
    if isinstance(exc, psycopg.OperationalError):
        return StoreError(f"recall failed: the server connection broke: {exc}")
    return QueryError(f"query failed: {exc}")


class PgPool:
    """A pool of connections to one database, its transactions (each write holds its
    repositories' locks) and error translation."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.path = redact(url)
        """The URL without its password, for messages."""
        with self.translate("open"):
            self._pool = connection_pool(url, POOL_MAX, "mentis", self._configure)
        self._vector_ready = False

    def _configure(self, conn: Conn) -> None:
        if self._vector_ready:
            register_vector(conn)

    def open(self) -> None:
        """Open the pool once the schema (and so the vector type) exists."""
        self._vector_ready = True
        with self.translate("open"):
            self._pool.open(wait=True, timeout=POOL_TIMEOUT_S)

    @contextmanager
    def translate(self, what: str) -> Iterator[None]:
        try:
            yield
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise store_error(what, self.url, exc) from exc

    @contextmanager
    def connection(self, what: str) -> Iterator[Conn]:
        """A pooled connection in autocommit mode (the caller runs its own transaction)."""
        with self.translate(what), self._pool.connection() as conn:
            yield conn

    @contextmanager
    def bootstrap(self) -> Iterator[Conn]:
        """A single connection outside the pool (schema migrations, before the vector type exists)."""
        with self.translate("open"), psycopg.connect(self.url, autocommit=True) as conn:
            yield conn

    @contextmanager
    def _tx(self, begin: str, what: str, commit: bool = True) -> Iterator[Conn]:
        with self.connection(what) as conn:
            conn.execute(begin)
            try:
                yield conn
            except BaseException:
                if not conn.closed:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT" if commit else "ROLLBACK")

    @contextmanager
    def write(self, *chains: str, commit: bool = True) -> Iterator[Conn]:
        """One transaction holding the lock of each chain it appends to (sorted: no deadlocks);
        ``commit=False`` rolls it back at the end (a write prepared, not made)."""
        with self._tx("BEGIN", "write", commit) as conn:
            for chain in sorted(set(chains)):
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_CLASS, chain))
            yield conn

    @contextmanager
    def read(self) -> Iterator[Conn]:
        """A read-only snapshot, so multi-statement reads see one state."""
        with self._tx("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "read") as conn:
            yield conn

    def close(self) -> None:
        self._pool.close()
