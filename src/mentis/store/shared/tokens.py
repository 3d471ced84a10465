"""The ``tokens`` table: bearer-token records kept in the store's own database, beside the ledger.

Tokens are credentials, not memory: the table has no ledger entry and no hash chain, so export,
import, rebuild and verify never see it, and ``recall`` cannot read it (the SQLite authorizer and
the PostgreSQL ``mentis_recall`` role admit only the documented views). A row holds a token's
public id, its grants and ``HMAC-SHA256(salt, secret)``; what a row means is ``mentis.service.tokens``'s.

The statements are written once here (:class:`TokenTable`) over the backend's placeholder; each
backend supplies how one runs: :class:`SqliteTokens` on the store file, and
``postgres_tokens.PostgresTokens`` on the database of ``MENTIS_DATABASE_URL``. Nothing is cached:
every lookup asks the database, so a revocation made by any process is refused by all at once.
"""

from __future__ import annotations

import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

from mentis.errors import StoreError
from mentis.store.shared.files import private_files

Row = tuple[object, ...]

TOKEN_TABLE = """
CREATE TABLE IF NOT EXISTS tokens(
    id TEXT PRIMARY KEY, agent TEXT NOT NULL, scope TEXT NOT NULL, repositories TEXT NOT NULL,
    salt {blob} NOT NULL, digest {blob} NOT NULL, created_at TEXT NOT NULL, expires_at TEXT,
    revoked_at TEXT)
"""
SQLITE_TOKEN_TABLE = TOKEN_TABLE.format(blob="BLOB")
POSTGRES_TOKEN_TABLE = TOKEN_TABLE.format(blob="bytea")

INFO_COLUMNS = "id, agent, scope, repositories, created_at, expires_at, revoked_at"
"""What may be listed about a token; ``salt, digest`` follow only when a secret is checked."""
ROW_COLUMNS = "id, agent, scope, repositories, salt, digest, created_at, expires_at"
"""The columns of a new row, in the order :meth:`TokenTable.insert` takes them."""


class TokenTable(ABC):
    """The statements on the ``tokens`` table; a backend runs them (``param`` is its placeholder)."""

    path: str
    param = "?"

    @abstractmethod
    def _run(self, sql: str, args: Sequence[object] = (), *, exclusive: bool = False) -> list[Row]:
        """Run one statement and return its rows; ``exclusive``: serialised with every other
        exclusive statement on this table (a check and a write that must not interleave)."""

    @abstractmethod
    def close(self) -> None: ...

    def _sql(self, text: str) -> str:
        return text.format(p=self.param)

    def insert(self, row: Sequence[object], *, only_if_empty: bool = False) -> bool:
        """Store a new token row (``ROW_COLUMNS``); with ``only_if_empty``, only on a table
        holding no token at all. Returns whether the row was stored."""
        values = ", ".join([self.param] * len(row))
        guard = " WHERE NOT EXISTS (SELECT 1 FROM tokens)" if only_if_empty else ""
        done = self._run(
            f"INSERT INTO tokens({ROW_COLUMNS}) SELECT {values}{guard} RETURNING id",
            row,
            exclusive=only_if_empty,
        )
        return bool(done)

    def select(self, token_id: str | None = None, *, secret: bool = False) -> list[Row]:
        """Rows of ``INFO_COLUMNS`` (plus ``salt, digest`` with ``secret``): the token
        ``token_id``, or every token in creation order."""
        columns = INFO_COLUMNS + (", salt, digest" if secret else "")
        if token_id is None:
            return self._run(f"SELECT {columns} FROM tokens ORDER BY created_at, id")
        return self._run(self._sql(f"SELECT {columns} FROM tokens WHERE id = {{p}}"), (token_id,))

    def count(self) -> int:
        return int(str(self._run("SELECT count(*) FROM tokens")[0][0]))

    def revoke(self, token_id: str, at: str) -> bool:
        """Mark the token revoked at ``at``; False when there is no such live token."""
        sql = "UPDATE tokens SET revoked_at = {p} WHERE id = {p} AND revoked_at IS NULL RETURNING id"
        return bool(self._run(self._sql(sql), (at, token_id)))


class SqliteTokens(TokenTable):
    """The ``tokens`` table of one SQLite file (the store's), behind its own small connection."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        try:
            with private_files(self.path):
                self._conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=30
                )
                self._conn.execute("PRAGMA busy_timeout=30000")
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA secure_delete=ON")
                self._conn.execute(SQLITE_TOKEN_TABLE)
        except sqlite3.Error as exc:
            raise StoreError(f"could not open the token table in {self.path}: {exc}") from None

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _run(self, sql: str, args: Sequence[object] = (), *, exclusive: bool = False) -> list[Row]:
        with self._lock:
            try:
                if not exclusive:
                    return self._conn.execute(sql, tuple(args)).fetchall()
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    rows = self._conn.execute(sql, tuple(args)).fetchall()
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
                return rows
            except sqlite3.Error as exc:
                raise StoreError(f"token table of {self.path}: {exc}") from None


def legacy_rows(path: Path, moved_key: str) -> list[Row] | None:
    """The token rows (``ROW_COLUMNS`` + ``revoked_at``) of the SQLite file ``path``, read only,
    or None when it has none or :func:`mark_moved` recorded ``moved_key`` in it.

    Before tokens moved into PostgreSQL, a server on ``MENTIS_DATABASE_URL`` kept them in this
    local file (the store path: ``$MENTIS_HOME/mentis.db`` unless ``MENTIS_DB`` says otherwise).
    """
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True, timeout=30)
        try:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
            if "tokens" not in tables:
                return None
            if "meta" in tables and conn.execute("SELECT 1 FROM meta WHERE key = ?", (moved_key,)).fetchone():
                return None
            return conn.execute(f"SELECT {ROW_COLUMNS}, revoked_at FROM tokens").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError(
            f"could not read the tokens of {path} to move them into PostgreSQL: {exc}; "
            "repair or move that file, or point MENTIS_DB elsewhere"
        ) from None


def mark_moved(path: Path, moved_key: str, at: str) -> None:
    """Record in the local file ``path`` that its tokens were moved (``moved_key`` says where),
    so :func:`legacy_rows` offers them once."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES(?, ?)", (moved_key, at))
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError(f"could not record in {path} that its tokens moved into PostgreSQL: {exc}") from None
