"""Attempts and their corrections, written once for both backends: appends, the derived tables
(``attempt_idx`` keys only, ``correction_idx``, ``task_idx``, ``forgotten``, ``attempt_label``,
``vectors`` and the ``attempt_terms``/``title_terms`` lexical rows) and the reads over them.

Every content value a read returns comes from a body checked against its entry's hash
(:meth:`~mentis.store.shared.core.LedgerCore._load`), and the keys of the derived rows are checked
against the body they index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mentis.errors import Conflict, IntegrityError, NotFound
from mentis.ledger.bodies import AttemptBody, CorrectionBody, tombstone
from mentis.ledger.canonical import canonical
from mentis.ledger.entry import Entry
from mentis.ledger.fingerprint import fingerprint
from mentis.store.protocol import AttemptRow, StoredAttempt
from mentis.store.seal import Seal
from mentis.store.shared.backend import ConnT
from mentis.store.shared.core import LedgerCore, check_list, checked_body, derived_mismatch
from mentis.store.shared.graph import LABEL_FANOUT, for_seeds, label_links


class AttemptCore(LedgerCore[ConnT]):
    """Attempt and correction writes, derivation and reads (``self`` is the store)."""

    # ------------------------------------------------------------ writes

    def append_attempt(self, body: AttemptBody, vector: np.ndarray, seal: Seal) -> Entry:
        return self.append_attempts([AttemptRow(body, vector)], seal)[0]

    def append_attempts(self, rows: Sequence[AttemptRow], seal: Seal) -> list[Entry]:
        """Append attempts in order in one write transaction (each entry is its body's attempt
        id, repository, agent and time): every vector is checked first, and a failure at any row
        writes nothing."""
        for row in rows:
            self._check_vector(f"attempt {row.body.attempt_id}", row.vector)
        entries: list[Entry] = []
        if not rows:
            return entries
        with (
            self._write(*{row.body.repository for row in rows}, commit=seal.commit) as conn,
            self.D.pipelined(conn),
            self._terms_batch(conn),
        ):
            for body, vector in rows:
                raw = canonical(body.to_json())
                rowid, entry = self._append(
                    conn,
                    seal,
                    body.repository,
                    "attempt",
                    body.attempt_id,
                    body.created_at,
                    body.agent_id,
                    raw,
                )
                if rowid is not None:
                    self._derive_attempt(conn, rowid, body, vector)
                entries.append(entry)
        return entries

    def append_correction(
        self, body: CorrectionBody, conclusion: np.ndarray, seal: Seal
    ) -> tuple[Entry, int]:
        """Append a correction (its entry id is the seal's); ``conclusion`` is the vector of the
        attempt's rejected conclusion. Returns the entry and the attempt's count of corrections."""
        chain = body.repository
        with self._write(chain, commit=seal.commit) as conn:
            attempt_rowid = self._live_attempt_rowid(conn, chain, body.attempt_id)
            raw = canonical(body.to_json())
            rowid, entry = self._append(
                conn, seal, chain, "correction", seal.record_id(), body.at, body.agent_id, raw
            )
            if rowid is not None:
                self._derive_correction(conn, rowid, attempt_rowid, body, conclusion)
            row = conn.execute(
                self.D.q("SELECT count(*) FROM correction_idx WHERE attempt_rowid=?"), (attempt_rowid,)
            ).fetchone()
        return entry, int(row[0]) if row else 0

    def forget_attempt(
        self, chain: str, attempt_id: str, reason: str | None, agent: str, seal: Seal
    ) -> Entry:
        """Erase an attempt's body and its corrections'; the chain keeps a tombstone (the seal's
        id and time) listing their seqs."""
        q = self.D.q
        at = seal.time()
        with self._write(chain, commit=seal.commit) as conn:
            rowid = self._live_attempt_rowid(conn, chain, attempt_id)
            erased = [rowid] + [
                int(r)
                for (r,) in conn.execute(
                    q("SELECT rowid FROM correction_idx WHERE attempt_rowid=?"), (rowid,)
                )
            ]
            cond, args = self.D.in_("rowid", erased)
            seqs = sorted(int(s) for (s,) in conn.execute(q(f"SELECT seq FROM entries WHERE {cond}"), args))
            found = conn.execute(q("SELECT task_id FROM attempt_idx WHERE rowid=?"), (rowid,)).fetchone()
            task_id = found[0] if found is not None else None
            body = tombstone("attempt", attempt_id, chain, seqs, reason, agent, at, task_id).to_json()
            tomb_rowid, entry = self._append(
                conn, seal, chain, "forget", seal.record_id(), at, agent, canonical(body)
            )
            if tomb_rowid is not None:
                self._derive_forget_attempt(conn, tomb_rowid, chain, attempt_id)
        self._after_forget()
        return entry

    def _live_attempt_rowid(self, conn: ConnT, chain: str, attempt_id: str) -> int:
        q = self.D.q
        row = conn.execute(
            q("SELECT rowid FROM attempt_idx WHERE attempt_id=? AND repository=?"), (attempt_id, chain)
        ).fetchone()
        if row is not None:
            return int(row[0])
        gone = conn.execute(
            q("SELECT 1 FROM forgotten WHERE attempt_id=? AND repository=?"), (attempt_id, chain)
        ).fetchone()
        if gone is not None:
            raise Conflict(f"attempt {attempt_id} in {chain} was forgotten; its content is erased")
        raise NotFound(f"no attempt {attempt_id} in repository {chain}; search or recall to find its id")

    # ------------------------------------------------------------ derivation (live and rebuild)

    def _derive_attempt(self, conn: ConnT, rowid: int, attempt: AttemptBody, vector: np.ndarray) -> None:
        q = self.D.q
        repo, task = attempt.repository, attempt.task_id
        conn.execute(
            q(
                "INSERT INTO attempt_idx(rowid, attempt_id, repository, task_id, status, scope) "
                "VALUES(?,?,?,?,?,?)"
            ),
            (rowid, attempt.attempt_id, repo, task, attempt.status, attempt.scope),
        )
        self._note_scope(conn, attempt, attempt.scope)
        self._index_record(conn, "attempt_terms", rowid, attempt)
        self._index_title(conn, rowid, attempt)
        self._insert_vector(conn, "vectors", rowid, attempt.scope, vector)
        labels = [(rowid, kind, label) for kind, label in attempt.labels]
        self.D.many(conn, "INSERT INTO attempt_label(rowid, kind, label) VALUES(?,?,?)", labels)
        conn.execute(
            q(
                "INSERT INTO task_idx(repository, task_id, title_rowid) VALUES(?,?,?) "
                "ON CONFLICT(repository, task_id) DO UPDATE SET "
                "title_rowid = coalesce(excluded.title_rowid, task_idx.title_rowid)"
            ),
            (repo, task, rowid if attempt.task_title else None),
        )

    def _index_title(self, conn: ConnT, rowid: int, attempt: AttemptBody) -> None:
        """An attempt's ``task_title`` alone, as its row in ``title_terms`` (none without a title)."""
        if attempt.task_title:
            self._index_terms(conn, "title_terms", rowid, attempt.scope, (attempt.task_title,), (1.0,))

    def _index_titles(self, conn: ConnT) -> int:
        """Index the title of every live attempt that has no ``title_terms`` row yet (the
        migration that adds the table), from bodies checked against their ledger entries;
        returns the number of attempts read."""
        rows = conn.execute(
            "SELECT a.rowid, b.body, e.body_hash FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
            "JOIN entries e ON e.rowid = a.rowid "
            "WHERE NOT EXISTS (SELECT 1 FROM title_terms t WHERE t.rowid = a.rowid) ORDER BY a.rowid"
        ).fetchall()
        with self._terms_batch(conn):
            for rowid, raw, body_hash in rows:
                body = checked_body(int(rowid), bytes(raw), body_hash)
                self._index_title(conn, int(rowid), AttemptBody.parse(body))
        return len(rows)

    def _derive_correction(
        self, conn: ConnT, rowid: int, attempt_rowid: int, correction: CorrectionBody, conclusion: np.ndarray
    ) -> None:
        """A correction's index row and the fingerprint of the conclusion it rejects (``conclusion``
        is that conclusion's vector)."""
        q = self.D.q
        conn.execute(
            q("INSERT INTO correction_idx(rowid, attempt_rowid) VALUES(?,?)"), (rowid, attempt_rowid)
        )
        row = conn.execute(q("SELECT body FROM bodies WHERE rowid=?"), (attempt_rowid,)).fetchone()
        norm = fingerprint(AttemptBody.parse(row[0]).conclusion)
        blob = np.ascontiguousarray(conclusion, dtype=np.float32).tobytes()
        aid, repo = correction.attempt_id, correction.repository
        self._add_rejection(conn, rowid, aid, repo, aid, "attempt", correction.at, norm, blob)

    def _derive_forget_attempt(self, conn: ConnT, tomb_rowid: int, repo: str, attempt_id: str) -> None:
        """Note the attempt as forgotten (by the tombstone at ``tomb_rowid``), erase its body and
        its corrections' and drop its derived rows; its task's title moves to another attempt."""
        q = self.D.q
        conn.execute(
            q(
                "INSERT INTO forgotten(attempt_id, repository, tomb_rowid) VALUES(?,?,?) "
                "ON CONFLICT(attempt_id) DO UPDATE SET repository = excluded.repository, "
                "tomb_rowid = excluded.tomb_rowid"
            ),
            (attempt_id, repo, tomb_rowid),
        )
        row = conn.execute(
            q("SELECT rowid, task_id FROM attempt_idx WHERE attempt_id=? AND repository=?"),
            (attempt_id, repo),
        ).fetchone()
        if row is None:
            return
        rowid, task_id = int(row[0]), str(row[1])
        self._removing(conn, "attempt", rowid)
        corr = [
            int(r)
            for (r,) in conn.execute(q("SELECT rowid FROM correction_idx WHERE attempt_rowid=?"), (rowid,))
        ]
        cond, args = self.D.in_("rowid", [rowid, *corr])
        conn.execute(q(f"DELETE FROM bodies WHERE {cond}"), args)
        self._unindex_terms(conn, "attempt_terms", rowid)
        self._unindex_terms(conn, "title_terms", rowid)
        conn.execute(q("DELETE FROM correction_idx WHERE attempt_rowid=?"), (rowid,))
        conn.execute(q("DELETE FROM rejections WHERE target_kind='attempt' AND target_id=?"), (attempt_id,))
        for table in ("vectors", "attempt_label", "attempt_idx"):
            conn.execute(q(f"DELETE FROM {table} WHERE rowid=?"), (rowid,))
        self._retitle(conn, repo, task_id)

    def _retitle(self, conn: ConnT, repo: str, task_id: str) -> None:
        """After a forget: the task's title comes from its newest titled attempt left; a task
        with no attempt left goes."""
        q = self.D.q
        titled = conn.execute(
            q(
                f"SELECT count(*), max(a.rowid) FILTER (WHERE {self.D.json_text('b.body', 'task_title')} "
                "IS NOT NULL) FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
                "WHERE a.repository=? AND a.task_id=?"
            ),
            (repo, task_id),
        ).fetchone()
        if not titled[0]:
            conn.execute(q("DELETE FROM task_idx WHERE repository=? AND task_id=?"), (repo, task_id))
            return
        conn.execute(
            q("UPDATE task_idx SET title_rowid=? WHERE repository=? AND task_id=?"),
            (titled[1], repo, task_id),
        )

    # ------------------------------------------------------------ reads

    def attempt_conclusion_text(self, repository: str, attempt_id: str) -> str | None:
        with self._read() as conn:
            row = conn.execute(
                self.D.q("SELECT rowid FROM attempt_idx WHERE attempt_id=? AND repository=?"),
                (attempt_id, repository),
            ).fetchone()
            if row is None:
                return None
            loaded = self._load(conn, [int(row[0])], AttemptBody)
        return loaded[int(row[0])].body.conclusion

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
        scope_sql, scope_args = "", list[Any]()
        if repositories is not None:
            check_list(repositories, "repositories")
            cond, scope_args = self.D.in_("b.scope", list(repositories) or [""])
            scope_sql = f"AND {cond} "
        task_sql = (
            "SELECT b.rowid AS other, 1.0 AS w FROM attempt_idx a JOIN attempt_idx b "
            "ON b.repository = a.repository AND b.task_id = a.task_id AND b.rowid != a.rowid "
            f"WHERE a.rowid = {{seed}} {scope_sql}ORDER BY b.rowid LIMIT ?"
        )
        with self._read() as conn:
            tasks = for_seeds(self.D, conn, task_sql, "x.other", seeds, [*scope_args, per_seed])
            labels = label_links(
                self.D,
                conn,
                "attempt_label",
                "attempt_idx",
                "file",
                seeds,
                repositories,
                LABEL_FANOUT,
                per_seed,
            )
        return [
            (seed, int(other), float(w))
            for seed in seeds
            for found in (tasks, labels)
            for other, w in found[seed]
        ]

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

    def _attempts(self, conn: ConnT, rowids: Sequence[int]) -> dict[int, StoredAttempt]:
        q = self.D.q
        loaded = self._load(conn, rowids, AttemptBody)
        corr_of: dict[int, list[int]] = {}
        keys: dict[int, tuple[str, str, str]] = {}
        for chunk in self.D.chunks(rowids):
            cond, args = self.D.in_("attempt_rowid", chunk)
            for crow, arow in conn.execute(
                q(f"SELECT rowid, attempt_rowid FROM correction_idx WHERE {cond} ORDER BY rowid"), args
            ):
                corr_of.setdefault(int(arow), []).append(int(crow))
        corr_bodies = self._load(conn, [c for cs in corr_of.values() for c in cs], CorrectionBody)
        for chunk in self.D.chunks(list(loaded)):
            cond, args = self.D.in_("rowid", chunk)
            for r, repo, task, aid in conn.execute(
                q(f"SELECT rowid, repository, task_id, attempt_id FROM attempt_idx WHERE {cond}"), args
            ):
                keys[int(r)] = (repo, task, aid)
        out: dict[int, StoredAttempt] = {}
        for rowid, (entry, body) in loaded.items():
            if body.attempt_id != entry.id or body.repository != entry.chain:
                raise IntegrityError(
                    f"attempt body at chain {entry.chain!r} seq {entry.seq} does not match its entry",
                    chain=entry.chain,
                    seq=entry.seq,
                )
            if keys.get(rowid) != (body.repository, body.task_id, body.attempt_id):
                raise derived_mismatch(rowid)
            corrections = [corr_bodies[c].body for c in corr_of.get(rowid, [])]
            if any(c.attempt_id != entry.id or c.repository != entry.chain for c in corrections):
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

    def task_info(
        self, keys: Sequence[tuple[str, str]], scopes: Sequence[str] | None = None
    ) -> dict[tuple[str, str], tuple[str | None, int]]:
        """(title, attempt_count) per (repository, task_id), counting only the attempts of
        ``scopes`` (scope keys; None: all) and titled by the newest titled one of them."""
        out: dict[tuple[str, str], tuple[str | None, int]] = {}
        if not keys:
            return out
        with self._read() as conn:
            title_rows: dict[int, tuple[str, str]] = {}
            rows = (
                self._task_rows(conn, keys) if scopes is None else self._scoped_task_rows(conn, keys, scopes)
            )
            for repo, task, title_rowid, count in rows:
                out[(repo, task)] = (None, int(count))
                if title_rowid is not None:
                    title_rows[int(title_rowid)] = (repo, task)
            for rowid, (_, body) in self._load(conn, list(title_rows), AttemptBody).items():
                key = title_rows[rowid]
                if (body.repository, body.task_id) != key:
                    raise derived_mismatch(rowid)
                out[key] = (body.task_title, out[key][1])
        return out

    def _scoped_task_rows(
        self, conn: ConnT, keys: Sequence[tuple[str, str]], scopes: Sequence[str]
    ) -> list[tuple[str, str, int | None, int]]:
        """:meth:`_task_rows` over the attempts of ``scopes`` only (a task none of them holds is
        left out)."""
        check_list(scopes, "scopes")
        cond, args = self.D.in_("a.scope", list(scopes) or [""])
        sql = self.D.q(
            "SELECT (SELECT max(a.rowid) FROM attempt_idx a JOIN title_terms tt ON tt.rowid = a.rowid "
            f"WHERE a.repository=? AND a.task_id=? AND {cond}), (SELECT count(*) FROM attempt_idx a "
            f"WHERE a.repository=? AND a.task_id=? AND {cond})"
        )
        out = []
        for repo, task in keys:
            title_rowid, count = conn.execute(sql, (repo, task, *args, repo, task, *args)).fetchone()
            if count:
                out.append((repo, task, None if title_rowid is None else int(title_rowid), int(count)))
        return out

    def task_history(
        self, repository: str, task_id: str, scopes: Sequence[str] | None = None
    ) -> list[StoredAttempt]:
        """A task's live attempts, oldest first (only those of ``scopes``, scope keys, when given)."""
        cond, args = "", list[Any]()
        if scopes is not None:
            check_list(scopes, "scopes")
            cond, args = self.D.in_("scope", list(scopes) or [""])
            cond = f" AND {cond}"
        with self._read() as conn:
            rowids = [
                int(r)
                for (r,) in conn.execute(
                    self.D.q(
                        f"SELECT rowid FROM attempt_idx WHERE repository=? AND task_id=?{cond} ORDER BY rowid"
                    ),
                    (repository, task_id, *args),
                )
            ]
            found = self._attempts(conn, rowids)
        return [found[r] for r in rowids]


__all__ = ["AttemptCore"]
