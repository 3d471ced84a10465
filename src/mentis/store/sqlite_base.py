"""Plumbing shared by the SQLite store's parts: the connection, transactions, error
translation, entry appends, hash-checked body loading and the in-process vector indexes."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from mentis.errors import IntegrityError, StoreError
from mentis.ledger import Entry, entry_hash, seal, sha256_hex
from mentis.retrieval import match_terms, or_match
from mentis.retrieval.vectors import VectorIndex

BUSY_TIMEOUT_MS = 30_000
LEXICAL_SELECT_MIN_DOCS = 1_000
"""Below this many documents every query term is used; above it, terms in most documents are not.

Measured on SeaMonkey (1,076 reports): dropping terms found in more than half the documents left
every ranking unchanged and cut BM25 time by a third; a budget on postings read (the rarest terms
up to a quarter of the documents' worth) cost 3.3 points of fused R@5, so there is none."""
VECTOR_TABLES = ("vectors", "thought_vectors")
ENTRY_COLS = "e.v, e.chain, e.seq, e.kind, e.id, e.at, e.agent, e.prev, e.body_hash, e.key_id, e.sig, e.hash"


class SqliteBase:
    """An open SQLite file in WAL mode with one connection guarded by a lock."""

    def __init__(self, path: str | Path, dim: int) -> None:
        self.path = str(path)
        self.dim = dim
        self._lock = threading.RLock()
        self._ro: sqlite3.Connection | None = None
        self._indexes = {table: VectorIndex(dim) for table in VECTOR_TABLES}
        self._df_cache: dict[str, tuple[int, dict[str, int]]] = {}
        self._docs: dict[str, tuple[tuple[int, int], int]] = {}
        self._lex: sqlite3.Connection | None = None
        self._lex_lock = threading.Lock()
        self._writes = 0
        self._stale = set(VECTOR_TABLES)
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
        self._data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]

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
            self._stale.update(VECTOR_TABLES)
            self._writes += 1

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
            with self._lex_lock:
                if self._lex is not None:
                    self._lex.close()
                    self._lex = None
            self._conn.close()

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

    def _lexical_conn(self) -> sqlite3.Connection:
        """A read-only connection of its own, so lexical search runs beside embedding and vectors."""
        if self._lex is None:
            uri = Path(self.path).resolve().as_uri() + "?mode=ro"
            lex = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            lex.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._lex = lex
        return self._lex

    def bm25(
        self, fts: str, idx: str, weights: Sequence[float], match: str, repository: str | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 candidates from ``fts`` (rowids joined to ``idx`` for the repository filter)."""
        terms = self.select_terms(fts, match_terms(match))
        if not terms:
            return []
        w = ",".join(str(x) for x in weights)
        sql = f"SELECT f.rowid, bm25({fts}, {w}) AS s FROM {fts} f"
        args: list[Any] = [or_match(terms)]
        if repository is not None:
            sql += f" JOIN {idx} a ON a.rowid = f.rowid WHERE {fts} MATCH ? AND a.repository = ?"
            args.append(repository)
        else:
            sql += f" WHERE {fts} MATCH ?"
        sql += " ORDER BY s LIMIT ?"
        args.append(limit)
        with self._lex_lock, self._translate("lexical search"):
            return [(int(r), -float(s)) for r, s in self._lexical_conn().execute(sql, args)]

    def select_terms(self, fts: str, terms: list[str]) -> list[str]:
        """The query terms worth reading postings for (see ``LEXICAL_SELECT_MIN_DOCS``).

        A term in more than half the documents gets (near) zero BM25 weight but costs a posting
        list of most of the table, so it is dropped, and so is a term no document holds.
        Document frequencies are read from FTS5's vocabulary once per term and cached until the
        table grows by a tenth.
        """
        with self._lex_lock, self._translate("lexical search"):
            conn = self._lexical_conn()
            docs = self._doc_count(conn, fts)
            if docs < LEXICAL_SELECT_MIN_DOCS or not terms:
                return terms
            cache = self._df_cache.get(fts)
            if cache is None or docs > cache[0] * 1.1 or docs < cache[0]:
                cache = self._df_cache[fts] = (docs, {})
            dfs = cache[1]
            stems = self._stems(conn, terms)
            missing = sorted({s for ss in stems for s in ss if s not in dfs})
            if missing:
                conn.execute(
                    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{fts}_vocab USING fts5vocab(main, {fts}, 'row')"
                )
                found = dict(
                    conn.execute(
                        f"SELECT term, doc FROM temp.{fts}_vocab "
                        f"WHERE term IN ({','.join('?' * len(missing))})",
                        missing,
                    ).fetchall()
                )
                dfs.update({s: int(found.get(s, 0)) for s in missing})
        return [
            t
            for t, ss in zip(terms, stems, strict=True)
            if 0 < min((dfs[s] for s in ss), default=0) <= docs // 2
        ]

    def _doc_count(self, conn: sqlite3.Connection, fts: str) -> int:
        """Rows in an FTS table, counted again only after a write (ours or another process's)."""
        version = (conn.execute("PRAGMA data_version").fetchone()[0], self._writes)
        cached = self._docs.get(fts)
        if cached is None or cached[0] != version:
            cached = self._docs[fts] = (
                version,
                conn.execute(f"SELECT count(*) FROM {fts}_docsize").fetchone()[0],
            )
        return cached[1]

    def _stems(self, conn: sqlite3.Connection, terms: list[str]) -> list[list[str]]:
        """Each term as the FTS5 tokenizer (porter, unicode61) indexes it."""
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mentis_qtok USING fts5(t, "
            "tokenize='porter unicode61 remove_diacritics 2')"
        )
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mentis_qtok_v "
            "USING fts5vocab(temp, mentis_qtok, 'instance')"
        )
        conn.execute("DELETE FROM temp.mentis_qtok")
        conn.executemany("INSERT INTO temp.mentis_qtok(rowid, t) VALUES(?, ?)", list(enumerate(terms)))
        out: list[list[str]] = [[] for _ in terms]
        for doc, term in conn.execute("SELECT doc, term FROM temp.mentis_qtok_v ORDER BY doc, offset"):
            out[doc].append(term)
        return out

    def _search_vectors(
        self, table: str, query: np.ndarray, repository: str | None, limit: int
    ) -> list[tuple[int, float]]:
        self._refresh_index(table)
        return self._indexes[table].search(query, repository, limit)

    def _refresh_index(self, table: str) -> None:
        """Bring one vector index up to date with the file (this and other processes' writes).

        Rowids only grow (they are ledger rowids), so new rows are those above the index's high
        water mark; a row count below the index size means a forget removed rows: reload.
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
                count = self._conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                if count < len(index):
                    index.clear()
                self._load_vectors(table, index.max_rowid)
                if len(index) != count:
                    index.clear()
                    self._load_vectors(table, 0)
            finally:
                self._conn.execute("COMMIT")
            self._stale.discard(table)

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


def _store_error(what: str, path: str, exc: sqlite3.DatabaseError) -> StoreError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return StoreError(f"{what} failed: {path} stayed locked past {BUSY_TIMEOUT_MS // 1000} s: {text}")
    if "malformed" in text or (isinstance(exc, sqlite3.DatabaseError) and "not a database" in text):
        return StoreError(f"{what} failed: {path} is damaged ({text}); restore it from a backup or export")
    if "disk" in text or "full" in text:
        return StoreError(f"{what} failed: {path}: {text}; free some disk space")
    return StoreError(f"{what} failed on {path}: {text}")
