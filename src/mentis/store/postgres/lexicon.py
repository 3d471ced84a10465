"""Lexical search on PostgreSQL, scored exactly as on SQLite (DESIGN §4: "the same lexical scoring").

Each attempt and thought is analysed in Python with the SQLite store's analyzer (unicode61 words,
Porter stems, the field weights of :mod:`mentis.ledger.bodies`) and persisted as one row of packed
``(term id, weighted tf)`` pairs in ``attempt_terms`` / ``thought_terms``. Every server process
loads those rows into the same in-process :class:`~mentis.index.lexical.LexicalIndex` the
SQLite store uses, so BM25 (statistics over the repositories searched only) is the same code.

Why in process and not BM25 in SQL over a postings table: a problem description names common
words, so a query's terms match most rows; scoring them row by row in the server was the cost of
the ``ts_rank`` path (202 ms p50 at 100k), while the numpy index scores a term's posting list in
one pass (SQLite measured ~10x less than FTS5's per-row ``bm25()`` at 100k).

No writer waits on another repository's writer:

- The vocabulary is per repository: ``lex_vocab(repository, term) → id, df``. A stem's rows are
  written only under its repository's chain lock, which the write already holds, so there is no
  global hot row (ids come from a sequence). A query maps each stem to the ids it has in the
  repositories searched; the index treats them as one term, so scores equal a global vocabulary's.
- ``df`` counts a stem's documents in that repository; a forget drops stems no document there
  holds any more (their text leaves the live tables with the forgotten record).
- A bulk append writes its documents' rows together when the batch ends (``_terms_batch``): one
  ``UPDATE`` moves each stem's ``df`` by its count in the batch, rather than one per document,
  which moved the same hot rows thousands of times in one transaction (the 100k bench fill took
  ~100 min); new stems get the ids one append at a time would give them.

Following other processes' writes: rows carry the id of the transaction that wrote them (``xid``,
indexed). Each refresh runs in one snapshot and remembers it; the next one loads exactly the rows
(and ``lex_removed`` entries from forgets) that the remembered snapshot could not see. Rowids come
from a sequence and writers commit in any order, so a rowid high-water mark would miss a writer
that committed late; snapshots do not. ``meta.lex_epoch`` changes when a rebuild rewrites the
tables, and every process then reloads.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from mentis.index import lexical
from mentis.store.postgres.connection import Conn, PgPool
from mentis.store.shared.derived_check import derived_row_error, holds, terms_check, vocab_check
from mentis.store.sqlite.indexes import LEXICAL_SELECT_MIN_DOCS

TERM_TABLES = {
    "attempt_terms": "attempt",
    "thought_terms": "thought",
    "skill_terms": "skill",
    "title_terms": "title",
    "window_terms": "window",
}
"""Each lexical table and the record kind its ``lex_removed`` entries name."""

_UNSEEN = "xid >= pg_snapshot_xmin(%s::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, %s::pg_snapshot)"
"""Rows written by transactions a remembered snapshot could not see (its ``xmin`` bounds the scan)."""


TERMS_BATCH = 2_000
"""Documents a batch writes at once (bounds the memory of a migration's or a fill's batch)."""

_Doc = tuple[str, int, str, int, dict[str, float]]
"""A document to index: (table, rowid, repository, length, weighted tf)."""


def _write_terms(conn: Conn, docs: Sequence[_Doc]) -> None:
    """Write ``docs`` (in order) with a few set-based statements: each (repository, stem)'s ``df``
    grows by its number of documents here in one ``UPDATE``, the new stems are inserted in the
    order a document at a time would have inserted them (so they get the same ids), and each
    table's rows go in with one ``INSERT``. The caller holds every repository's chain lock."""
    if not docs:
        return
    counts: dict[tuple[str, str], int] = {}
    for _table, _rowid, repository, _length, tf in docs:
        for term in sorted(tf):
            key = (repository, term)
            counts[key] = counts.get(key, 0) + 1
    keys = list(counts)  # first appearance: document order, each document's stems sorted
    ids: dict[tuple[str, str], int] = {
        (r, t): int(i)
        for r, t, i in conn.execute(
            "UPDATE lex_vocab v SET df = v.df + u.n FROM unnest(%s::text[], %s::text[], %s::int[]) "
            "u(r, t, n) WHERE v.repository = u.r AND v.term = u.t RETURNING v.repository, v.term, v.id",
            ([k[0] for k in keys], [k[1] for k in keys], [counts[k] for k in keys]),
        ).fetchall()
    }
    missing = [k for k in keys if k not in ids]
    if missing:
        new = {
            (r, t): int(i)
            for r, t, i in conn.execute(
                "INSERT INTO lex_vocab(repository, term, df) SELECT u.r, u.t, u.n FROM "
                "unnest(%s::text[], %s::text[], %s::int[]) WITH ORDINALITY u(r, t, n, o) ORDER BY u.o "
                "RETURNING repository, term, id",
                ([k[0] for k in missing], [k[1] for k in missing], [counts[k] for k in missing]),
            ).fetchall()
        }
        conn.execute(
            "UPDATE lex_vocab v SET chk = u.c FROM unnest(%s::int[], %s::bigint[]) u(i, c) WHERE v.id = u.i",
            ([i for i in new.values()], [vocab_check(i, t, r) for (r, t), i in new.items()]),
        )
        ids.update(new)
    by_table: dict[str, list[tuple[int, str, int, bytes, int]]] = {}
    for table, rowid, repository, length, tf in docs:
        packed = lexical.pack(tf, {t: ids[(repository, t)] for t in tf})
        chk = terms_check(rowid, repository, length, packed)
        by_table.setdefault(table, []).append((rowid, repository, length, packed, chk))
    for table, rows in by_table.items():
        assert table in TERM_TABLES, table
        conn.execute(
            f"INSERT INTO {table}(rowid, repository, len, terms, chk) "
            "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::int[], %s::bytea[], %s::bigint[])",
            tuple(list(col) for col in zip(*rows, strict=True)),
        )


def new_lex_epoch(conn: Conn) -> None:
    """Tell every process to reload its lexical indexes (the tables were rewritten)."""
    conn.execute(
        "INSERT INTO meta(key, value) VALUES('lex_epoch', %s) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (uuid.uuid4().hex,),
    )


class PgLexicon:
    """Lexical index rows (written inside each record's transaction) and BM25 search over them,
    through the in-process indexes of this process (loaded and refreshed on ``pool``'s reads)."""

    def __init__(self, pool: PgPool) -> None:
        self._pool = pool
        self._lexicons = {table: lexical.LexicalIndex() for table in TERM_TABLES}
        self._lex_seen: dict[str, str] = {}  # table → the snapshot it was last refreshed in
        self._lex_epoch: str | None = None
        self._lex_lock = threading.Lock()
        self._lex_pending: dict[int, list[_Doc]] = {}  # id(conn) → documents of its open batch
        self.reloads = 0
        """Full loads of the in-process lexical indexes (the first one, then after a rebuild)."""

    # ------------------------------------------------------------ writes

    def index_terms(
        self,
        conn: Conn,
        table: str,
        rowid: int,
        repository: str,
        fields: Sequence[str],
        weights: Sequence[float],
    ) -> None:
        """Persist one document's weighted stems (the caller holds ``repository``'s chain lock,
        the only writer of its vocabulary rows). Inside :meth:`terms_batch` the document waits
        for the batch's set-based write; otherwise it is written now."""
        tf, length = lexical.analyzer().document(fields, weights)
        doc = (table, rowid, repository, length, tf)
        pending = self._lex_pending.get(id(conn))
        if pending is None:
            _write_terms(conn, [doc])
            return
        pending.append(doc)
        if len(pending) >= TERMS_BATCH:
            _write_terms(conn, pending)
            pending.clear()

    @contextmanager
    def terms_batch(self, conn: Conn) -> Iterator[None]:
        """Within this block, the documents ``conn``'s transaction indexes are written together
        (each stem's ``df`` moved once per batch, not once per document), before it ends."""
        if id(conn) in self._lex_pending:
            yield
            return
        pending: list[_Doc] = []
        self._lex_pending[id(conn)] = pending
        try:
            yield
            _write_terms(conn, pending)
        finally:
            del self._lex_pending[id(conn)]

    def unindex_terms(self, conn: Conn, table: str, rowid: int) -> None:
        """Remove one document (a forget), drop its repository's stems no document holds any
        more, and log the removal for every process's in-process index."""
        pending = self._lex_pending.get(id(conn))
        if pending:  # a batch's documents are written before one of them can be removed
            _write_terms(conn, pending)
            pending.clear()
        row = conn.execute(f"DELETE FROM {table} WHERE rowid = %s RETURNING terms", (rowid,)).fetchone()
        if row is None:
            return
        ids = np.frombuffer(bytes(row[0]), dtype=lexical.POSTING)["t"].tolist()
        conn.execute("UPDATE lex_vocab SET df = df - 1 WHERE id = ANY(%s)", (ids,))
        conn.execute("DELETE FROM lex_vocab WHERE id = ANY(%s) AND df <= 0", (ids,))
        conn.execute("INSERT INTO lex_removed(kind, row) VALUES(%s, %s)", (TERM_TABLES[table], rowid))

    # ------------------------------------------------------------ search

    def warm(self) -> None:
        """Load the in-process lexical indexes now rather than on the first search."""
        with self._lex_lock, self._pool.read() as conn:
            for table in TERM_TABLES:
                self._refresh_lexicon(conn, table)

    def lexical(
        self, table: str, words: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 candidates among the documents of ``repositories`` (None: all) for the query
        ``words``, as ``SqliteIndexes.lexical`` computes them (same analyzer, index and term
        selection)."""
        if not words:
            return []
        stems = [t for w in words for t in lexical.analyzer().terms(w)]
        with self._lex_lock:
            with self._pool.read() as conn:
                self._refresh_lexicon(conn, table)
                scope = "" if repositories is None else " AND repository = ANY(%s)"
                args: list[Any] = [
                    sorted(set(stems)),
                    *([list(repositories)] if repositories is not None else []),
                ]
                found: dict[str, list[int]] = {}
                for term, id_, repository, chk in conn.execute(
                    f"SELECT term, id, repository, chk FROM lex_vocab WHERE term = ANY(%s){scope} "
                    "ORDER BY id",
                    args,
                ):
                    if not holds(vocab_check, chk, id_, term, repository):
                        raise derived_row_error("lex_vocab", id_)
                    found.setdefault(term, []).append(int(id_))
            groups = [tuple(found[s]) for s in stems if s in found]
            return self._lexicons[table].search(groups, repositories, limit, LEXICAL_SELECT_MIN_DOCS)

    def _refresh_lexicon(self, conn: Conn, table: str) -> None:
        """Bring one in-process index up to date with what ``conn``'s snapshot sees."""
        row = conn.execute(
            "SELECT pg_current_snapshot()::text, (SELECT value FROM meta WHERE key = 'lex_epoch')"
        ).fetchone()
        assert row is not None
        snapshot, epoch = str(row[0]), row[1]
        if epoch != self._lex_epoch:
            for index in self._lexicons.values():
                index.clear()
            self._lex_seen.clear()
            self._lex_epoch = epoch
        index = self._lexicons[table]
        seen = self._lex_seen.get(table)
        cols = "rowid, repository, len, terms, chk"
        if seen is None:
            self.reloads += 1
            cur = conn.execute(f"SELECT {cols} FROM {table} ORDER BY rowid")
        else:
            removed = [
                int(r)
                for (r,) in conn.execute(
                    f"SELECT row FROM lex_removed WHERE kind = %s AND {_UNSEEN}",
                    (TERM_TABLES[table], seen, seen),
                )
            ]
            index.remove(removed)
            cur = conn.execute(f"SELECT {cols} FROM {table} WHERE {_UNSEEN} ORDER BY rowid", (seen, seen))
        rows = cur.fetchall()
        for rowid, repository, length, terms, chk in rows:
            if not holds(terms_check, chk, rowid, repository, length, bytes(terms)):
                raise derived_row_error(table, rowid)
        if rows:
            index.add_columns(
                [int(r[0]) for r in rows],
                [r[1] for r in rows],
                [int(r[2]) for r in rows],
                [bytes(r[3]) for r in rows],
            )
        self._lex_seen[table] = snapshot


__all__ = ["TERM_TABLES", "PgLexicon", "new_lex_epoch"]
