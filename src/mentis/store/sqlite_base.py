"""Plumbing shared by the SQLite store's parts: the connection, transactions, error
translation, entry appends, hash-checked body loading and the in-process vector indexes."""

from __future__ import annotations

import contextlib
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

from mentis.errors import IntegrityError, StoreError
from mentis.ledger import Entry, entry_hash, seal, sha256_hex
from mentis.retrieval import lexical, match_terms
from mentis.retrieval.vectors import VectorIndex
from mentis.store.files import private_files

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
ERASE_WAIT_MS = 2_000
"""How long a forget's WAL checkpoint waits for other connections' older read snapshots."""
LEXICAL_SELECT_MIN_DOCS = 1_000
"""Below this many documents every query term is used; above it, terms in most documents are not.

Measured on SeaMonkey (1,076 reports): dropping terms found in more than half the documents left
every ranking unchanged and cut BM25 time by a third; a budget on postings read (the rarest terms
up to a quarter of the documents' worth) cost 3.3 points of fused R@5, so there is none."""
VECTOR_TABLES = ("vectors", "thought_vectors")
TERM_TABLES = ("attempt_terms", "thought_terms")
LEXICON_SCHEMA = """
CREATE TABLE IF NOT EXISTS lex_vocab(
    id INTEGER PRIMARY KEY AUTOINCREMENT, term TEXT NOT NULL UNIQUE, df INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS attempt_terms(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, len INTEGER NOT NULL, terms BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS thought_terms(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, len INTEGER NOT NULL, terms BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS removed_rows(
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, row INTEGER NOT NULL);
"""
"""The lexical index's derived tables: the stem vocabulary with each stem's document count, and
each document's packed ``(term id, weighted tf)`` pairs (see :mod:`mentis.retrieval.lexical`).
A stem no document holds any more is deleted (forget erases index rows); ids are never reused.

``removed_rows`` logs the rowids a forget removed (``kind`` attempt or thought), so every
process's in-process indexes drop them in place on their next refresh instead of reloading."""
REMOVED_KIND = {
    "vectors": "attempt",
    "attempt_terms": "attempt",
    "thought_vectors": "thought",
    "thought_terms": "thought",
}
ENTRY_COLS = "e.v, e.chain, e.seq, e.kind, e.id, e.at, e.agent, e.prev, e.body_hash, e.key_id, e.sig, e.hash"


