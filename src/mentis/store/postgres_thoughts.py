"""Thought tables of the PostgreSQL store: index, labels, edges, lexical terms, vectors, fingerprints.

A mixin of :class:`mentis.store.postgres.PostgresStore`, mirroring ``sqlite_thoughts.py`` method
for method; like every derived table these are rebuilt from the ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mentis.errors import Conflict, NotFound
from mentis.ledger import Entry, canonical
from mentis.model import INVALIDATING_KINDS, REJECTING_KINDS
from mentis.records import ThoughtBody, tombstone
from mentis.store.base import RejectionRow
from mentis.store.postgres_base import Conn, scope_sql, vec
from mentis.store.postgres_lexicon import PgLexicon
from mentis.texts import fingerprint


def _q(sql: str) -> str:
    """A condition written with ``?`` placeholders (the SQLite style callers use) in psycopg style."""
    return sql.replace("%", "%%").replace("?", "%s")


class ThoughtTables(PgLexicon):
    """Thought reads and writes; mixed into PostgresStore (``self`` is the store)."""

    def append_thought(
        self, chain: str, thought_id: str, at: str, agent: str, body: dict[str, Any], vector: np.ndarray
    ) -> Entry:
        raw = canonical(body)
        with self._write(chain) as conn:
            rowid, entry = self._append(conn, chain, "thought", thought_id, at, agent, raw)
            self._derive_thought(conn, rowid, body, vector)
        return entry

    def _derive_thought(self, conn: Conn, rowid: int, body: dict[str, Any], vector: np.ndarray) -> None:
        tid, repo, at = body["thought_id"], body["repository"], body["created_at"]
        confidence = body.get("confidence")
        conn.execute(
            "INSERT INTO thought_idx(rowid, thought_id, repository, type, role, agent_id, task_id, "
            "created_at, importance, confidence) VALUES(%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
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
                None if confidence is None else float(confidence),
            ),
        )
        labels = [(rowid, kind, label) for kind, label in ThoughtBody.from_json(body).labels]
        edges = [(rowid, tid, "ref", ref, None, None, at) for ref in body.get("refs", [])]
        edges += [
            (rowid, tid, r["kind"], r["target_id"], r.get("valid_at"), r.get("invalid_at"), at)
            for r in body.get("relations", [])
        ]
        with conn.cursor() as cur:
            if labels:
                cur.executemany("INSERT INTO thought_label(rowid, kind, label) VALUES(%s,%s,%s)", labels)
            if edges:
                cur.executemany(
                    "INSERT INTO thought_edge(from_rowid, from_id, kind, to_id, valid_at, invalid_at, "
                    "created_at) VALUES(%s,%s,%s,%s,%s,%s,%s)",
                    edges,
                )
        self._index_thought(conn, rowid, body)
        conn.execute(
            "INSERT INTO thought_vectors(rowid, repository, vec) VALUES(%s,%s,%s)", (rowid, repo, vec(vector))
        )
        for r in body.get("relations", []):
            if r["kind"] in REJECTING_KINDS:
                self._reject_thought(conn, rowid, tid, repo, at, r["target_id"])

    def forget_thought(
        self, chain: str, tombstone_id: str, at: str, agent: str, thought_id: str, reason: str | None
    ) -> Entry:
        """Erase a thought's body and derived rows; the chain keeps a tombstone listing its seq."""
        with self._write(chain) as conn:
            row = conn.execute(
                "SELECT t.rowid, e.seq FROM thought_idx t JOIN entries e ON e.rowid = t.rowid "
                "WHERE t.thought_id=%s AND t.repository=%s",
                (thought_id, chain),
            ).fetchone()
            if row is None:
                gone = conn.execute(
                    "SELECT 1 FROM entries e JOIN bodies b ON b.rowid = e.rowid WHERE e.chain=%s "
                    "AND e.kind='forget' AND convert_from(b.body, 'UTF8')::json->>'thought_id' = %s",
                    (chain, thought_id),
                ).fetchone()
                if gone is not None:
                    raise Conflict(f"thought {thought_id} in {chain} was forgotten; its content is erased")
                raise NotFound(f"no thought {thought_id} in repository {chain}; search_thoughts finds ids")
            body = tombstone("thought", thought_id, chain, [int(row[1])], reason, agent, at).to_json()
            tomb_rowid, entry = self._append(conn, chain, "forget", tombstone_id, at, agent, canonical(body))
            self._derive_forget_thought(conn, tomb_rowid, body)
        return entry

    def _derive_forget_thought(self, conn: Conn, tomb_rowid: int, tomb: dict[str, Any]) -> None:
        """As in ``sqlite_thoughts``: body, index rows, own edges, FTS, vector and fingerprints go."""
        thought_id, repo = tomb["thought_id"], tomb["repository"]
        row = conn.execute(
            "SELECT rowid FROM thought_idx WHERE thought_id=%s AND repository=%s", (thought_id, repo)
        ).fetchone()
        if row is None:
            return
        rowid = int(row[0])
        conn.execute("DELETE FROM bodies WHERE rowid=%s", (rowid,))
        conn.execute("DELETE FROM rejections WHERE by_rowid=%s OR (target_kind='thought' AND target_id=%s)",
                     (rowid, thought_id))  # fmt: skip
        self._unindex_terms(conn, "thought_terms", rowid)
        for table in ("thought_edge", "thought_label", "thought_vectors", "thought_idx"):
            column = "from_rowid" if table == "thought_edge" else "rowid"
            conn.execute(f"DELETE FROM {table} WHERE {column}=%s", (rowid,))

    def _reject_thought(self, conn: Conn, by_rowid: int, by_id: str, repo: str, at: str, target: str) -> None:
        row = conn.execute(
            "SELECT b.body, v.vec FROM thought_idx t JOIN bodies b ON b.rowid = t.rowid "
            "JOIN thought_vectors v ON v.rowid = t.rowid WHERE t.thought_id = %s AND t.repository = %s",
            (target, repo),
        ).fetchone()
        if row is None:
            return
        text = ThoughtBody.parse(row[0]).conclusion
        blob = vec(row[1]).tobytes()
        self._add_rejection(conn, by_rowid, by_id, repo, target, "thought", at, fingerprint(text), blob)

    @staticmethod
    def _add_rejection(
        conn: Conn,
        by_rowid: int,
        by_id: str,
        repo: str,
        target: str,
        kind: str,
        at: str,
        norm_hash: str,
        blob: bytes,
    ) -> None:
        conn.execute(
            "INSERT INTO rejections(by_rowid, by_id, repository, target_id, target_kind, at, norm_hash, vec) "
            "VALUES(%s,%s,%s,%s,%s,%s,%s,%s)",
            (by_rowid, by_id, repo, target, kind, at, norm_hash, blob),
        )

    # ------------------------------------------------------------ reads

    def find_records(self, ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """id → (repository, 'thought' | 'attempt') for the live records among ``ids``."""
        wanted = list(dict.fromkeys(ids))
        out: dict[str, tuple[str, str]] = {}
        with self._read() as conn:
            for tid, repo in conn.execute(
                "SELECT thought_id, repository FROM thought_idx WHERE thought_id = ANY(%s)", (wanted,)
            ):
                out[tid] = (repo, "thought")
            for aid, repo in conn.execute(
                "SELECT attempt_id, repository FROM attempt_idx WHERE attempt_id = ANY(%s)", (wanted,)
            ):
                out[aid] = (repo, "attempt")
        return out

    def _vector(
        self, table: str, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        raise NotImplementedError  # defined by PostgresStore

    def thought_lexical(
        self, match: str, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self.lexical_search("thought_terms", match, repositories, limit)

    def thought_vector(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self._vector("thought_vectors", query, repositories, limit)

    def filter_thoughts(
        self, rowids: Sequence[int] | None, where: Sequence[tuple[str, Sequence[Any]]], limit: int
    ) -> list[int]:
        """Rowids passing every ``(sql condition on t, args)``; candidates in order, else newest first."""
        sql = "SELECT t.rowid FROM thought_idx t"
        clauses = [_q(c) for c, _ in where]
        args: list[Any] = [a for _, xs in where for a in xs]
        if rowids is not None:
            if not rowids:
                return []
            clauses.append("t.rowid = ANY(%s)")
            args.append(list(rowids))
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        if rowids is None:
            sql += " ORDER BY t.rowid DESC"
        sql += " LIMIT %s"
        args.append(limit)
        with self._read() as conn:
            found = [int(r) for (r,) in conn.execute(sql, args)]
        if rowids is None:
            return found
        keep = set(found)
        return [r for r in rowids if r in keep]

    def invalidations(self, ids: Sequence[str], as_of: str) -> dict[str, list[str]]:
        """target id → ids of thoughts whose Supersedes/Corrects/Invalidates relation holds at ``as_of``."""
        out: dict[str, list[str]] = {}
        if not ids:
            return out
        with self._read() as conn:
            for to_id, from_id in conn.execute(
                "SELECT to_id, from_id FROM thought_edge WHERE to_id = ANY(%s) AND kind = ANY(%s) "
                "AND created_at <= %s AND coalesce(valid_at, created_at) <= %s "
                "AND (invalid_at IS NULL OR invalid_at > %s) ORDER BY from_rowid",
                (list(ids), sorted(INVALIDATING_KINDS), as_of, as_of, as_of),
            ):
                out.setdefault(to_id, []).append(from_id)
        return out

    def load_thoughts(self, rowids: Sequence[int]) -> dict[int, tuple[Entry, dict[str, Any]]]:
        with self._read() as conn:
            return self._load(conn, rowids, "thought")

    def thought_rowids(self, ids: Sequence[str]) -> dict[str, int]:
        with self._read() as conn:
            return {
                tid: int(r)
                for tid, r in conn.execute(
                    "SELECT thought_id, rowid FROM thought_idx WHERE thought_id = ANY(%s)", (list(ids),)
                )
            }

    def thought_rowid_at(self, chain: str | None, seq: int | None, hash_: str | None) -> int | None:
        with self._read() as conn:
            if hash_ is not None:
                row = conn.execute(
                    "SELECT t.rowid FROM entries e JOIN thought_idx t ON t.rowid = e.rowid WHERE e.hash = %s",
                    (hash_,),
                ).fetchone()
            else:
                row = conn.execute(
                    "SELECT t.rowid FROM entries e JOIN thought_idx t ON t.rowid = e.rowid "
                    "WHERE e.chain = %s AND e.seq = %s",
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
        kind_sql, kind_args = ("", []) if not kinds else (" AND kind = ANY(%s)", [list(kinds)])
        with self._read() as conn:
            for column, wanted in (("from_id", ("out", "both")), ("to_id", ("in", "both"))):
                if direction in wanted:
                    out += [
                        (str(a), str(b), str(c))
                        for a, b, c in conn.execute(
                            "SELECT from_id, kind, to_id FROM thought_edge "
                            f"WHERE {column} = ANY(%s){kind_sql} "
                            "ORDER BY from_rowid",
                            [list(ids), *kind_args],
                        )
                    ]
        return out

    def thought_edges_between(
        self, seeds: Sequence[int], repositories: Sequence[str] | None, per_seed: int, fanout: int = 200
    ) -> list[tuple[int, int, float]]:
        """Graph links from each seed thought to thoughts of ``repositories`` (None: all): refs and
        relations either way (1.0), each shared concept (0.5) or tag (0.25); labels on more than
        ``fanout`` of those thoughts link nothing."""
        edges: list[tuple[int, int, float]] = []
        repo_sql, count_join, repo_args = scope_sql(repositories, "thought_idx")
        with self._read() as conn:
            for seed in seeds:
                for (other,) in conn.execute(
                    "SELECT b.rowid FROM thought_idx a JOIN thought_edge e ON e.from_rowid = a.rowid "
                    f"JOIN thought_idx b ON b.thought_id = e.to_id WHERE a.rowid = %s {repo_sql} "
                    "UNION SELECT e.from_rowid FROM thought_idx a "
                    "JOIN thought_edge e ON e.to_id = a.thought_id "
                    f"JOIN thought_idx b ON b.rowid = e.from_rowid WHERE a.rowid = %s {repo_sql} LIMIT %s",
                    (seed, *repo_args, seed, *repo_args, per_seed),
                ):
                    edges.append((seed, int(other), 1.0))
                for other, weight in conn.execute(
                    "SELECT l2.rowid, sum(CASE l1.kind WHEN 'concept' THEN 0.5 ELSE 0.25 END) AS w "
                    "FROM thought_label l1 JOIN thought_label l2 ON l2.kind = l1.kind "
                    "AND l2.label = l1.label AND l2.rowid != l1.rowid "
                    "JOIN thought_idx b ON b.rowid = l2.rowid "
                    f"WHERE l1.rowid = %s {repo_sql} AND (SELECT count(*) FROM "
                    f"(SELECT 1 FROM thought_label x {count_join}"
                    "WHERE x.kind = l1.kind AND x.label = l1.label LIMIT %s + 1) capped) <= %s "
                    "GROUP BY l2.rowid ORDER BY w DESC, l2.rowid LIMIT %s",
                    (seed, *repo_args, *repo_args, fanout, fanout, per_seed),
                ):
                    edges.append((seed, int(other), float(weight)))
        return edges

    def recent_thought_vectors(self, repository: str, n: int) -> tuple[list[str], np.ndarray]:
        """The ``n`` newest thoughts of a repository: their ids and vectors."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT t.thought_id, v.vec FROM thought_idx t JOIN thought_vectors v ON v.rowid = t.rowid "
                "WHERE t.repository = %s ORDER BY t.rowid DESC LIMIT %s",
                (repository, n),
            ).fetchall()
        if not rows:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        return [r[0] for r in rows], np.stack([vec(r[1]) for r in rows])

    def has_rejections(self, repository: str) -> bool:
        with self._read() as conn:
            return (
                conn.execute(
                    "SELECT 1 FROM rejections WHERE repository = %s LIMIT 1", (repository,)
                ).fetchone()
                is not None
            )

    def repositories(self) -> list[str]:
        with self._read() as conn:
            return [c for (c,) in conn.execute("SELECT chain FROM heads ORDER BY chain")]

    def rejections(self, repository: str) -> list[RejectionRow]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT by_rowid, by_id, target_id, target_kind, at, norm_hash, vec FROM rejections "
                "WHERE repository = %s ORDER BY id",
                (repository,),
            ).fetchall()
        return [
            RejectionRow(
                int(r[0]), r[1], r[2], r[3], r[4], r[5], np.frombuffer(bytes(r[6]), dtype=np.float32)
            )
            for r in rows
        ]

    def rejection_reason(self, by_rowid: int) -> str:
        """Why a rejection happened, read from the rejecting entry's verified body."""
        with self._read() as conn:
            kind = conn.execute("SELECT kind FROM entries WHERE rowid = %s", (by_rowid,)).fetchone()
            if kind is None:
                return ""
            loaded = self._load(conn, [by_rowid], kind[0])
        if by_rowid not in loaded:
            return ""
        body = loaded[by_rowid][1]
        return str(body.get("reason") or body.get("content") or "")
