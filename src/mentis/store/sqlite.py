"""The embedded default store: one SQLite file, WAL, FTS5, vectors in the same file.

Tables (``schema.sql`` in prose):

- ``entries``  the ledger, one row per entry (``UNIQUE(chain, seq)``); never updated or deleted.
- ``bodies``   canonical JSON bytes of each entry's body, keyed by the entry's rowid; forgetting
  deletes a body, nothing else ever changes one.
- ``heads``    each chain's last (seq, hash), so a truncated chain is caught on open.
- derived, rebuilt from the ledger by :meth:`SqliteStore.rebuild`: ``attempt_idx`` (keys only),
  ``correction_idx``, ``task_idx``, ``forgotten``, ``attempt_fts`` (contentless FTS5: the index,
  not the text) and ``vectors`` (float32 blobs). No derived table holds a copy of content:
  everything a read returns is parsed from a body whose hash is checked as it is read.

Writes run in ``BEGIN IMMEDIATE`` transactions that include the ledger entry, so writers in
several processes serialise on SQLite's lock and a chain can never fork. Vectors are searched
through an in-process :class:`VectorIndex` that picks up other processes' writes by watching
``PRAGMA data_version``.
"""

from __future__ import annotations

import base64
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from mentis.errors import Conflict, IntegrityError, NotFound, QueryError, StoreError
from mentis.ledger import ChainReport, Entry, canonical, entry_hash, seal, sha256_hex, verify_rows
from mentis.retrieval.vectors import VectorIndex
from mentis.store.base import Embed, SqlResult, StoredAttempt

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30_000
FTS_WEIGHTS = (3.0, 1.0, 1.0, 0.5, 1.5, 1.0)
"""bm25 weights for title, action, observation, inference, files, tags."""

_LEDGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries(
    rowid INTEGER PRIMARY KEY,
    v INTEGER NOT NULL, chain TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
    id TEXT NOT NULL, at TEXT NOT NULL, agent TEXT NOT NULL, prev TEXT NOT NULL,
    body_hash TEXT NOT NULL, key_id TEXT, sig TEXT, hash TEXT NOT NULL,
    UNIQUE(chain, seq));
