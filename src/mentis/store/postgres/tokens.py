"""The ``tokens`` table in PostgreSQL (``MENTIS_DATABASE_URL``): every ``serve --http`` replica on one
database accepts the same tokens and refuses a revoked one at its next request.

Schema migration 3 (:mod:`mentis.store.postgres.schema`) creates the table when a store opens; the
token commands may come first, so opening here creates it too (the same statement, under the
migration lock). Tokens that a server on this database kept before in its local SQLite file (the
store path) are copied in on the first open, with their ids, hashes, expiry and revocation; a token
already in the database wins. The file then records the move under ``tokens_moved_to:<database>``,
so it happens once; the file itself is otherwise left as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg_pool  # after postgres.connection, which names the extra to install when it is missing

from mentis.store.postgres.connection import (
    MIGRATION_LOCK,
    POOL_TIMEOUT_S,
    Conn,
    PgError,
    connection_pool,
    redact,
    store_error,
)
from mentis.store.shared.tokens import (
    POSTGRES_TOKEN_TABLE,
    ROW_COLUMNS,
    Row,
    TokenTable,
    legacy_rows,
    mark_moved,
)

log = logging.getLogger(__name__)

TOKENS_LOCK = 0x6D6570
"""Key of ``pg_advisory_xact_lock`` serialising exclusive token statements (first admin token)."""
POOL_SIZE = 4


class PostgresTokens(TokenTable):
    """The ``tokens`` table of one PostgreSQL database, behind a small pool of its own."""

    param = "%s"

    def __init__(self, url: str, legacy: Path | None = None) -> None:
        self.url = url
        self.path = redact(url)
        with self._translate("open the token table"):
            self._pool = connection_pool(url, POOL_SIZE, "mentis-tokens")
        try:
            with self._translate("open the token table"):
                self._pool.open(wait=True, timeout=POOL_TIMEOUT_S)
            self._create()
            if legacy is not None:
                self._move_legacy(legacy)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        try:
            yield
        except (PgError, psycopg_pool.PoolTimeout) as exc:
            raise store_error(what, self.url, exc) from exc

    @contextmanager
    def _locked(self, lock: int, what: str) -> Iterator[Conn]:
        """One transaction holding the advisory lock ``lock``."""
        with self._translate(what), self._pool.connection() as conn:
            conn.execute("BEGIN")
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
                yield conn
            except BaseException:
                if not conn.closed:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _run(self, sql: str, args: Sequence[object] = (), *, exclusive: bool = False) -> list[Row]:
        if exclusive:
            with self._locked(TOKENS_LOCK, "token table") as conn:
                return conn.execute(sql, tuple(args)).fetchall()
        with self._translate("token table"), self._pool.connection() as conn:
            return conn.execute(sql, tuple(args)).fetchall()

    def _create(self) -> None:
        if self._run("SELECT to_regclass('tokens') IS NOT NULL")[0][0]:
            return
        with self._locked(MIGRATION_LOCK, "create the token table") as conn:
            conn.execute(POSTGRES_TOKEN_TABLE)

    def _move_legacy(self, path: Path) -> None:
        key = f"tokens_moved_to:{self.path}"
        rows = legacy_rows(path, key)
        if rows is None:
            return
        values = ", ".join(["%s"] * (len(ROW_COLUMNS.split(",")) + 1))
        sql = f"INSERT INTO tokens({ROW_COLUMNS}, revoked_at) VALUES({values}) ON CONFLICT (id) DO NOTHING"
        with self._locked(TOKENS_LOCK, "move the local tokens") as conn, conn.cursor() as cur:
            cur.executemany(sql, rows)
        mark_moved(path, key, datetime.now(UTC).isoformat())
        log.info("moved %d token(s) from %s into %s", len(rows), path, self.path)
