"""The SQLite store's in-process indexes: BM25 over the lexical rows
(:class:`~mentis.index.lexical.LexicalIndex`) and exact vector search
(:class:`~mentis.index.vectors.VectorIndex`), loaded from the file and kept up to date with
every process's writes.

Rowids only grow (they are ledger rowids), so each refresh loads the rows above an index's high
water mark. A forget logs the rows it removed in ``removed_rows`` and every process drops them in
place (:meth:`SqliteIndexes._apply_removals`); a new ``derived_epoch`` in ``meta`` (a rebuild,
reindex or migration renumbered rows) makes every process reload from scratch.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from mentis.index import lexical
from mentis.index.malloc import release_free_heap
from mentis.index.vectors import VectorIndex
from mentis.store.shared.derived_check import derived_row_error, holds, terms_check, vector_check, vocab_check
from mentis.store.sqlite.connection import BUSY_TIMEOUT_MS, SqliteFile

LEXICAL_SELECT_MIN_DOCS = 1_000
"""Below this many documents every query term is used; above it, terms in most documents are not.

Measured on SeaMonkey (1,076 reports): dropping terms found in more than half the documents left
every ranking unchanged and cut BM25 time by a third; a budget on postings read (the rarest terms
up to a quarter of the documents' worth) cost 3.3 points of fused R@5, so there is none."""
LOAD_CHUNK = 8_192
"""Rows read at a time when loading an in-process index from the file."""
VECTOR_TABLES = ("vectors", "thought_vectors", "skill_vectors")
TERM_TABLES = ("attempt_terms", "thought_terms", "skill_terms", "title_terms", "window_terms")
LEXICON_SCHEMA = """
CREATE TABLE IF NOT EXISTS lex_vocab(
    id INTEGER PRIMARY KEY AUTOINCREMENT, term TEXT NOT NULL UNIQUE, df INTEGER NOT NULL,
    chk INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS attempt_terms(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, len INTEGER NOT NULL, terms BLOB NOT NULL,
    chk INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS thought_terms(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, len INTEGER NOT NULL, terms BLOB NOT NULL,
    chk INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS skill_terms(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, len INTEGER NOT NULL, terms BLOB NOT NULL,
    chk INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS title_terms(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, len INTEGER NOT NULL, terms BLOB NOT NULL,
    chk INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS window_terms(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, len INTEGER NOT NULL, terms BLOB NOT NULL,
    chk INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS removed_rows(
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, row INTEGER NOT NULL);
"""
"""The lexical index's derived tables: the stem vocabulary with each stem's document count, and
each document's packed ``(term id, weighted tf)`` pairs (see :mod:`mentis.index.lexical`);
``title_terms`` holds an attempt's ``task_title`` alone, keyed by the attempt's rowid (the
title-to-title signal of ``search``, :mod:`mentis.retrieval.titles`); ``window_terms`` a thought's
content with the content of the thought before it in its session, keyed by the later thought's
rowid (the causal windows of ``search_thoughts``, :mod:`mentis.retrieval.window`).
A stem no document holds any more is deleted (forget erases index rows); ids are never reused.

``removed_rows`` logs the rowids a forget removed (``kind`` attempt, thought, window or skill: a
skill's rows also go when a newer version replaces them), so every
process's in-process indexes drop them in place on their next refresh instead of reloading."""
REMOVED_KIND = {
    "vectors": "attempt",
    "attempt_terms": "attempt",
    "thought_vectors": "thought",
    "thought_terms": "thought",
    "skill_vectors": "skill",
    "skill_terms": "skill",
    "title_terms": "attempt",
    "window_terms": "window",
}


class SqliteIndexes:
    """The in-process lexical and vector indexes of one SQLite file, and the lexical rows they
    load (written inside each record's transaction). The vector indexes load through the store's
    connection (under its lock), the lexical ones through a read-only connection of their own."""

    def __init__(self, file: SqliteFile, dim: int) -> None:
        self._file = file
        self._dim = dim
        self.vectors = {table: VectorIndex(dim) for table in VECTOR_TABLES}
        self.lexicons = {table: lexical.LexicalIndex() for table in TERM_TABLES}
        self.lex_stale = set(TERM_TABLES)
        """The lexical indexes to refresh before their next search."""
        self._lex_version: int | None = None
        self._lex_epoch: str | None = None
        self._vec_epoch: str | None = None
        self._vocab: dict[str, int] = {}
        self._vocab_max = 0
        self._removed_seen: dict[str, int] = {}  # index table → newest removed_rows id applied
        self.reloads = 0
        """Full reloads of the in-process indexes (a rebuild, reindex or migration; not a forget)."""
        self._lex: sqlite3.Connection | None = None
        self._lex_lock = threading.Lock()
        self._stale = set(VECTOR_TABLES)
        self._seen: tuple[int, int] | None = None
        """The store connection's (``data_version``, ``total_changes``) at the last vector refresh:
        the first moves with other connections' commits, the second with this one's writes."""

    def close(self) -> None:
        with self._file.lock, self._lex_lock:
            if self._lex is not None:
                self._lex.close()
                self._lex = None

    @staticmethod
    def removing(conn: sqlite3.Connection, kind: str, rowid: int | None) -> None:
        """A forget removes ``rowid`` (of ``kind``): every process drops it from its in-process
        indexes on its next refresh. A thought forgotten during a replay (``rowid`` None) renews
        the epoch instead."""
        if rowid is None:
            new_epoch(conn)
        else:
            conn.execute("INSERT INTO removed_rows(kind, row) VALUES(?, ?)", (kind, rowid))

    def after_rebuild(self) -> None:
        for index in self.vectors.values():
            index.clear()
        self._stale.update(VECTOR_TABLES)

    def warm(self) -> None:
        """Load the in-process lexical and vector indexes now rather than on the first search."""
        release_free_heap()  # what opening (the ledger check) freed, before the load's peak
        for table in VECTOR_TABLES:
            self._refresh_index(table)
        with self._lex_lock, self._file.translate("lexical index"):
            for table in TERM_TABLES:
                self._refresh_lexicon(table)
        release_free_heap()

    def index_terms(
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
        packed = lexical.pack(tf, ids)
        conn.execute(
            f"INSERT INTO {table}(rowid, repository, len, terms, chk) VALUES(?,?,?,?,?)",
            (rowid, repository, length, packed, terms_check(rowid, repository, length, packed)),
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
                conn.execute(
                    "UPDATE lex_vocab SET chk=? WHERE id=?", (vocab_check(ids[term], term), ids[term])
                )
        return ids

    @staticmethod
    def unindex_terms(conn: sqlite3.Connection, table: str, rowid: int) -> None:
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
            uri = Path(self._file.path).resolve().as_uri() + "?mode=ro"
            lex = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            lex.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._lex = lex
            self._lex_version = None  # data_version counts per connection
        return self._lex

    def lexical(
        self, table: str, words: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 candidates among the documents of ``repositories`` (None: all) from the lexical
        index over ``table``, for the query ``words``; statistics are those of the documents searched.

        Above ``LEXICAL_SELECT_MIN_DOCS`` documents a term found in more than half of them is
        skipped: its BM25 weight is (near) zero but its posting list is most of the table.
        """
        if not words:
            return []
        analyzer = lexical.analyzer()
        with self._lex_lock, self._file.translate("lexical search"):
            self._refresh_lexicon(table)
            index = self.lexicons[table]
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
            self.lex_stale.update(self.lexicons)
            self._lex_version = version
        if table not in self.lex_stale:
            return
        index = self.lexicons[table]
        conn.execute("BEGIN")
        try:
            epoch = _epoch(conn)
            if epoch != self._lex_epoch:
                self._vocab = {}
                self._vocab_max = 0
                self._lex_epoch = epoch
                for name, other in self.lexicons.items():
                    other.clear()
                    self._removed_seen.pop(name, None)
                self.lex_stale.update(self.lexicons)
                self.reloads += 1
            new = conn.execute(
                "SELECT term, id, chk FROM lex_vocab WHERE id > ? ORDER BY id", (self._vocab_max,)
            ).fetchall()
            for term, id_, chk in new:
                if not holds(vocab_check, chk, id_, term):
                    raise derived_row_error("lex_vocab", id_)
            if new:
                self._vocab.update((term, id_) for term, id_, _ in new)
                self._vocab_max = int(new[-1][1])
            self._apply_removals(conn, table, index.remove)
            self._load_terms(conn, table, index.max_rowid)
        finally:
            conn.execute("COMMIT")
        self.lex_stale.discard(table)

    def _load_terms(self, conn: sqlite3.Connection, table: str, after: int) -> None:
        """Add the documents above ``after``, one frozen segment's worth of rows at a time."""
        cur = conn.execute(
            f"SELECT rowid, repository, len, terms, chk FROM {table} WHERE rowid > ? ORDER BY rowid", (after,)
        )
        while rows := cur.fetchmany(lexical.SEGMENT_DOCS):
            for rowid, repository, length, terms, chk in rows:
                if not holds(terms_check, chk, rowid, repository, length, terms):
                    raise derived_row_error(table, rowid)
            rowids, repositories, lengths, packed, _ = zip(*rows, strict=True)
            self.lexicons[table].add_columns(rowids, repositories, lengths, packed)

    def vector(
        self, table: str, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        self._refresh_index(table)
        return self.vectors[table].search(query, repositories, limit, lambda ids: self._exact(table, ids))

    def _exact(self, table: str, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The float32 vectors of ``rowids`` as stored (the re-score of an int8 index's candidates);
        a row forgotten since the scan is left out."""
        marks = ",".join("?" * len(rowids))
        with self._file.lock, self._file.translate("vector index"):
            rows = self._file.conn.execute(
                f"SELECT rowid, vec, repository, chk FROM {table} WHERE rowid IN ({marks})", rowids.tolist()
            ).fetchall()
        for rowid, vec, repository, chk in rows:
            if not holds(vector_check, chk, rowid, repository, vec):
                raise derived_row_error(table, rowid)
        found = np.array([r[0] for r in rows], dtype=np.int64)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(-1, self._dim)
        return found, matrix

    def _refresh_index(self, table: str) -> None:
        """Bring one vector index up to date with the file (this and other processes' writes).

        Rowids only grow (they are ledger rowids), so new rows are those above the index's high
        water mark; a new ``derived_epoch`` (a forget removed rows, a rebuild or reindex rewrote
        them) reloads every vector index.
        """
        index = self.vectors[table]
        with self._file.lock, self._file.translate("vector index"):
            seen = (
                self._file.conn.execute("PRAGMA data_version").fetchone()[0],
                self._file.conn.total_changes,
            )
            if seen != self._seen:
                self._stale.update(VECTOR_TABLES)
                self._seen = seen
            if table not in self._stale:
                return
            self._file.conn.execute("BEGIN")
            try:
                epoch = _epoch(self._file.conn)
                if epoch != self._vec_epoch:
                    for name, other in self.vectors.items():
                        other.clear()
                        self._removed_seen.pop(name, None)
                    self._stale.update(VECTOR_TABLES)
                    self._vec_epoch = epoch
                    self.reloads += 1
                self._apply_removals(self._file.conn, table, index.remove)
                self._load_vectors(table, index.max_rowid)
            finally:
                self._file.conn.execute("COMMIT")
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
        if dropped and table in self.lexicons:
            # the erased stems leave this process's vocabulary too
            self._vocab = {t: i for t, i in self._vocab.items() if i not in dropped}
        self._removed_seen[table] = int(rows[-1][0])

    def _load_vectors(self, table: str, after: int) -> None:
        """Add the rows above ``after``, ``LOAD_CHUNK`` at a time (a bulk load never holds more
        than one chunk of raw rows beside the index, which is sized once up front)."""
        index = self.vectors[table]
        # a full load counts on the covering repository index ("+rowid" keeps the planner off the
        # table, whose pages are the vectors); a refresh counts the few rows past its mark
        where = "+rowid > ?" if after == 0 else "rowid > ?"
        count = self._file.conn.execute(f"SELECT count(*) FROM {table} WHERE {where}", (after,)).fetchone()[0]
        if not count:
            return
        index.reserve(len(index) + int(count))
        cur = self._file.conn.execute(
            f"SELECT rowid, repository, vec, chk FROM {table} WHERE rowid > ? ORDER BY rowid", (after,)
        )
        while rows := cur.fetchmany(LOAD_CHUNK):
            for rowid, repository, vec, chk in rows:
                if not holds(vector_check, chk, rowid, repository, vec):
                    raise derived_row_error(table, rowid)
            matrix = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32).reshape(-1, self._dim)
            index.add([r[0] for r in rows], [r[1] for r in rows], matrix)


def _epoch(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key='derived_epoch'").fetchone()
    return None if row is None else str(row[0])


def new_epoch(conn: sqlite3.Connection) -> None:
    """Mark derived rows as renumbered (rebuild, reindex, migration), so every process reloads
    its in-process indexes instead of only reading the rows added since (a forget instead logs
    the rows it removed in ``removed_rows``)."""
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('derived_epoch', ?)", (uuid.uuid4().hex,))
