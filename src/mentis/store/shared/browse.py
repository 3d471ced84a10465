"""Reads for people browsing a store (the dashboard): repository summaries, a repository's tasks
filtered and paginated, and a task's tombstones.

Written once for both backends: the SQL uses ``?`` placeholders and the backend's dialect spells
them (the tables and columns are the same). Like every store read it knows
nothing of scopes; :mod:`mentis.service.browse` filters by the caller before anything is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mentis.ledger.bodies import TombstoneBody
from mentis.store.protocol import RepositoryRow, StoredTombstone, TaskRow
from mentis.store.shared.backend import ConnT
from mentis.store.shared.core import LedgerCore

_OUTDATED = (
    "CASE WHEN EXISTS(SELECT 1 FROM correction_idx c WHERE c.attempt_rowid = a.rowid) THEN 1 ELSE 0 END"
)


class BrowseReads(LedgerCore[ConnT]):
    """Reads for browsing (``self`` is the store)."""

    def _in_scopes(self, column: str, scopes: Sequence[str] | None) -> tuple[str, list[Any]]:
        """`` AND column`` is one of ``scopes`` (scope keys; None: no condition), and its args."""
        if scopes is None:
            return "", []
        cond, args = self.D.in_(column, list(scopes) or [""])
        return f" AND {cond}", args

    def repository_rows(self, scopes: Sequence[str] | None = None) -> list[RepositoryRow]:
        """Every chain with its head, newest entry time and live counts, newest activity first;
        with ``scopes`` (scope keys), tasks, attempts and thoughts are counted among those only."""
        a_cond, a_args = self._in_scopes("a.scope", scopes)
        t_cond, t_args = self._in_scopes("t.scope", scopes)
        tasks = (
            "(SELECT count(*) FROM task_idx t WHERE t.repository = h.chain)"
            if scopes is None
            else f"(SELECT count(DISTINCT a.task_id) FROM attempt_idx a WHERE a.repository = h.chain{a_cond})"
        )
        sql = (
            f"SELECT h.chain, h.seq, h.hash, e.at, {tasks}, "
            f"(SELECT count(*) FROM attempt_idx a WHERE a.repository = h.chain{a_cond}), "
            f"(SELECT count(*) FROM thought_idx t WHERE t.repository = h.chain{t_cond}), "
            "(SELECT count(*) FROM forgotten f WHERE f.repository = h.chain) "
            "FROM heads h JOIN entries e ON e.chain = h.chain AND e.seq = h.seq ORDER BY e.at DESC, h.chain"
        )
        args = [*a_args, *a_args, *t_args] if scopes is not None else []
        with self._read() as conn:
            rows = conn.execute(self.D.q(sql), args).fetchall()
        return [
            RepositoryRow(str(r[0]), int(r[1]), str(r[2]), str(r[3]), *(int(x) for x in r[4:8]))
            for r in rows
            if not str(r[0]).startswith("__")  # system chains (the agent registry) are no repository
        ]

    def task_rows(
        self,
        repository: str,
        status: str | None,
        agent: str | None,
        offset: int,
        limit: int,
        scopes: Sequence[str] | None = None,
    ) -> tuple[int, list[TaskRow], dict[int, str]]:
        """(matching task count, one page of tasks newest first, entry time of each page row's
        newest attempt). A task matches when one of its attempts has ``status`` and one was
        recorded by ``agent``.

        The page is chosen from the ``(repository, task_id)`` index alone; the per-status counts
        are computed for the page's tasks only, so a page costs about the same on any store size.
        With ``scopes`` (scope keys) only the attempts of those count, for the filters too.
        """
        x_cond, x_args = self._in_scopes("x.scope", scopes)
        a_cond, a_args = self._in_scopes("a.scope", scopes)
        where, args = f"a.repository = ?{a_cond}", [repository, *a_args]
        if status == "outdated":
            where += (
                " AND a.task_id IN (SELECT x.task_id FROM correction_idx c "
                f"JOIN attempt_idx x ON x.rowid = c.attempt_rowid WHERE x.repository = ?{x_cond})"
            )
            args += [repository, *x_args]
        elif status is not None:
            where += (
                " AND a.task_id IN (SELECT x.task_id FROM attempt_idx x "
                f"WHERE x.repository = ? AND x.status = ?{x_cond})"
            )
            args += [repository, status, *x_args]
        if agent is not None:
            where += (
                " AND a.task_id IN (SELECT x.task_id FROM entries e JOIN attempt_idx x ON x.rowid = e.rowid "
                f"WHERE e.chain = ? AND e.kind = 'attempt' AND e.agent = ?{x_cond})"
            )
            args += [repository, agent, *x_args]
        with self._read() as conn:
            count = f"SELECT count(DISTINCT a.task_id) FROM attempt_idx a WHERE {where}"
            total = conn.execute(self.D.q(count), args).fetchone()[0]
            page = conn.execute(
                self.D.q(
                    f"SELECT a.task_id, max(a.rowid) AS last FROM attempt_idx a WHERE {where} "
                    "GROUP BY a.task_id ORDER BY last DESC LIMIT ? OFFSET ?"
                ),
                [*args, limit, offset],
            ).fetchall()
            order = [(str(t), int(last)) for t, last in page]
            stats: dict[str, tuple[int, int, int, int, int]] = {}
            times: dict[int, str] = {}
            if order:
                marks = ",".join("?" * len(order))
                for row in conn.execute(
                    self.D.q(
                        "SELECT a.task_id, count(*), "
                        "sum(CASE WHEN a.status = 'passed' THEN 1 ELSE 0 END), "
                        "sum(CASE WHEN a.status = 'failed' THEN 1 ELSE 0 END), "
                        "sum(CASE WHEN a.status = 'unverified' THEN 1 ELSE 0 END), "
                        f"sum({_OUTDATED}) FROM attempt_idx a "
                        f"WHERE a.repository = ? AND a.task_id IN ({marks}){a_cond} GROUP BY a.task_id"
                    ),
                    [repository, *(t for t, _ in order), *a_args],
                ):
                    stats[str(row[0])] = (int(row[1]), int(row[2]), int(row[3]), int(row[4]), int(row[5]))
                times = {
                    int(r): str(at)
                    for r, at in conn.execute(
                        self.D.q(f"SELECT rowid, at FROM entries WHERE rowid IN ({marks})"),
                        [last for _, last in order],
                    )
                }
        rows = [TaskRow(t, *stats[t], last) for t, last in order if t in stats]
        return int(total), rows, times

    def attempt_agents(self, repository: str, scopes: Sequence[str] | None = None) -> list[str]:
        """The agents that recorded attempts in ``repository`` (for a filter's choices); with
        ``scopes`` (scope keys), the agents of the live attempts of those only.

        Kept per chain with the seq it was read up to: ledger entries are never changed or
        removed, so only entries appended since are read again.
        """
        if scopes is not None:
            cond, args = self._in_scopes("a.scope", scopes)
            sql = (
                "SELECT DISTINCT e.agent FROM attempt_idx a JOIN entries e ON e.rowid = a.rowid "
                f"WHERE a.repository = ?{cond}"
            )
            with self._read() as conn:
                return sorted(str(a) for (a,) in conn.execute(self.D.q(sql), [repository, *args]))
        cache: dict[str, tuple[int, frozenset[str]]] = self.__dict__.setdefault("_agents_seen", {})
        upto, agents = cache.get(repository, (-1, frozenset()))
        with self._read() as conn:
            head = conn.execute(self.D.q("SELECT seq FROM heads WHERE chain = ?"), [repository]).fetchone()
            if head is None:
                return []
            if int(head[0]) > upto:
                fresh = conn.execute(
                    self.D.q(
                        "SELECT DISTINCT agent FROM entries WHERE chain = ? AND seq > ? AND seq <= ? "
                        "AND kind = 'attempt'"
                    ),
                    [repository, upto, int(head[0])],
                )
                agents = agents | {str(a) for (a,) in fresh}
                cache[repository] = (int(head[0]), agents)
        return sorted(agents)

    def tombstones(self, repository: str) -> list[StoredTombstone]:
        """The hash-checked forget bodies of ``repository``, oldest first."""
        with self._read() as conn:
            rowids = [
                int(r)
                for (r,) in conn.execute(
                    self.D.q("SELECT tomb_rowid FROM forgotten WHERE repository = ? ORDER BY tomb_rowid"),
                    [repository],
                )
            ]
            loaded = self._load(conn, rowids, TombstoneBody)
        return [loaded[r] for r in rowids if r in loaded]


__all__ = ["BrowseReads"]
