"""Thought tables of the relational core: index, labels, edges, lexical rows, vectors and
rejection fingerprints, written once for both backends (see :mod:`mentis.store.shared.core`).

Like every derived table these are rebuilt from the ledger. ``thought_edge`` holds refs (kind
``ref``) and relations with their validity window; ``window_terms`` holds, for a thought of a
session, its content with the content of the thought just before it (rowid − 1) when that one is a
live thought of the same repository and session (the causal conversational window of
:mod:`mentis.retrieval.window`; a forget of either erases it); ``rejections`` holds a fingerprint
(normalised-text hash and vector) of every conclusion that was rejected — an attempt marked
outdated, a thought Corrected or Invalidated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mentis.errors import Conflict, NotFound
from mentis.ledger.bodies import INVALIDATING_KINDS, REJECTING_KINDS, CorrectionBody, ThoughtBody, tombstone
from mentis.ledger.canonical import canonical
from mentis.ledger.entry import Entry
from mentis.ledger.fingerprint import fingerprint
from mentis.store.protocol import RejectionRow, StoredThought, ThoughtQuery
from mentis.store.seal import Seal
from mentis.store.shared.backend import ConnT
from mentis.store.shared.core import LedgerCore, check_list, checked_body, derived_mismatch
from mentis.store.shared.graph import for_seeds, label_links

EDGE_COLS = "from_rowid, from_id, kind, to_id, valid_at, invalid_at, created_at"
"""A ``thought_edge`` row's columns, as :meth:`ThoughtCore._check_edges` reads them."""


def _edges_of(thought: ThoughtBody) -> list[tuple[Any, ...]]:
    """The edges (``EDGE_COLS`` but the rowid) a thought's body names: what ``_derive_thought`` writes."""
    tid, at = thought.thought_id, thought.created_at
    edges: list[tuple[Any, ...]] = [(tid, "ref", ref, None, None, at) for ref in thought.refs]
    edges += [(tid, r.kind, r.target_id, r.valid_at, r.invalid_at, at) for r in thought.relations]
    return edges


