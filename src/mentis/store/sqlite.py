"""The embedded default store: one SQLite file, WAL, a lexical index and vectors in the same file.

Tables (``schema.sql`` in prose):

- ``entries``  the ledger, one row per entry (``UNIQUE(chain, seq)``); never updated or deleted.
- ``bodies``   canonical JSON bytes of each entry's body, keyed by the entry's rowid; forgetting
  deletes a body, nothing else ever changes one.
- ``heads``    each chain's last (seq, hash), so a truncated chain is caught on open.
- derived, rebuilt from the ledger by :meth:`SqliteStore.rebuild`: ``attempt_idx`` (keys only),
  ``correction_idx``, ``task_idx``, ``forgotten``, ``attempt_terms`` and ``lex_vocab`` (stem ids
  and weighted term frequencies: the lexical index, not the text) and ``vectors`` (float32
  blobs). No derived table holds a copy of content: everything a read returns is parsed from a
  body whose hash is checked as it is read.

Writes run in ``BEGIN IMMEDIATE`` transactions that include the ledger entry, so writers in
several processes serialise on SQLite's lock and a chain can never fork. Vectors are searched
through an in-process :class:`VectorIndex`, and BM25 runs on an in-process
:class:`~mentis.retrieval.lexical.LexicalIndex`; both pick up other processes' writes by watching
``PRAGMA data_version``.

Schema 2 replaced schema 1's FTS5 tables (``attempt_fts``, ``thought_fts``) with the lexical
index; opening a schema-1 file migrates it in one transaction.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from mentis.errors import Conflict, IntegrityError, NotFound, StoreError
from mentis.ledger import ChainReport, Entry, canonical
from mentis.store.base import AttemptRow, Embed, StoredAttempt, forget_body, replay
from mentis.store.browse import BrowseReads
from mentis.store.ledger_scan import RECORD_ID
from mentis.store.lexicon import FTS_WEIGHTS, thought_fields
from mentis.store.lexicon import attempt_fields as _fts_fields
from mentis.store.sqlite_base import ENTRY_COLS, LEXICON_SCHEMA, VECTOR_TABLES
from mentis.store.sqlite_schema import _DERIVED_SCHEMA, _DERIVED_TABLES, _LEDGER_SCHEMA, _new_epoch
from mentis.store.sqlite_sql import RecallSql
from mentis.store.sqlite_thoughts import THOUGHT_SCHEMA, ThoughtTables
from mentis.store.sqlite_verify import one_pass, parallel_verify
from mentis.texts import attempt_conclusion, fingerprint

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
LABEL_FANOUT = 200


def _derived_mismatch(rowid: int) -> IntegrityError:
    return IntegrityError(
        f"a derived index row (entry rowid {rowid}) disagrees with the ledger; run `mentis verify`, "
        "then `mentis rebuild` to regenerate the indexes from the ledger"
    )


def _status(body: dict[str, Any]) -> str:
    check = body.get("check")
    return str(check["status"]) if check else "unverified"


class SqliteStore(ThoughtTables, RecallSql, BrowseReads):
    """One SQLite file holding the ledger, bodies and derived tables."""

    def __init__(self, path: str | Path, dim: int, *, verify: bool = True) -> None:
        super().__init__(path, dim)
        with self._translate("open"):
            with self._write() as conn:
                for stmt in (_LEDGER_SCHEMA + _DERIVED_SCHEMA + THOUGHT_SCHEMA + LEXICON_SCHEMA).split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                found = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                if found is not None and int(found[0]) > SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.path} has schema version {found[0]}, newer than this Mentis "
                        f"({SCHEMA_VERSION}); upgrade Mentis"
                    )
                if found is not None and int(found[0]) == 1:
                    self._migrate_lexicon(conn)
                conn.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
                if conn.execute("SELECT 1 FROM meta WHERE key='derived_epoch'").fetchone() is None:
                    _new_epoch(conn)
            self._data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if verify:
            try:
                self.verify()
            except BaseException:
                self.close()
                raise

    def _migrate_lexicon(self, conn: sqlite3.Connection) -> None:
        """Schema 1 → 2: index every live attempt and thought in the lexical tables, drop FTS5."""
        log.info("migrating %s to schema 2 (lexical index)", self.path)
        for rowid, raw in conn.execute(
            "SELECT a.rowid, b.body FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid ORDER BY a.rowid"
        ).fetchall():
            body = orjson.loads(raw)
            self._index_terms(
                conn, "attempt_terms", rowid, body["repository"], _fts_fields(body), FTS_WEIGHTS
            )
        for rowid, raw in conn.execute(
            "SELECT t.rowid, b.body FROM thought_idx t JOIN bodies b ON b.rowid = t.rowid ORDER BY t.rowid"
        ).fetchall():
            body = orjson.loads(raw)
            self._index_terms(conn, "thought_terms", rowid, body["repository"], *thought_fields(body))
        conn.execute("DROP TABLE IF EXISTS attempt_fts")
        conn.execute("DROP TABLE IF EXISTS thought_fts")
        _new_epoch(conn)

    def counts(self) -> dict[str, int]:
        with self._read() as conn:
            return {
                "entries": conn.execute("SELECT count(*) FROM entries").fetchone()[0],
                "attempts": conn.execute("SELECT count(*) FROM attempt_idx").fetchone()[0],
                "chains": conn.execute("SELECT count(*) FROM heads").fetchone()[0],
            }

    # ------------------------------------------------------------ verification

    def verify(self) -> list[ChainReport]:
        """Verify every chain. A large store is scanned by several processes (``sqlite_verify``);
        a small one, or one where they find anything amiss, in one pass in rowid order that names
        the first failing entry (chains interleave; seqs ascend in each)."""
        with self._read() as conn:
            heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
            fast = parallel_verify(conn, self.path, heads, _LEDGER_SCHEMA)
            if fast is not None:
                return fast
            return one_pass(conn, heads)

    # ------------------------------------------------------------ writes

    def append_attempt(
        self,
        chain: str,
        attempt_id: str,
        at: str,
        agent: str,
        body: dict[str, Any],
        vector: np.ndarray,
    ) -> Entry:
        return self.append_attempts([AttemptRow(chain, attempt_id, at, agent, body, vector)])[0]

    def append_attempts(self, rows: Sequence[AttemptRow]) -> list[Entry]:
        entries = []
        with self._write() as conn:
            for r in rows:
                raw = canonical(r.body)
                rowid, entry = self._append(conn, r.repository, "attempt", r.attempt_id, r.at, r.agent, raw)
                self._derive_attempt(conn, rowid, r.body, r.vector)
                entries.append(entry)
        return entries

    def append_correction(
        self,
        chain: str,
        correction_id: str,
        at: str,
        agent: str,
        body: dict[str, Any],
        conclusion: np.ndarray,
    ) -> tuple[Entry, int]:
        """Append a correction; ``conclusion`` is the vector of the attempt's rejected conclusion."""
        raw = canonical(body)
        with self._write() as conn:
            attempt_rowid = self._live_attempt_rowid(conn, chain, body["attempt_id"])
            rowid, entry = self._append(conn, chain, "correction", correction_id, at, agent, raw)
            self._derive_correction(conn, rowid, attempt_rowid, body, conclusion)
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
            task_id = conn.execute("SELECT task_id FROM attempt_idx WHERE rowid=?", (rowid,)).fetchone()[0]
            body = forget_body("attempt_id", attempt_id, chain, seqs, reason, agent, at, task_id=task_id)
            tomb_rowid, entry = self._append(conn, chain, "forget", tombstone_id, at, agent, canonical(body))
            self._derive_forget(conn, tomb_rowid, body)
        self.erase_on_disk()
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
        self._index_terms(conn, "attempt_terms", rowid, repo, _fts_fields(body), FTS_WEIGHTS)
        conn.execute(
            "INSERT INTO vectors(rowid, repository, vec) VALUES(?,?,?)",
            (rowid, repo, np.ascontiguousarray(vector, dtype=np.float32).tobytes()),
        )
        labels = [(rowid, "file", f) for f in body.get("files", [])]
        labels += [(rowid, "tag", t) for t in body.get("tags", [])]
        conn.executemany("INSERT INTO attempt_label(rowid, kind, label) VALUES(?,?,?)", labels)
        title_rowid = rowid if body.get("task_title") else None
        conn.execute(
            "INSERT INTO task_idx(repository, task_id, title_rowid) VALUES(?,?,?) "
            "ON CONFLICT(repository, task_id) DO UPDATE SET "
            "title_rowid = coalesce(excluded.title_rowid, task_idx.title_rowid)",
            (repo, task, title_rowid),
        )

    def _derive_correction(
        self, conn: sqlite3.Connection, rowid: int, attempt_rowid: int, body: dict[str, Any], vec: np.ndarray
    ) -> None:
        conn.execute("INSERT INTO correction_idx(rowid, attempt_rowid) VALUES(?,?)", (rowid, attempt_rowid))
        raw = conn.execute("SELECT body FROM bodies WHERE rowid=?", (attempt_rowid,)).fetchone()[0]
        norm = fingerprint(attempt_conclusion(orjson.loads(raw)))
        blob = np.ascontiguousarray(vec, dtype=np.float32).tobytes()
        self._add_rejection(
            conn,
            rowid,
            body["attempt_id"],
            body["repository"],
            body["attempt_id"],
            "attempt",
            body["at"],
            norm,
            blob,
        )

    def attempt_conclusion_text(self, repository: str, attempt_id: str) -> str | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT a.rowid FROM attempt_idx a WHERE a.attempt_id=? AND a.repository=?",
                (attempt_id, repository),
            ).fetchone()
            if row is None:
                return None
            loaded = self._load(conn, [row[0]], "attempt")
        return attempt_conclusion(loaded[row[0]][1])

    def _derive_forget(self, conn: sqlite3.Connection, tomb_rowid: int, tomb: dict[str, Any]) -> None:
        if "thought_id" in tomb:
            _new_epoch(conn)
            self._derive_forget_thought(conn, tomb_rowid, tomb)
            return
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
        rowid, task_id, _raw = row
        # every process drops the row from its in-process indexes on its next refresh
        conn.execute("INSERT INTO removed_rows(kind, row) VALUES('attempt', ?)", (rowid,))
        corr = [
            r for (r,) in conn.execute("SELECT rowid FROM correction_idx WHERE attempt_rowid=?", (rowid,))
        ]
        for r in [rowid, *corr]:
            conn.execute("DELETE FROM bodies WHERE rowid=?", (r,))
        conn.execute("DELETE FROM correction_idx WHERE attempt_rowid=?", (rowid,))
        conn.execute("DELETE FROM rejections WHERE target_kind='attempt' AND target_id=?", (attempt_id,))
        conn.execute("DELETE FROM vectors WHERE rowid=?", (rowid,))
        self._unindex_terms(conn, "attempt_terms", rowid)
        conn.execute("DELETE FROM attempt_label WHERE rowid=?", (rowid,))
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
                for r, repo, task, aid, e_chain, e_id, e_kind in conn.execute(
                    "SELECT a.rowid, a.repository, a.task_id, a.attempt_id, e.chain, e.id, e.kind "
                    f"FROM attempt_idx a JOIN entries e ON e.rowid = a.rowid WHERE a.rowid IN ({marks})",
                    chunk,
                ):
                    if (e_chain, e_id, e_kind) != (repo, aid, "attempt"):
                        raise _derived_mismatch(r)
                    out[r] = (repo, task, aid)
        return out

    def attempt_edges(
        self, seeds: Sequence[int], repositories: Sequence[str] | None, per_seed: int
    ) -> list[tuple[int, int, float]]:
        """Links from each seed to attempts of ``repositories`` (None: all): same task (1.0), each
        shared file (0.5) or tag (0.25).

        Labels held by more than ``LABEL_FANOUT`` of those attempts (a README everyone touches)
        link nothing.
        """
        edges: list[tuple[int, int, float]] = []
        with self._read() as conn:
            for seed in seeds:
                for (other,) in conn.execute(
                    "SELECT b.rowid FROM attempt_idx a JOIN attempt_idx b ON b.repository = a.repository "
                    "AND b.task_id = a.task_id AND b.rowid != a.rowid WHERE a.rowid = ? LIMIT ?",
                    (seed, per_seed),
                ):
                    edges.append((seed, other, 1.0))
                for other, weight in self._label_links(
                    conn, "attempt_label", "attempt_idx", "file", seed, repositories, LABEL_FANOUT, per_seed
                ):
                    edges.append((seed, other, weight))
        return edges

    def lexical(self, match: str, repositories: Sequence[str] | None, limit: int) -> list[tuple[int, float]]:
        """BM25 candidates for a MATCH expression built by ``retrieval.fts_match``."""
        return self.lexical_search("attempt_terms", match, repositories, limit)

    def vector(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self._search_vectors("vectors", query, repositories, limit)

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
        keys = self._index_keys(conn, list(loaded))
        out: dict[int, StoredAttempt] = {}
        for rowid, (entry, body) in loaded.items():
            if body.get("attempt_id") != entry.id or body.get("repository") != entry.chain:
                raise IntegrityError(
                    f"attempt body at chain {entry.chain!r} seq {entry.seq} does not match its entry",
                    chain=entry.chain,
                    seq=entry.seq,
                )
            if keys.get(rowid) != (body["repository"], body["task_id"], body["attempt_id"]):
                raise _derived_mismatch(rowid)
            corrections = [corr_bodies[c][1] for c in corr_of.get(rowid, [])]
            if any(c["attempt_id"] != entry.id or c["repository"] != entry.chain for c in corrections):
                raise _derived_mismatch(rowid)
            out[rowid] = StoredAttempt(rowid=rowid, entry=entry, body=body, corrections=corrections)
        return out

    @staticmethod
    def _index_keys(conn: sqlite3.Connection, rowids: Sequence[int]) -> dict[int, tuple[str, str, str]]:
        out: dict[int, tuple[str, str, str]] = {}
        for start in range(0, len(rowids), 500):
            chunk = list(rowids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for r, repo, task, aid in conn.execute(
                f"SELECT rowid, repository, task_id, attempt_id FROM attempt_idx WHERE rowid IN ({marks})",
                chunk,
            ):
                out[r] = (repo, task, aid)
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
                if (body["repository"], body["task_id"]) != key:
                    raise _derived_mismatch(rowid)
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

    # ------------------------------------------------------------ export, import, rebuild

    def iter_ledger(self) -> Iterator[tuple[Entry, bytes | None]]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid "
                "ORDER BY e.rowid"
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
        """Append chains that this store does not hold yet, in one transaction that commits only
        once the whole ledger, old and new entries together, verifies (DESIGN §4)."""
        chains = sorted({e.chain for e, _ in items})
        with self._write() as conn:
            for chain in chains:
                if conn.execute("SELECT 1 FROM heads WHERE chain=?", (chain,)).fetchone():
                    raise Conflict(f"this store already holds chain {chain!r}; import into a fresh store")
            ids = [e.id for e, _ in items if e.kind in RECORD_ID]
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                held = conn.execute(
                    f"SELECT id, chain FROM entries WHERE id IN ({','.join('?' * len(chunk))}) "
                    "AND kind IN ('attempt', 'thought') LIMIT 1",
                    chunk,
                ).fetchone()
                if held is not None:
                    raise Conflict(
                        f"record {held[0]} already exists in chain {held[1]!r}; nothing was imported"
                    )
            placed = [(self._insert(conn, e, body), e, body) for e, body in items]
            self._replay(conn, placed, embed, None)
            heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
            one_pass(conn, heads)
        return len(placed)

    def rebuild(self, embed: Embed, progress: Callable[[int], None] | None = None) -> int:
        """Drop every derived table and regenerate it from the ledger, in one transaction."""
        with self._write() as conn:
            for table in _DERIVED_TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            for stmt in (_DERIVED_SCHEMA + THOUGHT_SCHEMA + LEXICON_SCHEMA).split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            _new_epoch(conn)
            rows = conn.execute(
                f"SELECT e.rowid, {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b "
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
        for index in self._indexes.values():
            index.clear()
        self._stale.update(VECTOR_TABLES)
        return len(placed)

    def _replay(
        self,
        conn: sqlite3.Connection,
        placed: Sequence[tuple[int, Entry, bytes | None]],
        embed: Embed,
        progress: Callable[[int], None] | None,
    ) -> None:
        """Derive tables for entries in ledger order (see :func:`mentis.store.base.replay`)."""

        def correction(rowid: int, body: dict[str, Any]) -> None:
            arow = conn.execute(
                "SELECT a.rowid, b.body FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
                "WHERE a.attempt_id=? AND a.repository=?",
                (body["attempt_id"], body["repository"]),
            ).fetchone()
            if arow is not None:
                vec = embed([attempt_conclusion(orjson.loads(arow[1]))])[0]
                self._derive_correction(conn, rowid, int(arow[0]), body, vec)

        replay(
            placed,
            embed,
            progress,
            attempt=lambda rowid, body, vec: self._derive_attempt(conn, rowid, body, vec),
            thought=lambda rowid, body, vec: self._derive_thought(conn, rowid, body, vec),
            correction=correction,
            forget=lambda rowid, body: self._derive_forget(conn, rowid, body),
        )
