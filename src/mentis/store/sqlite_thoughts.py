"""Thought tables of the SQLite store: index, labels, edges, FTS, vectors, rejection fingerprints.

A mixin of :class:`mentis.store.sqlite.SqliteStore`; like every derived table these are rebuilt
from the ledger. ``thought_edge`` holds refs (kind ``ref``) and relations with their validity
window; ``rejections`` holds a fingerprint (normalised-text hash and vector) of every conclusion
that was rejected — an attempt marked outdated, a thought Corrected or Invalidated.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mentis.errors import Conflict, NotFound
from mentis.ledger import Entry, canonical
from mentis.model import INVALIDATING_KINDS, REJECTING_KINDS
from mentis.records import THOUGHT_FTS_WEIGHTS as THOUGHT_FTS_WEIGHTS
from mentis.records import ThoughtBody, tombstone
from mentis.store.base import RejectionRow
from mentis.store.sqlite_base import SqliteBase
from mentis.texts import fingerprint

THOUGHT_SCHEMA = """
CREATE TABLE IF NOT EXISTS thought_idx(
    rowid INTEGER PRIMARY KEY, thought_id TEXT NOT NULL UNIQUE, repository TEXT NOT NULL,
    type TEXT NOT NULL, role TEXT NOT NULL, agent_id TEXT NOT NULL, task_id TEXT,
    created_at TEXT NOT NULL, importance REAL NOT NULL, confidence REAL);