class SqliteBase:
    """An open SQLite file in WAL mode with one connection guarded by a lock."""

    def __init__(self, path: str | Path, dim: int) -> None:
        self.path = str(path)
        self.dim = dim
        self._lock = threading.RLock()
        self._indexes = {table: VectorIndex(dim) for table in VECTOR_TABLES}
        self._lexicons = {table: lexical.LexicalIndex() for table in TERM_TABLES}
        self._lex_stale = set(TERM_TABLES)
        self._lex_version: int | None = None
        self._lex_epoch: str | None = None
        self._vec_epoch: str | None = None
        self._vocab: dict[str, int] = {}
        self._vocab_max = 0
        self._erase_pending = False
        self._removed_seen: dict[str, int] = {}  # index table → newest removed_rows id applied
        self.reloads = 0
        """Full reloads of the in-process indexes (a rebuild, reindex or migration; not a forget)."""
        self._lex: sqlite3.Connection | None = None
        self._lex_lock = threading.Lock()
        self._writes = 0
        self._stale = set(VECTOR_TABLES)
        with self._translate("open"), private_files(self.path):
            self._conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
            self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            mode = _switch_to_wal(self._conn)
            if mode != "wal":
                raise StoreError(f"could not switch {self.path} to WAL mode (got {mode!r})")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=OFF")
            self._conn.execute("PRAGMA secure_delete=ON")
        self._data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]

    # ------------------------------------------------------------ plumbing

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise _store_error(what, self.path, exc) from exc
        except UnicodeDecodeError as exc:
            # sqlite3 could not decode SQLite's own message: it quotes bytes of a damaged schema
            text = exc.object.decode("utf-8", "replace") if isinstance(exc.object, bytes) else str(exc)
            raise _store_error(what, self.path, sqlite3.DatabaseError(text)) from exc

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
            self._stale.update(VECTOR_TABLES)
            self._writes += 1
        if self._erase_pending:  # an earlier forget's checkpoint waited out its time
            self.erase_on_disk()

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

    def erase_on_disk(self) -> None:
        """After a forget commits: copy the WAL into the database and truncate it, so the erased
        text survives neither in the WAL nor (``secure_delete`` zeroes freed space) in the file.

        A TRUNCATE checkpoint waits for every other connection reading an older snapshot; it waits
        at most ``ERASE_WAIT_MS`` (it holds this process's store lock meanwhile), and when a reader
        outlasts that, the erasure is retried after the next write and at close."""
        with self._lock, self._translate("checkpoint"):
            self._conn.execute(f"PRAGMA busy_timeout={ERASE_WAIT_MS}")
            try:
                busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._erase_pending = bool(busy)
        if busy:
            log.warning(
                "forgotten content may stay in %s-wal until the next checkpoint: another connection was "
                "reading an older snapshot throughout the %.1f s wait; retried after the next write",
                self.path,
                ERASE_WAIT_MS / 1000,
            )

    def close(self) -> None:
        if self._erase_pending:
            with contextlib.suppress(StoreError):
                self.erase_on_disk()
        with self._lock:
            with self._lex_lock:
                if self._lex is not None:
                    self._lex.close()
                    self._lex = None
            self._conn.close()

    def warm(self) -> None:
        """Load the in-process lexical and vector indexes now rather than on the first search."""
        for table in VECTOR_TABLES:
            self._refresh_index(table)
        with self._lex_lock, self._translate("lexical index"):
            for table in TERM_TABLES:
                self._refresh_lexicon(table)

    def get_meta(self, key: str) -> str | None:
        with self._lock, self._translate("read"):
            row = self._conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, value))

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

    # ------------------------------------------------------------ lexical index

    def _index_terms(
        self,
        conn: sqlite3.Connection,
        table: str,
        rowid: int,
        repository: str,
        fields: Sequence[str],
        weights: Sequence[float],
    ) -> None:
        """Persist one document's weighted stems in ``table`` (inside the caller's write)."""
        tf, length = lexical.analyzer().document(fields, weights)
        ids = self._term_ids(conn, list(tf))
        conn.execute(
            f"INSERT INTO {table}(rowid, repository, len, terms) VALUES(?,?,?,?)",
            (rowid, repository, length, lexical.pack(tf, ids)),
        )

    @staticmethod
    def _term_ids(conn: sqlite3.Connection, terms: list[str]) -> dict[str, int]:
        """Vocabulary ids for one new document's distinct ``terms``, counting the document in
        each stem's ``df`` and adding the new stems (the write lock is held)."""
        ids: dict[str, int] = {}
        for start in range(0, len(terms), 500):
            chunk = terms[start : start + 500]
            marks = ",".join("?" * len(chunk))
            ids.update(conn.execute(f"SELECT term, id FROM lex_vocab WHERE term IN ({marks})", chunk))
            if ids:
                found = [ids[t] for t in chunk if t in ids]
                conn.execute(
                    f"UPDATE lex_vocab SET df = df + 1 WHERE id IN ({','.join('?' * len(found))})", found
                )
        for term in terms:
            if term not in ids:
                cur = conn.execute("INSERT INTO lex_vocab(term, df) VALUES(?, 1)", (term,))
                ids[term] = int(cur.lastrowid or 0)
        return ids

    @staticmethod
    def _unindex_terms(conn: sqlite3.Connection, table: str, rowid: int) -> None:
        """Remove one document from ``table`` and drop the stems no other document holds."""
        row = conn.execute(f"SELECT terms FROM {table} WHERE rowid=?", (rowid,)).fetchone()
        if row is None:
            return
        conn.execute(f"DELETE FROM {table} WHERE rowid=?", (rowid,))
        ids = np.frombuffer(row[0], dtype=lexical.POSTING)["t"].tolist()
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            conn.execute(f"UPDATE lex_vocab SET df = df - 1 WHERE id IN ({marks})", chunk)
            dropped = conn.execute(
                f"DELETE FROM lex_vocab WHERE id IN ({marks}) AND df <= 0 RETURNING id", chunk
            ).fetchall()
            conn.executemany("INSERT INTO removed_rows(kind, row) VALUES('term', ?)", dropped)

    def _lexical_conn(self) -> sqlite3.Connection:
        """A read-only connection of its own, so lexical search runs beside embedding and vectors."""
        if self._lex is None:
            uri = Path(self.path).resolve().as_uri() + "?mode=ro"
            lex = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            lex.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._lex = lex
            self._lex_version = None  # data_version counts per connection
        return self._lex

    def lexical_search(
        self, table: str, match: str, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 candidates among the documents of ``repositories`` (None: all) from the lexical
        index over ``table``, for a MATCH expression built by ``retrieval.fts_match`` (its quoted
        words are the query terms); statistics are those of the documents searched.

        Above ``LEXICAL_SELECT_MIN_DOCS`` documents a term found in more than half of them is
        skipped: its BM25 weight is (near) zero but its posting list is most of the table.
        """
        words = match_terms(match)
        if not words:
            return []
        analyzer = lexical.analyzer()
        with self._lex_lock, self._translate("lexical search"):
            self._refresh_lexicon(table)
            index = self._lexicons[table]
            vocab = self._vocab
            ids = [vocab[t] for w in words for t in analyzer.terms(w) if t in vocab]
            return index.search(ids, repositories, limit, LEXICAL_SELECT_MIN_DOCS)

    def _refresh_lexicon(self, table: str) -> None:
        """Bring one lexical index (and the vocabulary) up to date with the file.

        Runs on the lexical connection, whose ``data_version`` moves on any other connection's
        commit, this process's included. Rowids only grow, so the rows above the index's high
        water mark are the new ones; a new ``derived_epoch`` (a forget removed rows, a rebuild or
        migration renumbered the vocabulary) reloads everything.
        """
        conn = self._lexical_conn()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._lex_version:
            self._lex_stale.update(self._lexicons)
            self._lex_version = version
        if table not in self._lex_stale:
            return
        index = self._lexicons[table]
        conn.execute("BEGIN")
        try:
            epoch = _epoch(conn)
            if epoch != self._lex_epoch:
                self._vocab = {}
                self._vocab_max = 0
                self._lex_epoch = epoch
                for name, other in self._lexicons.items():
                    other.clear()
                    self._removed_seen.pop(name, None)
                self._lex_stale.update(self._lexicons)
                self.reloads += 1
            new = conn.execute(
                "SELECT term, id FROM lex_vocab WHERE id > ? ORDER BY id", (self._vocab_max,)
            ).fetchall()
            if new:
                self._vocab.update(new)
                self._vocab_max = int(new[-1][1])
            self._apply_removals(conn, table, index.remove)
            self._load_terms(conn, table, index.max_rowid)
        finally:
            conn.execute("COMMIT")
        self._lex_stale.discard(table)

    def _load_terms(self, conn: sqlite3.Connection, table: str, after: int) -> None:
        rows = conn.execute(
            f"SELECT rowid, repository, len, terms FROM {table} WHERE rowid > ? ORDER BY rowid", (after,)
        ).fetchall()
        if rows:
            self._lexicons[table].add_columns(*zip(*rows, strict=True))

    @staticmethod
    def _label_links(
        conn: sqlite3.Connection,
        labels: str,
        idx: str,
        heavy: str,
        seed: int,
        repositories: Sequence[str] | None,
        fanout: int,
        limit: int,
    ) -> list[tuple[int, float]]:
        """Rows of ``repositories`` (None: all) sharing labels with ``seed``: 0.5 per shared
        label of kind ``heavy``, 0.25 per other, best ``limit``; labels held by more than
        ``fanout`` rows of those repositories link nothing.

        Label rows exist only for live documents, so the index table is joined only to filter by
        repository; the ``(kind, label, rowid)`` index answers the rest without table reads.
        """
        if repositories is None:
            join = count_join = where = count_where = ""
            scope: list[str] = []
        else:
            marks = ",".join("?" * len(repositories))
            join, where = f"JOIN {idx} b ON b.rowid = l2.rowid ", f"AND b.repository IN ({marks}) "
            count_join = f"JOIN {idx} y ON y.rowid = x.rowid "
            count_where = f"AND y.repository IN ({marks}) "
            scope = list(repositories)
        sql = (
            f"SELECT l2.rowid, sum(CASE l1.kind WHEN ? THEN 0.5 ELSE 0.25 END) AS w "
            f"FROM {labels} l1 JOIN {labels} l2 ON l2.kind = l1.kind AND l2.label = l1.label "
            f"AND l2.rowid != l1.rowid {join}"
            f"WHERE l1.rowid = ? {where}AND (SELECT count(*) FROM (SELECT 1 FROM {labels} x "
            f"{count_join}WHERE x.kind = l1.kind AND x.label = l1.label {count_where}LIMIT ? + 1)) <= ? "
            "GROUP BY l2.rowid ORDER BY w DESC, l2.rowid LIMIT ?"
        )
        args = [heavy, seed, *scope, *scope, fanout, fanout, limit]
        return [(int(r), float(w)) for r, w in conn.execute(sql, args)]

    def _search_vectors(
        self, table: str, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        self._refresh_index(table)
        return self._indexes[table].search(query, repositories, limit)

    def _refresh_index(self, table: str) -> None:
        """Bring one vector index up to date with the file (this and other processes' writes).

        Rowids only grow (they are ledger rowids), so new rows are those above the index's high
        water mark; a new ``derived_epoch`` (a forget removed rows, a rebuild or reindex rewrote
        them) reloads every vector index.
        """
        index = self._indexes[table]
        with self._lock, self._translate("vector index"):
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:
                self._stale.update(VECTOR_TABLES)
                self._data_version = version
            if table not in self._stale:
                return
            self._conn.execute("BEGIN")
            try:
                epoch = _epoch(self._conn)
                if epoch != self._vec_epoch:
                    for name, other in self._indexes.items():
                        other.clear()
                        self._removed_seen.pop(name, None)
                    self._stale.update(VECTOR_TABLES)
                    self._vec_epoch = epoch
                    self.reloads += 1
                self._apply_removals(self._conn, table, index.remove)
                self._load_vectors(table, index.max_rowid)
            finally:
                self._conn.execute("COMMIT")
            self._stale.discard(table)

    def _apply_removals(
        self, conn: sqlite3.Connection, table: str, remove: Callable[[Sequence[int]], None]
    ) -> None:
        """Drop from ``table``'s in-process index the rows forgets removed since it last looked
        (inside the caller's read transaction). A freshly loaded index starts from the newest id."""
        seen = self._removed_seen.get(table)
        if seen is None:
            newest = conn.execute("SELECT coalesce(max(id), 0) FROM removed_rows").fetchone()[0]
            self._removed_seen[table] = int(newest)
            return
        rows = conn.execute(
            "SELECT id, kind, row FROM removed_rows WHERE id > ? ORDER BY id", (seen,)
        ).fetchall()
        if not rows:
            return
        remove([int(row) for _, kind, row in rows if kind == REMOVED_KIND[table]])
        dropped = {int(row) for _, kind, row in rows if kind == "term"}
        if dropped and table in self._lexicons:
            # the erased stems leave this process's vocabulary too
            self._vocab = {t: i for t, i in self._vocab.items() if i not in dropped}
        self._removed_seen[table] = int(rows[-1][0])

    def _load_vectors(self, table: str, after: int) -> None:
        rows = self._conn.execute(
            f"SELECT rowid, repository, vec FROM {table} WHERE rowid > ? ORDER BY rowid", (after,)
        ).fetchall()
        if rows:
            matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(-1, self.dim)
            self._indexes[table].add([r[0] for r in rows], [r[1] for r in rows], matrix)

    def _load(
        self, conn: sqlite3.Connection, rowids: Sequence[int], kind: str
    ) -> dict[int, tuple[Entry, dict[str, Any]]]:
        """Entries and parsed bodies for ``rowids``, each body checked against its entry's hash."""
        out: dict[int, tuple[Entry, dict[str, Any]]] = {}
        for start in range(0, len(rowids), 500):
            chunk = list(rowids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for row in conn.execute(
                f"SELECT e.rowid, {ENTRY_COLS}, b.body FROM entries e JOIN bodies b ON b.rowid = e.rowid "
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


def _epoch(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key='derived_epoch'").fetchone()
    return None if row is None else str(row[0])


def _store_error(what: str, path: str, exc: sqlite3.DatabaseError) -> StoreError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return StoreError(f"{what} failed: {path} stayed locked past {BUSY_TIMEOUT_MS // 1000} s: {text}")
    if "malformed" in text or (isinstance(exc, sqlite3.DatabaseError) and "not a database" in text):
        return StoreError(f"{what} failed: {path} is damaged ({text}); restore it from a backup or export")
    if "disk" in text or "full" in text:
        return StoreError(f"{what} failed: {path}: {text}; free some disk space")
    return StoreError(f"{what} failed on {path}: {text}")
