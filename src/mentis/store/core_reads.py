"""Attempt reads of the relational core (see :mod:`mentis.store.core`): keys, graph links,
candidate search, hash-checked attempts with their corrections, tasks.

Every content value returned comes from a body checked against its entry's hash, and the keys
of the derived rows are checked against the body they index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mentis.errors import IntegrityError
from mentis.records import AttemptBody
from mentis.store.base import StoredAttempt
from mentis.store.core import LABEL_FANOUT, RelationalCore, check_list, derived_mismatch


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
        edges: list[tuple[int, int, float]] = []
        with self._read() as conn:
            for seed in seeds:
                for (other,) in conn.execute(
                    self.D.q(
                        "SELECT b.rowid FROM attempt_idx a JOIN attempt_idx b ON b.repository = a.repository "
                        "AND b.task_id = a.task_id AND b.rowid != a.rowid WHERE a.rowid = ? "
                        "ORDER BY b.rowid LIMIT ?"
                    ),
                    (seed, per_seed),
                ):
                    edges.append((seed, int(other), 1.0))
                for other, weight in self._label_links(
                    conn, "attempt_label", "attempt_idx", "file", seed, repositories, LABEL_FANOUT, per_seed
                ):
                    edges.append((seed, other, weight))
        return edges

    def _label_links(
        self,
        conn: Any,
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
        join = count_join = where = count_where = ""
        scope: list[Any] = []
        if repositories is not None:
            check_list(repositories, "repositories")
            cond, scope = self.D.in_("b.repository", repositories)
            join, where = f"JOIN {idx} b ON b.rowid = l2.rowid ", f"AND {cond} "
            count_join = f"JOIN {idx} y ON y.rowid = x.rowid "
            count_where = f"AND {cond.replace('b.', 'y.', 1)} "
        sql = (
            f"SELECT l2.rowid, sum(CASE l1.kind WHEN ? THEN 0.5 ELSE 0.25 END) AS w "
            f"FROM {labels} l1 JOIN {labels} l2 ON l2.kind = l1.kind AND l2.label = l1.label "
            f"AND l2.rowid != l1.rowid {join}"
            f"WHERE l1.rowid = ? {where}AND (SELECT count(*) FROM (SELECT 1 FROM {labels} x "
            f"{count_join}WHERE x.kind = l1.kind AND x.label = l1.label {count_where}"
            "LIMIT ? + 1) capped) <= ? "
            "GROUP BY l2.rowid ORDER BY w DESC, l2.rowid LIMIT ?"
        )
        args = [heavy, seed, *scope, *scope, fanout, fanout, limit]
        return [(int(r), float(w)) for r, w in conn.execute(self.D.q(sql), args)]

    def lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 candidates among the attempts of ``repositories`` (None: all) for the query
        ``terms`` (``retrieval.query_terms``: a word as often as the query repeats it)."""
        check_list(terms, "query terms")
        return self._lexical("attempt_terms", terms, repositories, limit)

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