CREATE INDEX IF NOT EXISTS thought_repo_time ON thought_idx(repository, created_at);
CREATE TABLE IF NOT EXISTS thought_label(rowid INTEGER NOT NULL, kind TEXT NOT NULL, label TEXT NOT NULL);
DROP INDEX IF EXISTS thought_label_idx;
CREATE INDEX IF NOT EXISTS thought_label_cover ON thought_label(kind, label, rowid);
CREATE INDEX IF NOT EXISTS thought_label_row ON thought_label(rowid);
CREATE TABLE IF NOT EXISTS thought_edge(
    from_rowid INTEGER NOT NULL, from_id TEXT NOT NULL, kind TEXT NOT NULL, to_id TEXT NOT NULL,
    valid_at TEXT, invalid_at TEXT, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS thought_edge_to ON thought_edge(to_id);
CREATE INDEX IF NOT EXISTS thought_edge_from ON thought_edge(from_id);
CREATE TABLE IF NOT EXISTS thought_vectors(
    rowid INTEGER PRIMARY KEY, repository TEXT NOT NULL, vec BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS thought_vectors_repository ON thought_vectors(repository);
CREATE TABLE IF NOT EXISTS rejections(
    id INTEGER PRIMARY KEY, by_rowid INTEGER NOT NULL, by_id TEXT NOT NULL, repository TEXT NOT NULL,
    target_id TEXT NOT NULL, target_kind TEXT NOT NULL, at TEXT NOT NULL, norm_hash TEXT NOT NULL,
    vec BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS rejections_repo ON rejections(repository);
CREATE INDEX IF NOT EXISTS rejections_hash ON rejections(norm_hash);
"""
THOUGHT_TABLES = (
    "thought_idx",
    "thought_label",
    "thought_edge",
    "thought_vectors",
    "rejections",
)


THOUGHT_VIEWS = """
CREATE TEMP VIEW thoughts AS
SELECT json_extract(b.body, '$.thought_id') AS thought_id,
       json_extract(b.body, '$.repository') AS repository,
       json_extract(b.body, '$.type') AS type,
       json_extract(b.body, '$.role') AS role,
       json_extract(b.body, '$.content') AS content,
       CAST(json_extract(b.body, '$.importance') AS REAL) AS importance,
       CAST(json_extract(b.body, '$.confidence') AS REAL) AS confidence,
       json_extract(b.body, '$.created_at') AS created_at,
       json_extract(b.body, '$.agent_id') AS agent_id,
       json_extract(b.body, '$.task_id') AS task_id,
       json(json_extract(b.body, '$.tags')) AS tags,
       json(json_extract(b.body, '$.concepts')) AS concepts
FROM main.thought_idx t JOIN checked_bodies b ON b.rowid = t.rowid
WHERE mentis_visible(t.repository) LIMIT -1;

CREATE TEMP VIEW relations AS
SELECT json_extract(b.body, '$.thought_id') AS from_id,
       json_extract(r.value, '$.kind') AS kind,
       json_extract(r.value, '$.target_id') AS to_id,
       json_extract(r.value, '$.valid_at') AS valid_at,
       json_extract(r.value, '$.invalid_at') AS invalid_at
FROM main.thought_idx t JOIN checked_bodies b ON b.rowid = t.rowid, json_each(b.body, '$.relations') r
WHERE mentis_visible(t.repository) LIMIT -1;
"""


def _unit_real(value: str | None) -> float | None:
    return None if value is None else float(value)


class ThoughtTables(SqliteBase):
    """Thought reads and writes; mixed into SqliteStore (``self`` is the store)."""

    def append_thought(
        self,
        chain: str,
        thought_id: str,
        at: str,
        agent: str,
        body: dict[str, Any],
        vector: np.ndarray,
    ) -> Entry:
        raw = canonical(body)
        with self._write() as conn:
            rowid, entry = self._append(conn, chain, "thought", thought_id, at, agent, raw)
            self._derive_thought(conn, rowid, body, vector)
        return entry

    def _derive_thought(
        self, conn: sqlite3.Connection, rowid: int, body: dict[str, Any], vector: np.ndarray
    ) -> None:
        tid, repo, at = body["thought_id"], body["repository"], body["created_at"]
        thought = ThoughtBody.from_json(body)
        conn.execute(
            "INSERT INTO thought_idx(rowid, thought_id, repository, type, role, agent_id, task_id, "
            "created_at, "
            "importance, confidence) VALUES(?,?,?,?,?,?,?,?,?,?)",
            (
                rowid,
                tid,
                repo,
                body["type"],
                body["role"],
                body["agent_id"],
                body.get("task_id"),
                at,
                float(body["importance"]),
                _unit_real(body.get("confidence")),
            ),
        )
        labels = [(rowid, kind, label) for kind, label in thought.labels]
        conn.executemany("INSERT INTO thought_label(rowid, kind, label) VALUES(?,?,?)", labels)
        edges = [(rowid, tid, "ref", ref, None, None, at) for ref in body.get("refs", [])]
        edges += [
            (rowid, tid, r["kind"], r["target_id"], r.get("valid_at"), r.get("invalid_at"), at)
            for r in body.get("relations", [])
        ]
        conn.executemany(
            "INSERT INTO thought_edge(from_rowid, from_id, kind, to_id, valid_at, invalid_at, created_at) "
            "VALUES(?,?,?,?,?,?,?)",
            edges,
        )
        self._index_terms(conn, "thought_terms", rowid, repo, *thought.index_fields)
        conn.execute(
            "INSERT INTO thought_vectors(rowid, repository, vec) VALUES(?,?,?)",
            (rowid, repo, np.ascontiguousarray(vector, dtype=np.float32).tobytes()),
        )
        for r in body.get("relations", []):
            if r["kind"] in REJECTING_KINDS:
                self._reject_thought(conn, rowid, tid, repo, at, r["target_id"])

    def forget_thought(
        self, chain: str, tombstone_id: str, at: str, agent: str, thought_id: str, reason: str | None
    ) -> Entry:
        """Erase a thought's body and derived rows; the chain keeps a tombstone listing its seq."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT t.rowid, e.seq FROM thought_idx t JOIN entries e ON e.rowid = t.rowid "
                "WHERE t.thought_id=? AND t.repository=?",
                (thought_id, chain),
            ).fetchone()
            if row is None:
                gone = conn.execute(
                    "SELECT 1 FROM entries e JOIN bodies b ON b.rowid = e.rowid WHERE e.chain=? "
                    "AND e.kind='forget' AND json_extract(b.body, '$.thought_id')=?",
                    (chain, thought_id),
                ).fetchone()
                if gone is not None:
                    raise Conflict(f"thought {thought_id} in {chain} was forgotten; its content is erased")
                raise NotFound(f"no thought {thought_id} in repository {chain}; search_thoughts finds ids")
            body = tombstone("thought", thought_id, chain, [int(row[1])], reason, agent, at).to_json()
            tomb_rowid, entry = self._append(conn, chain, "forget", tombstone_id, at, agent, canonical(body))
            self._derive_forget_thought(conn, tomb_rowid, body)
        self.erase_on_disk()
        return entry

    def _derive_forget_thought(self, conn: sqlite3.Connection, tomb_rowid: int, tomb: dict[str, Any]) -> None:
        """Drop a forgotten thought's body, index rows, its own edges, its terms and vector, and every
        rejection fingerprint it made or that was made of it. Edges other thoughts hold to it stay
        (their bodies name it): reads report them as dangling."""
        thought_id, repo = tomb["thought_id"], tomb["repository"]
        row = conn.execute(
            "SELECT rowid FROM thought_idx WHERE thought_id=? AND repository=?", (thought_id, repo)
        ).fetchone()
        if row is None:
            return
        rowid = int(row[0])
        conn.execute("DELETE FROM bodies WHERE rowid=?", (rowid,))
        conn.execute("DELETE FROM rejections WHERE by_rowid=? OR (target_kind='thought' AND target_id=?)",
                     (rowid, thought_id))  # fmt: skip
        conn.execute("DELETE FROM thought_edge WHERE from_rowid=?", (rowid,))
        conn.execute("DELETE FROM thought_label WHERE rowid=?", (rowid,))
        conn.execute("DELETE FROM thought_vectors WHERE rowid=?", (rowid,))
        self._unindex_terms(conn, "thought_terms", rowid)
        conn.execute("DELETE FROM thought_idx WHERE rowid=?", (rowid,))

    def _reject_thought(
        self,
        conn: sqlite3.Connection,
        by_rowid: int,
        by_id: str,
        repo: str,
        at: str,
        target: str,
    ) -> None:
        row = conn.execute(
            "SELECT b.body, v.vec FROM thought_idx t JOIN bodies b ON b.rowid = t.rowid "
            "JOIN thought_vectors v ON v.rowid = t.rowid WHERE t.thought_id = ? AND t.repository = ?",
            (target, repo),
        ).fetchone()
        if row is None:
            return
        text = ThoughtBody.parse(row[0]).conclusion
        self._add_rejection(conn, by_rowid, by_id, repo, target, "thought", at, fingerprint(text), row[1])

    @staticmethod
    def _add_rejection(
        conn: sqlite3.Connection,
        by_rowid: int,
        by_id: str,
        repo: str,
        target: str,
        kind: str,
        at: str,
        norm_hash: str,
        vec: bytes,
    ) -> None:
        conn.execute(
            "INSERT INTO rejections(by_rowid, by_id, repository, target_id, target_kind, at, norm_hash, vec) "
            "VALUES(?,?,?,?,?,?,?,?)",
            (by_rowid, by_id, repo, target, kind, at, norm_hash, vec),
        )

    # ------------------------------------------------------------ reads

    def find_records(self, ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """id → (repository, 'thought' | 'attempt') for the live records among ``ids``."""
        wanted = list(dict.fromkeys(ids))
        out: dict[str, tuple[str, str]] = {}
        with self._read() as conn:
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for tid, repo in conn.execute(
                    f"SELECT thought_id, repository FROM thought_idx WHERE thought_id IN ({marks})", chunk
                ):
                    out[tid] = (repo, "thought")
                for aid, repo in conn.execute(
                    f"SELECT attempt_id, repository FROM attempt_idx WHERE attempt_id IN ({marks})", chunk
                ):
                    out[aid] = (repo, "attempt")
        return out

    def thought_lexical(
        self, match: str, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self.lexical_search("thought_terms", match, repositories, limit)

    def thought_edges_between(
        self, seeds: Sequence[int], repositories: Sequence[str] | None, per_seed: int, fanout: int = 200
    ) -> list[tuple[int, int, float]]:
        """Graph links from each seed thought to thoughts of ``repositories`` (None: all): refs and
        relations either way (1.0), each shared concept (0.5) or tag (0.25); labels on more than
        ``fanout`` of those thoughts link nothing."""
        edges: list[tuple[int, int, float]] = []
        repo_sql, repo_args = "", []
        if repositories is not None:
            repo_sql, repo_args = (
                f"AND b.repository IN ({','.join('?' * len(repositories))})",
                list(repositories),
            )
        with self._read() as conn:
            for seed in seeds:
                for (other,) in conn.execute(
                    "SELECT b.rowid FROM thought_idx a JOIN thought_edge e ON e.from_rowid = a.rowid "
                    f"JOIN thought_idx b ON b.thought_id = e.to_id WHERE a.rowid = ? {repo_sql} "
                    "UNION SELECT e.from_rowid FROM thought_idx a "
                    "JOIN thought_edge e ON e.to_id = a.thought_id "
                    f"JOIN thought_idx b ON b.rowid = e.from_rowid WHERE a.rowid = ? {repo_sql} LIMIT ?",
                    (seed, *repo_args, seed, *repo_args, per_seed),
                ):
                    edges.append((seed, int(other), 1.0))
                for other, weight in self._label_links(
                    conn, "thought_label", "thought_idx", "concept", seed, repositories, fanout, per_seed
                ):
                    edges.append((seed, other, weight))
        return edges

    def thought_vector(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self._search_vectors("thought_vectors", query, repositories, limit)

    def filter_thoughts(
        self,
        rowids: Sequence[int] | None,
        where: Sequence[tuple[str, Sequence[Any]]],
        limit: int,
    ) -> list[int]:
        """Rowids passing every ``(sql condition on t, args)``; candidates in order, else newest first."""
        sql = "SELECT t.rowid FROM thought_idx t"
        clauses = [c for c, _ in where]
        args: list[Any] = [a for _, xs in where for a in xs]
        if rowids is not None:
            if not rowids:
                return []
            clauses.append(f"t.rowid IN ({','.join('?' * len(rowids))})")
            args.extend(rowids)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        if rowids is None:
            sql += " ORDER BY t.rowid DESC"
        sql += " LIMIT ?"
        args.append(limit)
        with self._read() as conn:
            found = [r for (r,) in conn.execute(sql, args)]
        if rowids is None:
            return found
        keep = set(found)
        return [r for r in rowids if r in keep]

    def invalidations(self, ids: Sequence[str], as_of: str) -> dict[str, list[str]]:
        """target id → ids of thoughts whose Supersedes/Corrects/Invalidates relation holds at ``as_of``.

        A relation counts from the later of its thought's time and its ``valid_at``, and stops at
        its ``invalid_at``; a thought recorded after ``as_of`` did not exist yet.
        """
        out: dict[str, list[str]] = {}
        if not ids:
            return out
        kinds = sorted(INVALIDATING_KINDS)
        with self._read() as conn:
            for start in range(0, len(ids), 500):
                chunk = list(ids[start : start + 500])
                rows = conn.execute(
                    f"SELECT to_id, from_id FROM thought_edge WHERE to_id IN ({','.join('?' * len(chunk))}) "
                    f"AND kind IN ({','.join('?' * len(kinds))}) AND created_at <= ? "
                    "AND coalesce(valid_at, created_at) <= ? AND (invalid_at IS NULL OR invalid_at > ?) "
                    "ORDER BY from_rowid",
                    [*chunk, *kinds, as_of, as_of, as_of],
                )
                for to_id, from_id in rows:
                    out.setdefault(to_id, []).append(from_id)
        return out

    def load_thoughts(self, rowids: Sequence[int]) -> dict[int, tuple[Entry, dict[str, Any]]]:
        with self._read() as conn:
            return self._load(conn, rowids, "thought")

    def thought_rowids(self, ids: Sequence[str]) -> dict[str, int]:
        with self._read() as conn:
            out: dict[str, int] = {}
            for start in range(0, len(ids), 500):
                chunk = list(ids[start : start + 500])
                marks = ",".join("?" * len(chunk))
                for tid, r in conn.execute(
                    f"SELECT thought_id, rowid FROM thought_idx WHERE thought_id IN ({marks})", chunk
                ):
                    out[tid] = int(r)
            return out

    def thought_rowid_at(self, chain: str | None, seq: int | None, hash_: str | None) -> int | None:
        with self._read() as conn:
            if hash_ is not None:
                row = conn.execute(
                    "SELECT t.rowid FROM entries e JOIN thought_idx t ON t.rowid = e.rowid WHERE e.hash = ?",
                    (hash_,),
                ).fetchone()
            else:
                row = conn.execute(
                    "SELECT t.rowid FROM entries e JOIN thought_idx t ON t.rowid = e.rowid "
                    "WHERE e.chain = ? AND e.seq = ?",
                    (chain, seq),
                ).fetchone()
        return None if row is None else int(row[0])

    def thought_edges(
        self, ids: Sequence[str], direction: str, kinds: Sequence[str] | None
    ) -> list[tuple[str, str, str]]:
        """(from_id, kind, to_id) edges touching ``ids`` in the given direction."""
        out: list[tuple[str, str, str]] = []
        if not ids:
            return out
        kind_sql, kind_args = "", []
        if kinds:
            kind_sql = f" AND kind IN ({','.join('?' * len(kinds))})"
            kind_args = list(kinds)
        marks = ",".join("?" * len(ids))
        with self._read() as conn:
            if direction in ("out", "both"):
                out += conn.execute(
                    f"SELECT from_id, kind, to_id FROM thought_edge WHERE from_id IN ({marks}){kind_sql} "
                    "ORDER BY from_rowid",
                    [*ids, *kind_args],
                ).fetchall()
            if direction in ("in", "both"):
                out += conn.execute(
                    f"SELECT from_id, kind, to_id FROM thought_edge WHERE to_id IN ({marks}){kind_sql} "
                    "ORDER BY from_rowid",
                    [*ids, *kind_args],
                ).fetchall()
        return out

    def recent_thought_vectors(self, repository: str, n: int) -> tuple[list[str], np.ndarray]:
        """The ``n`` newest thoughts of a repository: their ids and vectors."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT t.thought_id, v.vec FROM thought_idx t JOIN thought_vectors v ON v.rowid = t.rowid "
                "WHERE t.repository = ? ORDER BY t.rowid DESC LIMIT ?",
                (repository, n),
            ).fetchall()
        if not rows:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(-1, self.dim)
        return [r[0] for r in rows], matrix

    def has_rejections(self, repository: str) -> bool:
        with self._lock, self._translate("read"):
            row = self._conn.execute("SELECT 1 FROM rejections WHERE repository = ? LIMIT 1", (repository,))
            return row.fetchone() is not None

    def repositories(self) -> list[str]:
        with self._lock, self._translate("read"):
            return [c for (c,) in self._conn.execute("SELECT chain FROM heads ORDER BY chain")]

    def rejections(self, repository: str) -> list[RejectionRow]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT by_rowid, by_id, target_id, target_kind, at, norm_hash, vec FROM rejections "
                "WHERE repository = ? ORDER BY id",
                (repository,),
            ).fetchall()
        return [
            RejectionRow(r[0], r[1], r[2], r[3], r[4], r[5], np.frombuffer(r[6], dtype=np.float32))
            for r in rows
        ]

    def rejection_reason(self, by_rowid: int) -> str:
        """Why a rejection happened, read from the rejecting entry's verified body."""
        with self._read() as conn:
            kind = conn.execute("SELECT kind FROM entries WHERE rowid = ?", (by_rowid,)).fetchone()
            if kind is None:
                return ""
            loaded = self._load(conn, [by_rowid], kind[0])
        if by_rowid not in loaded:
            return ""
        body = loaded[by_rowid][1]
        return str(body.get("reason") or body.get("content") or "")