CREATE TABLE IF NOT EXISTS bodies(rowid INTEGER PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS heads(chain TEXT PRIMARY KEY, seq INTEGER NOT NULL, hash TEXT NOT NULL);
"""

_DERIVED_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempt_idx(
    rowid INTEGER PRIMARY KEY, attempt_id TEXT NOT NULL UNIQUE, repository TEXT NOT NULL,
    task_id TEXT NOT NULL, status TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS attempt_task ON attempt_idx(repository, task_id);
CREATE TABLE IF NOT EXISTS correction_idx(rowid INTEGER PRIMARY KEY, attempt_rowid INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS correction_attempt ON correction_idx(attempt_rowid);
CREATE TABLE IF NOT EXISTS task_idx(
    repository TEXT NOT NULL, task_id TEXT NOT NULL, title_rowid INTEGER,
    PRIMARY KEY(repository, task_id));
CREATE TABLE IF NOT EXISTS forgotten(
    attempt_id TEXT PRIMARY KEY, repository TEXT NOT NULL, tomb_rowid INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS attempt_fts USING fts5(
    title, action, observation, inference, files, tags,
    content='', tokenize='porter unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS vectors(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, vec BLOB NOT NULL);
"""
_DERIVED_TABLES = (
    "attempt_idx",
    "correction_idx",
    "task_idx",
    "forgotten",
    "attempt_fts",
    "vectors",
)

_ENTRY_COLS = "e.v, e.chain, e.seq, e.kind, e.id, e.at, e.agent, e.prev, e.body_hash, e.key_id, e.sig, e.hash"

# Views for `recall` SQL: every returned value is read out of a body (hash-covered data).
_VIEWS = """
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
FROM main.attempt_idx a JOIN main.bodies b ON b.rowid = a.rowid
WHERE mentis_visible(a.repository);

CREATE TEMP VIEW corrections AS
SELECT json_extract(b.body, '$.attempt_id') AS attempt_id,
       json_extract(b.body, '$.repository') AS repository,
       json_extract(b.body, '$.reason') AS reason,
       json_extract(b.body, '$.latest_commit') AS latest_commit,
       json_extract(b.body, '$.at') AS at,
       json_extract(b.body, '$.agent_id') AS agent_id
FROM main.correction_idx c JOIN main.bodies b ON b.rowid = c.rowid
JOIN main.attempt_idx a ON a.rowid = c.attempt_rowid
WHERE mentis_visible(a.repository);

CREATE TEMP VIEW tasks AS
SELECT t.repository AS repository, t.task_id AS task_id,
       json_extract(tb.body, '$.task_title') AS title,
       (SELECT min(json_extract(b.body, '$.created_at')) FROM main.attempt_idx a
          JOIN main.bodies b ON b.rowid = a.rowid
         WHERE a.repository = t.repository AND a.task_id = t.task_id) AS created_at,
       (SELECT count(*) FROM main.attempt_idx a
         WHERE a.repository = t.repository AND a.task_id = t.task_id) AS attempt_count
FROM main.task_idx t LEFT JOIN main.bodies tb ON tb.rowid = t.title_rowid
WHERE mentis_visible(t.repository);
"""
VIEW_NAMES = frozenset({"attempts", "corrections", "tasks"})
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


def _status(body: dict[str, Any]) -> str:
    check = body.get("check")
    return str(check["status"]) if check else "unverified"


def _fts_fields(body: dict[str, Any]) -> tuple[str, str, str, str, str, str]:
    return (
        body.get("task_title") or "",
        body["action"],
        body["observation"],
        body.get("inference") or "",
        " ".join(body.get("files") or ()),
        " ".join(body.get("tags") or ()),
    )


class SqliteStore:
    """One SQLite file holding the ledger, bodies and derived tables."""

    def __init__(self, path: str | Path, dim: int, *, verify: bool = True) -> None:
        self.path = str(path)
        self.dim = dim
        self._lock = threading.RLock()
        self._ro: sqlite3.Connection | None = None
        self._authorizer = _Authorizer()
        self._index = VectorIndex(dim)
        self._index_count = 0
        self._index_stale = True
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self._translate("open"):
            self._conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
            self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise StoreError(f"could not switch {self.path} to WAL mode (got {mode!r})")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=OFF")
            with self._write() as conn:
                for stmt in (_LEDGER_SCHEMA + _DERIVED_SCHEMA).split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                found = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                if found is None:
                    conn.execute(
                        "INSERT INTO meta(key, value) VALUES('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                elif int(found[0]) > SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.path} has schema version {found[0]}, newer than this Mentis "
                        f"({SCHEMA_VERSION}); upgrade Mentis"
                    )
            self._data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if verify:
            self.verify()

    # ------------------------------------------------------------ plumbing

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise _store_error(what, self.path, exc) from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: the write lock is held from the first statement."""
        with self._lock, self._translate("write"):
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self._index_stale = True

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction, so multi-statement reads see one snapshot."""
        with self._lock, self._translate("read"):
            conn = self._conn
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._ro is not None:
                self._ro.close()
                self._ro = None
            self._conn.close()

    def get_meta(self, key: str) -> str | None:
        with self._lock, self._translate("read"):
            row = self._conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, value))

    def counts(self) -> dict[str, int]:
        with self._read() as conn:
            return {
                "entries": conn.execute("SELECT count(*) FROM entries").fetchone()[0],
                "attempts": conn.execute("SELECT count(*) FROM attempt_idx").fetchone()[0],
                "chains": conn.execute("SELECT count(*) FROM heads").fetchone()[0],
            }

    # ------------------------------------------------------------ verification

    def verify(self) -> list[ChainReport]:
        with self._read() as conn:
            heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
            rows = conn.execute(
                f"SELECT {_ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b "
                "ON b.rowid = e.rowid ORDER BY e.chain, e.seq"
            )
            reports = verify_rows(rows, heads)
            orphans = conn.execute(
                "SELECT b.rowid FROM bodies b LEFT JOIN entries e ON e.rowid = b.rowid "
                "WHERE e.rowid IS NULL LIMIT 1"
            ).fetchone()
        if orphans is not None:
            raise IntegrityError(
                f"ledger does not verify: body row {orphans[0]} belongs to no entry. "
                "The store was changed outside Mentis; restore it from a backup or an export."
            )
        return reports

    # ------------------------------------------------------------ writes

    def _append(
        self,
        conn: sqlite3.Connection,
        chain: str,
        kind: str,
        id_: str,
        at: str,
        agent: str,
        body: bytes,
    ) -> tuple[int, Entry]:
        head = conn.execute("SELECT seq, hash FROM heads WHERE chain=?", (chain,)).fetchone()
        seq, prev = (0, "") if head is None else (head[0] + 1, head[1])
        entry = seal(chain=chain, seq=seq, prev=prev, kind=kind, id=id_, at=at, agent=agent, body=body)
        return self._insert(conn, entry, body), entry

    @staticmethod
    def _insert(conn: sqlite3.Connection, e: Entry, body: bytes | None) -> int:
        cur = conn.execute(
            "INSERT INTO entries(v, chain, seq, kind, id, at, agent, prev, body_hash, key_id, sig, hash) "
            "VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                e.v,
                e.chain,
                e.seq,
                e.kind,
                e.id,
                e.at,
                e.agent,
                e.prev,
                e.body_hash,
                e.key_id,
                e.sig,
                e.hash,
            ),
        )
        rowid = int(cur.lastrowid or 0)
        if body is not None:
            conn.execute("INSERT INTO bodies(rowid, body) VALUES(?, ?)", (rowid, body))
        conn.execute("INSERT OR REPLACE INTO heads(chain, seq, hash) VALUES(?,?,?)", (e.chain, e.seq, e.hash))
        return rowid

    def append_attempt(
        self,
        chain: str,
        attempt_id: str,
        at: str,
        agent: str,
        body: dict[str, Any],
        vector: np.ndarray,
    ) -> Entry:
        raw = canonical(body)
        with self._write() as conn:
            rowid, entry = self._append(conn, chain, "attempt", attempt_id, at, agent, raw)
            self._derive_attempt(conn, rowid, body, vector)
        return entry

    def append_correction(
        self, chain: str, correction_id: str, at: str, agent: str, body: dict[str, Any]
    ) -> tuple[Entry, int]:
        raw = canonical(body)
        with self._write() as conn:
            attempt_rowid = self._live_attempt_rowid(conn, chain, body["attempt_id"])
            rowid, entry = self._append(conn, chain, "correction", correction_id, at, agent, raw)
            conn.execute(
                "INSERT INTO correction_idx(rowid, attempt_rowid) VALUES(?,?)",
                (rowid, attempt_rowid),
            )
            count = conn.execute(
                "SELECT count(*) FROM correction_idx WHERE attempt_rowid=?", (attempt_rowid,)
            ).fetchone()[0]
        return entry, int(count)

    def forget_attempt(
        self,
        chain: str,
        tombstone_id: str,
        at: str,
        agent: str,
        attempt_id: str,
        reason: str | None,
    ) -> Entry:
        with self._write() as conn:
            rowid = self._live_attempt_rowid(conn, chain, attempt_id)
            erased_rowids = [rowid] + [
                r for (r,) in conn.execute("SELECT rowid FROM correction_idx WHERE attempt_rowid=?", (rowid,))
            ]
            marks = ",".join("?" * len(erased_rowids))
            seqs = sorted(
                s for (s,) in conn.execute(f"SELECT seq FROM entries WHERE rowid IN ({marks})", erased_rowids)
            )
            body = {
                "attempt_id": attempt_id,
                "repository": chain,
                "erased": seqs,
                "reason": reason,
                "agent_id": agent,
                "at": at,
            }
            tomb_rowid, entry = self._append(conn, chain, "forget", tombstone_id, at, agent, canonical(body))
            self._derive_forget(conn, tomb_rowid, body)
        return entry

    def _live_attempt_rowid(self, conn: sqlite3.Connection, chain: str, attempt_id: str) -> int:
        row = conn.execute(
            "SELECT rowid FROM attempt_idx WHERE attempt_id=? AND repository=?", (attempt_id, chain)
        ).fetchone()
        if row is not None:
            return int(row[0])
        gone = conn.execute(
            "SELECT 1 FROM forgotten WHERE attempt_id=? AND repository=?", (attempt_id, chain)
        ).fetchone()
        if gone is not None:
            raise Conflict(f"attempt {attempt_id} in {chain} was forgotten; its content is erased")
        raise NotFound(f"no attempt {attempt_id} in repository {chain}; search or recall to find its id")

    # ------------------------------------------------------------ derivation (live and rebuild)

    def _derive_attempt(
        self, conn: sqlite3.Connection, rowid: int, body: dict[str, Any], vector: np.ndarray
    ) -> None:
        repo, task = body["repository"], body["task_id"]
        conn.execute(
            "INSERT INTO attempt_idx(rowid, attempt_id, repository, task_id, status) VALUES(?,?,?,?,?)",
            (rowid, body["attempt_id"], repo, task, _status(body)),
        )
        conn.execute(
            "INSERT INTO attempt_fts(rowid, title, action, observation, inference, files, tags) "
            "VALUES(?,?,?,?,?,?,?)",
            (rowid, *_fts_fields(body)),
        )
        conn.execute(
            "INSERT INTO vectors(rowid, repository, vec) VALUES(?,?,?)",
            (rowid, repo, np.ascontiguousarray(vector, dtype=np.float32).tobytes()),
        )
        title_rowid = rowid if body.get("task_title") else None
        conn.execute(
            "INSERT INTO task_idx(repository, task_id, title_rowid) VALUES(?,?,?) "
            "ON CONFLICT(repository, task_id) DO UPDATE SET "
            "title_rowid = coalesce(excluded.title_rowid, task_idx.title_rowid)",
            (repo, task, title_rowid),
        )

    def _derive_forget(self, conn: sqlite3.Connection, tomb_rowid: int, tomb: dict[str, Any]) -> None:
        attempt_id, repo = tomb["attempt_id"], tomb["repository"]
        conn.execute(
            "INSERT OR REPLACE INTO forgotten(attempt_id, repository, tomb_rowid) VALUES(?,?,?)",
            (attempt_id, repo, tomb_rowid),
        )
        row = conn.execute(
            "SELECT a.rowid, a.task_id, b.body FROM attempt_idx a LEFT JOIN bodies b ON b.rowid = a.rowid "
            "WHERE a.attempt_id=? AND a.repository=?",
            (attempt_id, repo),
        ).fetchone()
        if row is None:
            return
        rowid, task_id, raw = row
        if raw is not None:
            body = orjson.loads(raw)
            conn.execute(
                "INSERT INTO attempt_fts(attempt_fts, rowid, title, action, observation, inference, files, "
                "tags) VALUES('delete',?,?,?,?,?,?,?)",
                (rowid, *_fts_fields(body)),
            )
        corr = [
            r for (r,) in conn.execute("SELECT rowid FROM correction_idx WHERE attempt_rowid=?", (rowid,))
        ]
        for r in [rowid, *corr]:
            conn.execute("DELETE FROM bodies WHERE rowid=?", (r,))
        conn.execute("DELETE FROM correction_idx WHERE attempt_rowid=?", (rowid,))
        conn.execute("DELETE FROM vectors WHERE rowid=?", (rowid,))
        conn.execute("DELETE FROM attempt_idx WHERE rowid=?", (rowid,))
        self._retitle(conn, repo, task_id)

    @staticmethod
    def _retitle(conn: sqlite3.Connection, repo: str, task_id: str) -> None:
        left = conn.execute(
            "SELECT a.rowid FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
            "WHERE a.repository=? AND a.task_id=? ORDER BY "
            "json_extract(b.body, '$.task_title') IS NOT NULL DESC, a.rowid DESC LIMIT 1",
            (repo, task_id),
        ).fetchone()
        if left is None:
            conn.execute("DELETE FROM task_idx WHERE repository=? AND task_id=?", (repo, task_id))
            return
        titled = conn.execute(
            "SELECT max(a.rowid) FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
            "WHERE a.repository=? AND a.task_id=? AND json_extract(b.body, '$.task_title') IS NOT NULL",
            (repo, task_id),
        ).fetchone()[0]
        conn.execute(
            "UPDATE task_idx SET title_rowid=? WHERE repository=? AND task_id=?",
            (titled, repo, task_id),
        )

    # ------------------------------------------------------------ reads

    def attempt_keys(self, rowids: Sequence[int]) -> dict[int, tuple[str, str, str]]:
        """(repository, task_id, attempt_id) of live attempts among ``rowids``."""
        out: dict[int, tuple[str, str, str]] = {}
        with self._read() as conn:
            for start in range(0, len(rowids), 500):
                chunk = list(rowids[start : start + 500])
                marks = ",".join("?" * len(chunk))
                for r, repo, task, aid in conn.execute(
                    "SELECT rowid, repository, task_id, attempt_id FROM attempt_idx "
                    f"WHERE rowid IN ({marks})",
                    chunk,
                ):
                    out[r] = (repo, task, aid)
        return out

    def lexical(self, match: str, repository: str | None, limit: int) -> list[tuple[int, float]]:
        weights = ",".join(str(w) for w in FTS_WEIGHTS)
        sql = f"SELECT f.rowid, bm25(attempt_fts, {weights}) AS s FROM attempt_fts f"
        args: list[Any] = [match]
        if repository is not None:
            sql += " JOIN attempt_idx a ON a.rowid = f.rowid WHERE attempt_fts MATCH ? AND a.repository = ?"
            args.append(repository)
        else:
            sql += " WHERE attempt_fts MATCH ?"
        sql += " ORDER BY s LIMIT ?"
        args.append(limit)
        with self._lock, self._translate("lexical search"):
            return [(int(r), -float(s)) for r, s in self._conn.execute(sql, args)]

    def vector(self, query: np.ndarray, repository: str | None, limit: int) -> list[tuple[int, float]]:
        self._refresh_index()
        return self._index.search(query, repository, limit)

    def _refresh_index(self) -> None:
        """Bring the vector index up to date with the file (this and other processes' writes)."""
        with self._lock, self._translate("vector index"):
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            if version == self._data_version and not self._index_stale:
                return
            self._conn.execute("BEGIN")
            try:
                count = self._conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
                start = self._index.max_rowid
                if count < self._index_count + 0 or count < len(self._index):
                    self._index.clear()
                    start = 0
                rows = self._conn.execute(
                    "SELECT rowid, repository, vec FROM vectors WHERE rowid > ? ORDER BY rowid",
                    (start,),
                ).fetchall()
                if rows:
                    matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
                    self._index.add([r[0] for r in rows], [r[1] for r in rows], matrix.reshape(-1, self.dim))
                if len(self._index) != count:
                    # A forget removed rows below our high-water mark: reload from scratch.
                    self._index.clear()
                    rows = self._conn.execute(
                        "SELECT rowid, repository, vec FROM vectors ORDER BY rowid"
                    ).fetchall()
                    if rows:
                        matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
                        self._index.add(
                            [r[0] for r in rows], [r[1] for r in rows], matrix.reshape(-1, self.dim)
                        )
                self._index_count = count
            finally:
                self._conn.execute("COMMIT")
            self._data_version = version
            self._index_stale = False

    def _load(
        self, conn: sqlite3.Connection, rowids: Sequence[int], kind: str
    ) -> dict[int, tuple[Entry, dict[str, Any]]]:
        """Entries and parsed bodies for ``rowids``, each body checked against its entry's hash."""
        out: dict[int, tuple[Entry, dict[str, Any]]] = {}
        for start in range(0, len(rowids), 500):
            chunk = list(rowids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for row in conn.execute(
                f"SELECT e.rowid, {_ENTRY_COLS}, b.body FROM entries e JOIN bodies b ON b.rowid = e.rowid "
                f"WHERE e.rowid IN ({marks})",
                chunk,
            ):
                rowid, raw = row[0], row[-1]
                e = Entry(
                    v=row[1],
                    chain=row[2],
                    seq=row[3],
                    kind=row[4],
                    id=row[5],
                    at=row[6],
                    agent=row[7],
                    prev=row[8],
                    body_hash=row[9],
                    key_id=row[10],
                    sig=row[11],
                    hash=row[12],
                )
                if entry_hash(e.document()) != e.hash or sha256_hex(raw) != e.body_hash or e.kind != kind:
                    raise IntegrityError(
                        f"ledger does not verify: chain {e.chain!r} seq {e.seq}: entry or body changed "
                        "while the store was open; run `mentis verify`",
                        chain=e.chain,
                        seq=e.seq,
                    )
                out[rowid] = (e, orjson.loads(raw))
        return out

    def load_attempts(self, rowids: Sequence[int]) -> dict[int, StoredAttempt]:
        with self._read() as conn:
            return self._attempts(conn, rowids)

    def _attempts(self, conn: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, StoredAttempt]:
        loaded = self._load(conn, rowids, "attempt")
        corr_of: dict[int, list[int]] = {}
        for start in range(0, len(rowids), 500):
            chunk = list(rowids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for crow, arow in conn.execute(
                f"SELECT rowid, attempt_rowid FROM correction_idx WHERE attempt_rowid IN ({marks}) "
                "ORDER BY rowid",
                chunk,
            ):
                corr_of.setdefault(arow, []).append(crow)
        corr_bodies = self._load(conn, [c for cs in corr_of.values() for c in cs], "correction")
        out: dict[int, StoredAttempt] = {}
        for rowid, (entry, body) in loaded.items():
            if body.get("attempt_id") != entry.id or body.get("repository") != entry.chain:
                raise IntegrityError(
                    f"attempt body at chain {entry.chain!r} seq {entry.seq} does not match its entry",
                    chain=entry.chain,
                    seq=entry.seq,
                )
            corrections = [corr_bodies[c][1] for c in corr_of.get(rowid, [])]
            out[rowid] = StoredAttempt(rowid=rowid, entry=entry, body=body, corrections=corrections)
        return out

    def find_attempt(self, attempt_id: str) -> tuple[str, bool] | None:
        """(repository, forgotten) for an attempt id, or None when unknown."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT repository FROM attempt_idx WHERE attempt_id=?", (attempt_id,)
            ).fetchone()
            if row is not None:
                return str(row[0]), False
            row = conn.execute(
                "SELECT repository FROM forgotten WHERE attempt_id=?", (attempt_id,)
            ).fetchone()
            return None if row is None else (str(row[0]), True)

    def task_info(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[str | None, int]]:
        """(title, attempt_count) per (repository, task_id)."""
        out: dict[tuple[str, str], tuple[str | None, int]] = {}
        with self._read() as conn:
            title_rows: dict[int, tuple[str, str]] = {}
            for repo, task in keys:
                row = conn.execute(
                    "SELECT title_rowid, (SELECT count(*) FROM attempt_idx a "
                    "WHERE a.repository = t.repository AND a.task_id = t.task_id) "
                    "FROM task_idx t WHERE repository=? AND task_id=?",
                    (repo, task),
                ).fetchone()
                if row is None:
                    continue
                out[(repo, task)] = (None, int(row[1]))
                if row[0] is not None:
                    title_rows[int(row[0])] = (repo, task)
            for rowid, (_, body) in self._load(conn, list(title_rows), "attempt").items():
                key = title_rows[rowid]
                out[key] = (body.get("task_title"), out[key][1])
        return out

    def task_history(self, repository: str, task_id: str) -> list[StoredAttempt]:
        with self._read() as conn:
            rowids = [
                r
                for (r,) in conn.execute(
                    "SELECT rowid FROM attempt_idx WHERE repository=? AND task_id=? ORDER BY rowid",
                    (repository, task_id),
                )
            ]
            found = self._attempts(conn, rowids)
        return [found[r] for r in rowids]

    # ------------------------------------------------------------ recall SQL

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
                    self._authorizer.reset()
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
            except sqlite3.DatabaseError as exc:
                text = str(exc)
                if "interrupted" in text:
                    raise QueryError(f"query ran past the {timeout_s:g} s limit and was stopped") from None
                if "not authorized" in text or "prohibited" in text:
                    raise QueryError(
                        "query refused: recall SQL may only SELECT from the views "
                        f"{', '.join(sorted(VIEW_NAMES))}"
                    ) from None
                raise QueryError(f"query failed: {text}") from None
            finally:
                conn.set_progress_handler(None, 0)
        return SqlResult(columns=columns, rows=rows, truncated=truncated, truncation_reason=reason)

    def _readonly(self) -> sqlite3.Connection:
        if self._ro is None:
            uri = Path(self.path).resolve().as_uri() + "?mode=ro"
            ro = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            ro.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            ro.create_function("mentis_visible", 1, lambda repo: 1)
            ro.executescript(_VIEWS)
            tables = frozenset(n for (n,) in ro.execute("SELECT name FROM main.sqlite_master")) | _SYSTEM
            self._authorizer = _Authorizer(tables)
            ro.set_authorizer(self._authorizer)
            self._ro = ro
        return self._ro

    # ------------------------------------------------------------ export, import, rebuild

    def iter_ledger(self) -> Iterator[tuple[Entry, bytes | None]]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid "
                "ORDER BY e.chain, e.seq"
            ).fetchall()
        for r in rows:
            yield (
                Entry(
                    v=r[0],
                    chain=r[1],
                    seq=r[2],
                    kind=r[3],
                    id=r[4],
                    at=r[5],
                    agent=r[6],
                    prev=r[7],
                    body_hash=r[8],
                    key_id=r[9],
                    sig=r[10],
                    hash=r[11],
                ),
                r[12],
            )

    def import_ledger(self, items: Sequence[tuple[Entry, bytes | None]], embed: Embed) -> int:
        """Append already-verified chains that this store does not hold yet."""
        chains = sorted({e.chain for e, _ in items})
        with self._write() as conn:
            for chain in chains:
                if conn.execute("SELECT 1 FROM heads WHERE chain=?", (chain,)).fetchone():
                    raise Conflict(f"this store already holds chain {chain!r}; import into a fresh store")
            placed = [(self._insert(conn, e, body), e, body) for e, body in items]
            self._replay(conn, placed, embed, None)
        return len(placed)

    def rebuild(self, embed: Embed, progress: Callable[[int], None] | None = None) -> int:
        """Drop every derived table and regenerate it from the ledger, in one transaction."""
        with self._write() as conn:
            for table in _DERIVED_TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            for stmt in _DERIVED_SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            rows = conn.execute(
                f"SELECT e.rowid, {_ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b "
                "ON b.rowid = e.rowid ORDER BY e.rowid"
            ).fetchall()
            placed = [
                (
                    r[0],
                    Entry(
                        v=r[1],
                        chain=r[2],
                        seq=r[3],
                        kind=r[4],
                        id=r[5],
                        at=r[6],
                        agent=r[7],
                        prev=r[8],
                        body_hash=r[9],
                        key_id=r[10],
                        sig=r[11],
                        hash=r[12],
                    ),
                    r[13],
                )
                for r in rows
            ]
            self._replay(conn, placed, embed, progress)
        self._index.clear()
        self._index_count = 0
        return len(placed)

    def _replay(
        self,
        conn: sqlite3.Connection,
        placed: Sequence[tuple[int, Entry, bytes | None]],
        embed: Embed,
        progress: Callable[[int], None] | None,
    ) -> None:
        """Derive tables for entries in ledger order; attempts are embedded in batches."""
        batch: list[tuple[int, dict[str, Any]]] = []

        def flush() -> None:
            if batch:
                vectors = embed([b for _, b in batch])
                for (rowid, body), vec in zip(batch, vectors, strict=True):
                    self._derive_attempt(conn, rowid, body, vec)
                if progress is not None:
                    progress(len(batch))
                batch.clear()

        for rowid, entry, raw in placed:
            if raw is None:
                continue
            body = orjson.loads(raw)
            if entry.kind == "attempt":
                batch.append((rowid, body))
                if len(batch) >= 128:
                    flush()
                continue
            flush()
            if entry.kind == "correction":
                arow = conn.execute(
                    "SELECT rowid FROM attempt_idx WHERE attempt_id=?", (body["attempt_id"],)
                ).fetchone()
                if arow is not None:
                    conn.execute(
                        "INSERT INTO correction_idx(rowid, attempt_rowid) VALUES(?,?)",
                        (rowid, arow[0]),
                    )
            elif entry.kind == "forget":
                self._derive_forget(conn, rowid, body)
        flush()


class _Authorizer:
    """Allow SELECT over the documented views only.

    Reads inside a view are the view's. SQLite also reports a column-less read of a base table
    at top level when it flattens ``count(*)`` over a view; that is allowed only for a table the
    same statement already read through one of our views, so ``count(*)`` on an internal table
    stays refused. ``reset`` runs before each statement is prepared.
    """

    def __init__(self, tables: frozenset[str] = frozenset()) -> None:
        self.tables = tables
        self.via_view: set[str] = set()

    def reset(self) -> None:
        self.via_view.clear()

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None
    ) -> int:
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            if source in VIEW_NAMES:
                self.via_view.add(str(arg1))
                return sqlite3.SQLITE_OK
            if db == "temp" and arg1 in VIEW_NAMES:
                return sqlite3.SQLITE_OK
            if db is None and arg1 not in self.tables:  # a CTE the statement defines
                return sqlite3.SQLITE_OK
            if arg2 == "" and arg1 in self.via_view:
                return sqlite3.SQLITE_OK
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION:
            return sqlite3.SQLITE_DENY if (arg2 or "").lower() in _DENIED_FUNCTIONS else sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _store_error(what: str, path: str, exc: sqlite3.DatabaseError) -> StoreError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return StoreError(f"{what} failed: {path} stayed locked past {BUSY_TIMEOUT_MS // 1000} s: {text}")
    if "malformed" in text or (isinstance(exc, sqlite3.DatabaseError) and "not a database" in text):
        return StoreError(f"{what} failed: {path} is damaged ({text}); restore it from a backup or export")
    if "disk" in text or "full" in text:
        return StoreError(f"{what} failed: {path}: {text}; free some disk space")
    return StoreError(f"{what} failed on {path}: {text}")