class ThoughtCore(LedgerCore[ConnT]):
    """Thought writes, derivation and reads (``self`` is the store)."""

    def append_thought(self, body: ThoughtBody, vector: np.ndarray, seal: Seal) -> Entry:
        """Append a thought (its entry is its body's thought id, repository, agent and time)."""
        raw = canonical(body.to_json())
        with self._write(body.repository, commit=seal.commit) as conn:
            rowid, entry = self._append(
                conn, seal, body.repository, "thought", body.thought_id, body.created_at, body.agent_id, raw
            )
            if rowid is not None:
                self._derive_thought(conn, rowid, body, vector)
        return entry

    def _derive_thought(self, conn: ConnT, rowid: int, thought: ThoughtBody, vector: np.ndarray) -> None:
        q = self.D.q
        tid, repo, at = thought.thought_id, thought.repository, thought.created_at
        conn.execute(
            q(
                "INSERT INTO thought_idx(rowid, thought_id, repository, type, role, agent_id, task_id, "
                "created_at, importance, confidence, scope) VALUES(?,?,?,?,?,?,?,?,?,?,?)"
            ),
            (
                rowid,
                tid,
                repo,
                thought.type,
                thought.role,
                thought.agent_id,
                thought.task_id,
                at,
                float(thought.importance),
                None if thought.confidence is None else float(thought.confidence),
                thought.scope,
            ),
        )
        labels = [(rowid, kind, label) for kind, label in thought.labels]
        edges = [(rowid, *edge) for edge in _edges_of(thought)]
        self.D.many(conn, "INSERT INTO thought_label(rowid, kind, label) VALUES(?,?,?)", labels)
        self.D.many(
            conn,
            f"INSERT INTO thought_edge({EDGE_COLS}) VALUES(?,?,?,?,?,?,?)",
            edges,
        )
        self._note_scope(conn, thought, thought.scope)
        self._index_record(conn, "thought_terms", rowid, thought)
        self._index_window(conn, rowid, thought)
        self._insert_vector(conn, "thought_vectors", rowid, thought.scope, vector)
        for r in thought.relations:
            if r.kind in REJECTING_KINDS:
                self._reject_thought(conn, rowid, tid, repo, at, r.target_id)

    def _index_window(self, conn: ConnT, rowid: int, thought: ThoughtBody) -> None:
        """The thought's causal window row in ``window_terms``: the content of the thought just
        before it (rowid − 1, its body checked against its ledger entry) and its own, when that
        one is a live thought of the same repository and session (else no row)."""
        if not thought.session_id:
            return
        row = conn.execute(
            self.D.q(
                "SELECT t.scope, b.body, e.body_hash FROM thought_idx t JOIN bodies b ON "
                "b.rowid = t.rowid JOIN entries e ON e.rowid = t.rowid WHERE t.rowid=?"
            ),
            (rowid - 1,),
        ).fetchone()
        if row is None or row[0] != thought.scope:  # another repository's, or another scope's
            return
        before = ThoughtBody.parse(checked_body(rowid - 1, bytes(row[1]), row[2]))
        if before.session_id == thought.session_id:
            fields = (before.content, thought.content)
            self._index_terms(conn, "window_terms", rowid, thought.scope, fields, (1.0, 1.0))

    def _index_windows(self, conn: ConnT) -> int:
        """Index the window of every live thought that has none yet (the migration that adds
        ``window_terms``); returns the number of window rows written."""
        rows = conn.execute(
            "SELECT t.rowid, b.body, e.body_hash FROM thought_idx t JOIN bodies b ON b.rowid = t.rowid "
            "JOIN entries e ON e.rowid = t.rowid "
            "WHERE NOT EXISTS (SELECT 1 FROM window_terms w WHERE w.rowid = t.rowid) ORDER BY t.rowid"
        ).fetchall()
        before = conn.execute("SELECT count(*) FROM window_terms").fetchone()[0]
        with self._terms_batch(conn):
            for rowid, raw, body_hash in rows:
                body = checked_body(int(rowid), bytes(raw), body_hash)
                self._index_window(conn, int(rowid), ThoughtBody.parse(body))
        return int(conn.execute("SELECT count(*) FROM window_terms").fetchone()[0]) - int(before)

    def forget_thought(
        self, chain: str, thought_id: str, reason: str | None, agent: str, seal: Seal
    ) -> Entry:
        """Erase a thought's body and derived rows; the chain keeps a tombstone (the seal's id and
        time) listing its seq."""
        q = self.D.q
        at = seal.time()
        with self._write(chain, commit=seal.commit) as conn:
            row = conn.execute(
                q(
                    "SELECT t.rowid, e.seq FROM thought_idx t JOIN entries e ON e.rowid = t.rowid "
                    "WHERE t.thought_id=? AND t.repository=?"
                ),
                (thought_id, chain),
            ).fetchone()
            if row is None:
                gone = conn.execute(
                    q(
                        "SELECT 1 FROM entries e JOIN bodies b ON b.rowid = e.rowid WHERE e.chain=? "
                        f"AND e.kind='forget' AND {self.D.json_text('b.body', 'thought_id')} = ?"
                    ),
                    (chain, thought_id),
                ).fetchone()
                if gone is not None:
                    raise Conflict(f"thought {thought_id} in {chain} was forgotten; its content is erased")
                raise NotFound(f"no thought {thought_id} in repository {chain}; search_thoughts finds ids")
            body = tombstone("thought", thought_id, chain, [int(row[1])], reason, agent, at).to_json()
            tomb_rowid, entry = self._append(
                conn, seal, chain, "forget", seal.record_id(), at, agent, canonical(body)
            )
            if tomb_rowid is not None:
                self._derive_forget_thought(conn, chain, thought_id)
        self._after_forget()
        return entry

    def _derive_forget_thought(self, conn: ConnT, repo: str, thought_id: str) -> None:
        """Drop a forgotten thought's body, index rows, its own edges, its terms and vector, and every
        rejection fingerprint it made or that was made of it. Edges other thoughts hold to it stay
        (their bodies name it): reads report them as dangling."""
        q = self.D.q
        row = conn.execute(
            q("SELECT rowid FROM thought_idx WHERE thought_id=? AND repository=?"), (thought_id, repo)
        ).fetchone()
        if row is None:
            return
        rowid = int(row[0])
        conn.execute(q("DELETE FROM bodies WHERE rowid=?"), (rowid,))
        conn.execute(
            q("DELETE FROM rejections WHERE by_rowid=? OR (target_kind='thought' AND target_id=?)"),
            (rowid, thought_id),
        )
        self._unindex_terms(conn, "thought_terms", rowid)
        # the windows holding its text: its own, and the next thought's (whose window starts here);
        # every process drops them from its in-process index (the thought's own rows need not:
        # a candidate that is no live thought is filtered out, a window names a live one)
        for window in (rowid, rowid + 1):
            if conn.execute(q("SELECT 1 FROM window_terms WHERE rowid=?"), (window,)).fetchone():
                self._removing(conn, "window", window)
                self._unindex_terms(conn, "window_terms", window)
        for table in ("thought_edge", "thought_label", "thought_vectors", "thought_idx"):
            column = "from_rowid" if table == "thought_edge" else "rowid"
            conn.execute(q(f"DELETE FROM {table} WHERE {column}=?"), (rowid,))

    def _reject_thought(
        self, conn: ConnT, by_rowid: int, by_id: str, repo: str, at: str, target: str
    ) -> None:
        row = conn.execute(
            self.D.q(
                "SELECT b.body, v.vec FROM thought_idx t JOIN bodies b ON b.rowid = t.rowid "
                "JOIN thought_vectors v ON v.rowid = t.rowid WHERE t.thought_id = ? AND t.repository = ?"
            ),
            (target, repo),
        ).fetchone()
        if row is None:
            return
        text = ThoughtBody.parse(row[0]).conclusion
        blob = self.D.vector_bytes(row[1])
        self._add_rejection(conn, by_rowid, by_id, repo, target, "thought", at, fingerprint(text), blob)

    # ------------------------------------------------------------ reads

    def find_records(self, ids: Iterable[str]) -> dict[str, tuple[str, str]]:
        """id → (repository, 'thought' | 'attempt') for the live records among ``ids``."""
        wanted = list(dict.fromkeys(ids))
        out: dict[str, tuple[str, str]] = {}
        with self._read() as conn:
            for chunk in self.D.chunks(wanted):
                for table, kind in (("thought_idx", "thought"), ("attempt_idx", "attempt")):
                    cond, args = self.D.in_(f"{kind}_id", chunk)
                    for id_, repo in conn.execute(
                        self.D.q(f"SELECT {kind}_id, repository FROM {table} WHERE {cond}"), args
                    ):
                        out[id_] = (repo, kind)
        return out

    def thought_lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 candidates among the thoughts of ``repositories`` (None: all) for ``terms``."""
        check_list(terms, "query terms")
        return self._lexical("thought_terms", terms, repositories, limit)

    def window_lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 candidates among the causal windows (a thought with the one before it in its
        session, keyed by the later thought's rowid) of ``repositories`` (None: all)."""
        check_list(terms, "query terms")
        return self._lexical("window_terms", terms, repositories, limit)

    def thought_vector(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self._vector("thought_vectors", query, repositories, limit)

    def thought_edges_between(
        self, seeds: Sequence[int], repositories: Sequence[str] | None, per_seed: int, fanout: int = 200
    ) -> list[tuple[int, int, float]]:
        """Graph links from each seed thought to thoughts of ``repositories`` (None: all): refs and
        relations either way (1.0), each shared concept (0.5) or tag (0.25); labels on more than
        ``fanout`` of those thoughts link nothing."""
        repo_sql, repo_args = "", list[Any]()
        if repositories is not None:
            check_list(repositories, "repositories")
            cond, repo_args = self.D.in_("b.scope", repositories)
            repo_sql = f"AND {cond}"
        linked = (
            "SELECT b.rowid AS other, 1.0 AS w FROM thought_idx a "
            "JOIN thought_edge e ON e.from_rowid = a.rowid "
            f"JOIN thought_idx b ON b.thought_id = e.to_id WHERE a.rowid = {{seed}} {repo_sql} "
            "UNION SELECT e.from_rowid, 1.0 FROM thought_idx a "
            "JOIN thought_edge e ON e.to_id = a.thought_id "
            f"JOIN thought_idx b ON b.rowid = e.from_rowid WHERE a.rowid = {{seed}} {repo_sql} LIMIT ?"
        )
        with self._read() as conn:
            refs = for_seeds(self.D, conn, linked, "x.other", seeds, [*repo_args, *repo_args, per_seed])
            labels = label_links(
                self.D, conn, "thought_label", "thought_idx", "concept", seeds, repositories, fanout, per_seed
            )
        return [
            (seed, int(other), float(w))
            for seed in seeds
            for found in (refs, labels)
            for other, w in found[seed]
        ]

    def task_thoughts(self, keys: Sequence[tuple[str, str]], role: str) -> dict[tuple[str, str], list[int]]:
        """Rowids of the thoughts of ``role`` of each (repository, task_id) of ``keys`` that refer
        to one of the task's attempts, newest first: one statement over the indexes (attempts by
        task, edges by target), as search asks it for every answer."""
        wanted = set(keys)
        if not wanted:
            return {}
        repos, repo_args = self.D.in_("a.repository", sorted({r for r, _ in wanted}))
        tasks, task_args = self.D.in_("a.task_id", sorted({t for _, t in wanted}))
        sql = (
            "SELECT DISTINCT t.rowid, a.repository, a.task_id FROM attempt_idx a "
            "JOIN thought_edge e ON e.to_id = a.attempt_id AND e.kind = 'ref' "
            "JOIN thought_idx t ON t.rowid = e.from_rowid "
            f"WHERE {repos} AND {tasks} AND t.role = ? AND t.repository = a.repository "
            "AND t.task_id = a.task_id"
        )
        out: dict[tuple[str, str], list[int]] = {}
        with self._read() as conn:
            for rowid, repository, task_id in conn.execute(self.D.q(sql), [*repo_args, *task_args, role]):
                if (repository, task_id) in wanted:
                    out.setdefault((repository, task_id), []).append(int(rowid))
        return {key: sorted(rows, reverse=True) for key, rows in out.items()}

    def filter_thoughts(self, rowids: Sequence[int] | None, query: ThoughtQuery, limit: int) -> list[int]:
        """Rowids passing every condition of ``query``; candidates in order, else newest first."""
        if rowids is not None and not rowids:
            return []
        clauses: list[str] = []
        args: list[Any] = []

        def where(sql: str, *values: Any) -> None:
            clauses.append(sql)
            args.extend(values)

        def any_of(column: str, values: Sequence[Any]) -> None:
            if values:
                cond, values_args = self.D.in_(column, values)
                where(cond, *values_args)

        if query.as_of is not None:
            where("t.created_at <= ?", query.as_of)
        if query.repositories is not None:
            any_of("t.repository", list(query.repositories) or [""])
        if query.scopes is not None:
            any_of("t.scope", list(query.scopes) or [""])
        any_of("t.type", query.types)
        any_of("t.role", query.roles)
        any_of("t.agent_id", query.agents)
        session = [query.source_session] if query.source_session is not None else []
        for kind, labels in (
            ("tag", query.tags),
            ("concept", query.concepts),
            ("entity_type", query.entity_types),
            ("source_session", session),
        ):
            if labels:
                cond, label_args = self.D.in_("label", labels)
                where(
                    f"t.rowid IN (SELECT rowid FROM thought_label WHERE kind = ? AND {cond})",
                    kind,
                    *label_args,
                )
        for sql, value in (
            ("t.created_at >= ?", query.since),
            ("t.created_at <= ?", query.until),
            ("t.importance >= ?", query.min_importance),
            ("t.confidence >= ?", query.min_confidence),
            ("t.task_id = ?", query.task_id),
        ):
            if value is not None:
                where(sql, float(value) if isinstance(value, int | float) else value)
        if rowids is not None:
            any_of("t.rowid", rowids)
        sql = "SELECT t.rowid FROM thought_idx t" + (" WHERE " + " AND ".join(clauses) if clauses else "")
        sql += " ORDER BY t.rowid DESC LIMIT ?" if rowids is None else " LIMIT ?"
        with self._read() as conn:
            found = [int(r) for (r,) in conn.execute(self.D.q(sql), [*args, limit])]
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
        kind_sql, kinds = self.D.in_("kind", sorted(INVALIDATING_KINDS))
        with self._read() as conn:
            for chunk in self.D.chunks(ids):
                cond, args = self.D.in_("to_id", chunk)
                rows = conn.execute(
                    self.D.q(
                        f"SELECT {EDGE_COLS} FROM thought_edge WHERE {cond} AND {kind_sql} "
                        "AND created_at <= ? "
                        "AND coalesce(valid_at, created_at) <= ? AND (invalid_at IS NULL OR invalid_at > ?) "
                        "ORDER BY from_rowid"
                    ),
                    [*args, *kinds, as_of, as_of, as_of],
                ).fetchall()
                self._check_edges(conn, rows)
                for row in rows:
                    out.setdefault(row[3], []).append(row[1])
        return out

    def _check_edges(self, conn: ConnT, rows: Sequence[Sequence[Any]], whole: Sequence[int] = ()) -> None:
        """Each edge row (``EDGE_COLS``) must be one its from-thought's body (checked against its
        ledger hash) names; for the thoughts in ``whole``, ``rows`` must hold every edge their
        bodies name. IntegrityError (run ``mentis rebuild``) otherwise: an edge decides what a read
        shows (``invalidated_by``, what is left out by default, traversals)."""
        found: dict[int, Counter[tuple[Any, ...]]] = {int(r): Counter() for r in whole}
        for row in rows:
            found.setdefault(int(row[0]), Counter())[tuple(row[1:])] += 1
        if not found:
            return
        loaded = self._load(conn, list(found), ThoughtBody)
        for rowid, edges in found.items():
            if rowid not in loaded:
                raise derived_mismatch(rowid)
            named = Counter(_edges_of(loaded[rowid].body))
            if (named if rowid in whole else named & edges) != edges:
                raise derived_mismatch(rowid)

    def load_thoughts(self, rowids: Sequence[int]) -> dict[int, StoredThought]:
        with self._read() as conn:
            return self._load(conn, rowids, ThoughtBody)

    def thought_rowids(self, ids: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        with self._read() as conn:
            for chunk in self.D.chunks(ids):
                cond, args = self.D.in_("thought_id", chunk)
                for tid, r in conn.execute(
                    self.D.q(f"SELECT thought_id, rowid FROM thought_idx WHERE {cond}"), args
                ):
                    out[tid] = int(r)
        return out

    def thought_rowid_at(self, chain: str | None, seq: int | None, hash_: str | None) -> int | None:
        where, args = (
            ("e.hash = ?", (hash_,)) if hash_ is not None else ("e.chain = ? AND e.seq = ?", (chain, seq))
        )
        with self._read() as conn:
            row = conn.execute(
                self.D.q(
                    f"SELECT t.rowid FROM entries e JOIN thought_idx t ON t.rowid = e.rowid WHERE {where}"
                ),
                args,
            ).fetchone()
        return None if row is None else int(row[0])

    def thought_edges(
        self, ids: Sequence[str], direction: str, kinds: Sequence[str] | None
    ) -> list[tuple[str, str, str]]:
        """(from_id, kind, to_id) edges touching ``ids`` in the given direction."""
        out: list[tuple[str, str, str]] = []
        if not ids:
            return out
        with self._read() as conn:
            for column, wanted in (("from_id", ("out", "both")), ("to_id", ("in", "both"))):
                if direction in wanted:
                    cond, args = self.D.in_(column, ids)
                    rows = conn.execute(
                        self.D.q(f"SELECT {EDGE_COLS} FROM thought_edge WHERE {cond} ORDER BY from_rowid"),
                        args,
                    ).fetchall()
                    # every edge of a thought asked for by its own id must be there (unfiltered)
                    whole = self._live_thought_rowids(conn, ids) if column == "from_id" else []
                    self._check_edges(conn, rows, whole)
                    out += [(str(r[1]), str(r[2]), str(r[3])) for r in rows if not kinds or r[2] in kinds]
        return out

    def _live_thought_rowids(self, conn: ConnT, ids: Sequence[str]) -> list[int]:
        cond, args = self.D.in_("thought_id", ids)
        return [
            int(r) for (r,) in conn.execute(self.D.q(f"SELECT rowid FROM thought_idx WHERE {cond}"), args)
        ]

    def recent_thought_vectors(self, repository: str, n: int) -> tuple[list[str], np.ndarray]:
        """The ``n`` newest thoughts of a repository: their ids and vectors."""
        with self._read() as conn:
            rows = conn.execute(
                self.D.q(
                    "SELECT t.thought_id, v.vec FROM thought_idx t JOIN thought_vectors v "
                    "ON v.rowid = t.rowid WHERE t.repository = ? ORDER BY t.rowid DESC LIMIT ?"
                ),
                (repository, n),
            ).fetchall()
        if not rows:
            return [], np.zeros((0, self.dim), dtype=np.float32)
        matrix = np.frombuffer(b"".join(self.D.vector_bytes(r[1]) for r in rows), dtype=np.float32)
        return [r[0] for r in rows], matrix.reshape(-1, self.dim)

    def has_rejections(self, repository: str) -> bool:
        with self._peek() as conn:
            found = conn.execute(
                self.D.q("SELECT 1 FROM rejections WHERE repository = ? LIMIT 1"), (repository,)
            )
            return found.fetchone() is not None

    def rejections(self, repository: str) -> list[RejectionRow]:
        with self._read() as conn:
            rows = conn.execute(
                self.D.q(
                    "SELECT by_rowid, by_id, target_id, target_kind, at, norm_hash, vec FROM rejections "
                    "WHERE repository = ? ORDER BY id"
                ),
                (repository,),
            ).fetchall()
        return [
            RejectionRow(
                int(r[0]), r[1], r[2], r[3], r[4], r[5], np.frombuffer(bytes(r[6]), dtype=np.float32)
            )
            for r in rows
        ]

    def rejection_reason(self, by_rowid: int) -> str:
        """Why a rejection happened, read from the rejecting entry's verified body: a correction's
        reason, or the content of the thought that Corrects or Invalidates."""
        with self._read() as conn:
            kind = conn.execute(self.D.q("SELECT kind FROM entries WHERE rowid = ?"), (by_rowid,)).fetchone()
            if kind is None:
                return ""
            if kind[0] == "correction":
                corrections = self._load(conn, [by_rowid], CorrectionBody)
                return corrections[by_rowid].body.reason if by_rowid in corrections else ""
            if kind[0] == "thought":
                thoughts = self._load(conn, [by_rowid], ThoughtBody)
                return thoughts[by_rowid].body.content if by_rowid in thoughts else ""
        return ""
