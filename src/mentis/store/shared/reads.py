"""Attempt reads of the relational core (see :mod:`mentis.store.shared.core`): keys, graph links,
candidate search, hash-checked attempts with their corrections, tasks.

Every content value returned comes from a body checked against its entry's hash, and the keys
of the derived rows are checked against the body they index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mentis.errors import IntegrityError
from mentis.ledger.bodies import AttemptBody
from mentis.store.protocol import StoredAttempt
from mentis.store.shared.core import LABEL_FANOUT, RelationalCore, check_list, derived_mismatch


class AttemptReads(RelationalCore):
    """Attempt reads (``self`` is the store)."""

    def attempt_conclusion_text(self, repository: str, attempt_id: str) -> str | None:
        with self._read() as conn:
            row = conn.execute(
                self.D.q("SELECT rowid FROM attempt_idx WHERE attempt_id=? AND repository=?"),
                (attempt_id, repository),
            ).fetchone()
            if row is None:
                return None
            loaded = self._load(conn, [int(row[0])], "attempt")
        return AttemptBody.from_json(loaded[int(row[0])][1]).conclusion

    def attempt_keys(self, rowids: Sequence[int]) -> dict[int, tuple[str, str, str]]:
        """(repository, task_id, attempt_id) of live attempts among ``rowids``."""
        out: dict[int, tuple[str, str, str]] = {}
        if not rowids:
            return out
        with self._read() as conn:
            for chunk in self.D.chunks(rowids):
                cond, args = self.D.in_("a.rowid", chunk)
                for r, repo, task, aid, e_chain, e_id, e_kind in conn.execute(
                    self.D.q(
                        "SELECT a.rowid, a.repository, a.task_id, a.attempt_id, e.chain, e.id, e.kind "
                        f"FROM attempt_idx a JOIN entries e ON e.rowid = a.rowid WHERE {cond}"
                    ),
                    args,
                ):
                    if (e_chain, e_id, e_kind) != (repo, aid, "attempt"):
                        raise derived_mismatch(r)
                    out[int(r)] = (repo, task, aid)
        return out

    def attempt_edges(
        self, seeds: Sequence[int], repositories: Sequence[str] | None, per_seed: int
    ) -> list[tuple[int, int, float]]:
        """Links from each seed to attempts of ``repositories`` (None: all): same task (1.0), each
        shared file (0.5) or tag (0.25).

        Labels held by more than ``LABEL_FANOUT`` of those attempts (a README everyone touches)
        link nothing.
        """
        task_sql = (
            "SELECT b.rowid AS other, 1.0 AS w FROM attempt_idx a JOIN attempt_idx b "
            "ON b.repository = a.repository AND b.task_id = a.task_id AND b.rowid != a.rowid "
            "WHERE a.rowid = {seed} ORDER BY b.rowid LIMIT ?"
        )
        with self._read() as conn:
            tasks = self._for_seeds(conn, task_sql, "x.other", seeds, [per_seed])
            labels = self._label_links(
                conn, "attempt_label", "attempt_idx", "file", seeds, repositories, LABEL_FANOUT, per_seed
            )
        return [
            (seed, int(other), float(w))
            for seed in seeds
            for found in (tasks, labels)
            for other, w in found[seed]
        ]

    def _for_seeds(
        self, conn: Any, inner: str, order: str, seeds: Sequence[int], args: Sequence[Any]
    ) -> dict[int, list[tuple[Any, ...]]]:
        """The rows of ``inner`` (SQL in which ``{seed}`` stands for one seed's rowid) for each seed,
        in ``inner``'s own order (``order`` repeats its ORDER BY over the output columns).

        PostgreSQL runs it once for all seeds (a LATERAL join over the seed array: one statement
        instead of one per seed, each a round trip and a plan); SQLite runs it per seed, in process.
        """
        out: dict[int, list[tuple[Any, ...]]] = {int(seed): [] for seed in seeds}
        if not seeds:
            return out
        if self.D.postgres:
            sql = (
                "SELECT s.seed, x.* FROM unnest(?::bigint[]) WITH ORDINALITY AS s(seed, ord) "
                f"CROSS JOIN LATERAL ({inner.format(seed='s.seed')}) x ORDER BY s.ord, {order}"
            )
            for seed, *row in conn.execute(self.D.q(sql), [[int(s) for s in seeds], *args]):
                out[int(seed)].append(tuple(row))
            return out
        parts = inner.split("{seed}")
        sql, taken = "?".join(parts), [part.count("?") for part in parts]
        for seed in out:
            rest, bound = iter(args), []
            for i, count in enumerate(taken):
                bound += [next(rest) for _ in range(count)] + ([seed] if i < len(taken) - 1 else [])
            out[seed] = [tuple(row) for row in conn.execute(sql, bound)]
        return out

    def _label_links(
        self,
        conn: Any,
        labels: str,
        idx: str,
        heavy: str,
        seeds: Sequence[int],
        repositories: Sequence[str] | None,
        fanout: int,
        limit: int,
    ) -> dict[int, list[tuple[Any, ...]]]:
        """For each seed, rows of ``repositories`` (None: all) sharing labels with it: 0.5 per
        shared label of kind ``heavy``, 0.25 per other, best ``limit``; labels held by more than
        ``fanout`` rows of those repositories link nothing.

        Label rows exist only for live documents, so the index table is joined only to filter by
        repository; the ``(kind, label, rowid)`` index answers the rest without table reads.
        """
        assert heavy.isidentifier(), heavy  # a label kind, written into the SQL
        join = count_join = where = count_where = ""
        scope: list[Any] = []
        if repositories is not None:
            check_list(repositories, "repositories")
            cond, scope = self.D.in_("b.repository", repositories)
            join, where = f"JOIN {idx} b ON b.rowid = l2.rowid ", f"AND {cond} "
            count_join = f"JOIN {idx} y ON y.rowid = x.rowid "
            count_where = f"AND {cond.replace('b.', 'y.', 1)} "
        inner = (
            f"SELECT l2.rowid AS other, sum(CASE l1.kind WHEN '{heavy}' THEN 0.5 ELSE 0.25 END) AS w "
            f"FROM {labels} l1 JOIN {labels} l2 ON l2.kind = l1.kind AND l2.label = l1.label "
            f"AND l2.rowid != l1.rowid {join}"
            f"WHERE l1.rowid = {{seed}} {where}AND (SELECT count(*) FROM (SELECT 1 FROM {labels} x "
            f"{count_join}WHERE x.kind = l1.kind AND x.label = l1.label {count_where}"
            "LIMIT ? + 1) capped) <= ? "
            "GROUP BY l2.rowid ORDER BY w DESC, l2.rowid LIMIT ?"
        )
        args = [*scope, *scope, fanout, fanout, limit]
        found = self._for_seeds(conn, inner, "x.w DESC, x.other", seeds, args)
        return {seed: [(int(r), float(w)) for r, w in rows] for seed, rows in found.items()}

    def lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 candidates among the attempts of ``repositories`` (None: all) for the query
        ``terms`` (``retrieval.query_terms``: a word as often as the query repeats it)."""
        check_list(terms, "query terms")
        return self._lexical("attempt_terms", terms, repositories, limit)

    def title_lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 candidates scored against each attempt's task title alone (attempts without a
        title are not candidates), with the statistics of the titles searched."""
        check_list(terms, "query terms")
        return self._lexical("title_terms", terms, repositories, limit)

    def vector(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self._vector("vectors", query, repositories, limit)

    def load_attempts(self, rowids: Sequence[int]) -> dict[int, StoredAttempt]:
        with self._read() as conn:
            return self._attempts(conn, rowids)

    def _attempts(self, conn: Any, rowids: Sequence[int]) -> dict[int, StoredAttempt]:
        q = self.D.q
        loaded = self._load(conn, rowids, "attempt")
        corr_of: dict[int, list[int]] = {}
        keys: dict[int, tuple[str, str, str]] = {}
        for chunk in self.D.chunks(rowids):
            cond, args = self.D.in_("attempt_rowid", chunk)
            for crow, arow in conn.execute(
                q(f"SELECT rowid, attempt_rowid FROM correction_idx WHERE {cond} ORDER BY rowid"), args
            ):
                corr_of.setdefault(int(arow), []).append(int(crow))
        corr_bodies = self._load(conn, [c for cs in corr_of.values() for c in cs], "correction")
        for chunk in self.D.chunks(list(loaded)):
            cond, args = self.D.in_("rowid", chunk)
            for r, repo, task, aid in conn.execute(
                q(f"SELECT rowid, repository, task_id, attempt_id FROM attempt_idx WHERE {cond}"), args
            ):
                keys[int(r)] = (repo, task, aid)
        out: dict[int, StoredAttempt] = {}
        for rowid, (entry, body) in loaded.items():
            if body.get("attempt_id") != entry.id or body.get("repository") != entry.chain:
                raise IntegrityError(
                    f"attempt body at chain {entry.chain!r} seq {entry.seq} does not match its entry",
                    chain=entry.chain,
                    seq=entry.seq,
                )
            if keys.get(rowid) != (body["repository"], body["task_id"], body["attempt_id"]):
                raise derived_mismatch(rowid)
            corrections = [corr_bodies[c][1] for c in corr_of.get(rowid, [])]
            if any(c["attempt_id"] != entry.id or c["repository"] != entry.chain for c in corrections):
                raise derived_mismatch(rowid)
            out[rowid] = StoredAttempt(rowid=rowid, entry=entry, body=body, corrections=corrections)
        return out

    def find_attempt(self, attempt_id: str) -> tuple[str, bool] | None:
        """(repository, forgotten) for an attempt id, or None when unknown."""
        with self._read() as conn:
            for table, forgotten in (("attempt_idx", False), ("forgotten", True)):
                row = conn.execute(
                    self.D.q(f"SELECT repository FROM {table} WHERE attempt_id=?"), (attempt_id,)
                ).fetchone()
                if row is not None:
                    return str(row[0]), forgotten
        return None

    def task_info(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[str | None, int]]:
        """(title, attempt_count) per (repository, task_id)."""
        out: dict[tuple[str, str], tuple[str | None, int]] = {}
        if not keys:
            return out
        with self._read() as conn:
            title_rows: dict[int, tuple[str, str]] = {}
            for repo, task, title_rowid, count in self._task_rows(conn, keys):
                out[(repo, task)] = (None, int(count))
                if title_rowid is not None:
                    title_rows[int(title_rowid)] = (repo, task)
            for rowid, (_, body) in self._load(conn, list(title_rows), "attempt").items():
                key = title_rows[rowid]
                if (body["repository"], body["task_id"]) != key:
                    raise derived_mismatch(rowid)
                out[key] = (body.get("task_title"), out[key][1])
        return out

    def task_history(self, repository: str, task_id: str) -> list[StoredAttempt]:
        with self._read() as conn:
            rowids = [
                int(r)
                for (r,) in conn.execute(
                    self.D.q("SELECT rowid FROM attempt_idx WHERE repository=? AND task_id=? ORDER BY rowid"),
                    (repository, task_id),
                )
            ]
            found = self._attempts(conn, rowids)
        return [found[r] for r in rowids]
