"""Plumbing of the SQLite store: the file's connection, its transactions and error translation
(the shared SQL is :mod:`mentis.store.shared.relational`'s; the in-process indexes are
:mod:`mentis.store.sqlite.indexes`'s)."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from mentis.errors import StoreError
from mentis.store.shared.files import private_files

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
ERASE_WAIT_MS = 2_000
"""How long a forget's WAL checkpoint waits for other connections' older read snapshots."""


@contextmanager
def translating(what: str, path: str) -> Iterator[None]:
    """Raise a StoreError naming ``path`` and what to do for an sqlite3 error inside the block."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise _store_error(what, path, exc) from exc
    except UnicodeDecodeError as exc:
        # sqlite3 could not decode SQLite's own message: it quotes bytes of a damaged schema
        text = exc.object.decode("utf-8", "replace") if isinstance(exc.object, bytes) else str(exc)
        raise _store_error(what, path, sqlite3.DatabaseError(text)) from exc


class SqliteFile:
    """An open SQLite file in WAL mode: one connection guarded by a lock, and its transactions."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.lock = threading.RLock()
        """Held by every use of :attr:`conn` (it is shared by the store's threads)."""
        self.erase_pending = False
        """A forget's checkpoint could not erase the WAL in time: retried after the next write."""
        with translating("open", self.path), private_files(self.path):
            self.conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
            self.conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            mode = _switch_to_wal(self.conn)
            if mode != "wal":
                raise StoreError(f"could not switch {self.path} to WAL mode (got {mode!r})")
            self.conn.execute("PRAGMA synchronous=FULL")
            self.conn.execute("PRAGMA foreign_keys=OFF")
            self.conn.execute("PRAGMA secure_delete=ON")

    def translate(self, what: str) -> AbstractContextManager[None]:
        return translating(what, self.path)

    @contextmanager
    def write(self, commit: bool = True) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: the write lock of the whole file is held from the first
        statement (so every chain's). ``commit=False`` rolls it back at the end (a write
        prepared, not made)."""
        with self.lock, self.translate("write"):
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            if not commit:
                conn.execute("ROLLBACK")
                return
            conn.execute("COMMIT")
        if self.erase_pending:  # an earlier forget's checkpoint waited out its time
            self.erase_on_disk()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction, so multi-statement reads see one snapshot."""
        with self.lock, self.translate("read"):
            conn = self.conn
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    @contextmanager
    def peek(self) -> Iterator[sqlite3.Connection]:
        """The connection for one statement, outside a transaction (a single statement reads one
        snapshot anyway)."""
        with self.lock, self.translate("read"):
            yield self.conn

    def erase_on_disk(self) -> None:
        """After a forget commits: copy the WAL into the database and truncate it, so the erased
        text survives neither in the WAL nor (``secure_delete`` zeroes freed space) in the file.

        A TRUNCATE checkpoint waits for every other connection reading an older snapshot; it waits
        at most ``ERASE_WAIT_MS`` (it holds this process's store lock meanwhile), and when a reader
        outlasts that, the erasure is retried after the next write and at close."""
        with self.lock, self.translate("checkpoint"):
            self.conn.execute(f"PRAGMA busy_timeout={ERASE_WAIT_MS}")
            try:
                busy, _, _ = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                self.conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self.erase_pending = bool(busy)
        if busy:
            log.warning(
                "forgotten content may stay in %s-wal until the next checkpoint: another connection was "
                "reading an older snapshot throughout the %.1f s wait; retried after the next write",
                self.path,
                ERASE_WAIT_MS / 1000,
            )

    def close(self) -> None:
        if self.erase_pending:
            with contextlib.suppress(StoreError):
                self.erase_on_disk()
        with self.lock:
            self.conn.close()


def _switch_to_wal(conn: sqlite3.Connection) -> str:
    """``PRAGMA journal_mode=WAL``, retried while another process creates or converts the file:
    SQLite answers "database is locked" at once there, without calling the busy handler (seen with
    six processes opening a new file together)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.002
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _store_error(what: str, path: str, exc: sqlite3.DatabaseError) -> StoreError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return StoreError(f"{what} failed: {path} stayed locked past {BUSY_TIMEOUT_MS // 1000} s: {text}")
    if "malformed" in text or (isinstance(exc, sqlite3.DatabaseError) and "not a database" in text):
        return StoreError(f"{what} failed: {path} is damaged ({text}); restore it from a backup or export")
    if "disk" in text or "full" in text:
        return StoreError(f"{what} failed: {path}: {text}; free some disk space")
    return StoreError(f"{what} failed on {path}: {text}")
