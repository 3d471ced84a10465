"""Reads for people browsing a store (the dashboard): repository summaries, a repository's tasks
filtered and paginated, and a task's tombstones.

A mixin of both backends: the SQL is written once with ``?`` placeholders and runs on SQLite as is
and on PostgreSQL with ``%s`` (the tables and columns are the same). Like every store read it knows
nothing of scopes; :mod:`mentis.browse` filters by the caller before anything is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from mentis.ledger import Entry

TASK_STATUSES = ("passed", "failed", "unverified", "outdated")


@dataclass(frozen=True, slots=True)
class RepositoryRow:
    repository: str
    head_seq: int
    head_hash: str
    last_at: str
    tasks: int
    attempts: int
    thoughts: int
    forgotten: int


@dataclass(frozen=True, slots=True)
class TaskRow:
    task_id: str
    attempts: int
    passed: int
    failed: int
    unverified: int
    outdated: int
    last_rowid: int


_OUTDATED = (
    "CASE WHEN EXISTS(SELECT 1 FROM correction_idx c WHERE c.attempt_rowid = a.rowid) THEN 1 ELSE 0 END"
)


class BrowseReads:
    """Needs the backend's ``_read`` (a snapshot connection) and ``_load`` (hash-checked bodies)."""

    _param: ClassVar[str] = "?"

    if TYPE_CHECKING:  # the backends define them

        def _read(self) -> AbstractContextManager[Any]: ...
        def _load(
            self, conn: Any, rowids: Sequence[int], kind: str
        ) -> dict[int, tuple[Entry, dict[str, Any]]]: ...

    def _sql(self, sql: str) -> str:
        return sql if self._param == "?" else sql.replace("?", self._param)

    def repository_rows(self) -> list[RepositoryRow]:
        """Every chain with its head, newest entry time and live counts, newest activity first."""
        sql = (
            "SELECT h.chain, h.seq, h.hash, e.at, "
            "(SELECT count(*) FROM task_idx t WHERE t.repository = h.chain), "
            "(SELECT count(*) FROM attempt_idx a WHERE a.repository = h.chain), "
            "(SELECT count(*) FROM thought_idx t WHERE t.repository = h.chain), "
            "(SELECT count(*) FROM forgotten f WHERE f.repository = h.chain) "
            "FROM heads h JOIN entries e ON e.chain = h.chain AND e.seq = h.seq ORDER BY e.at DESC, h.chain"
        )
        with self._read() as conn:
            rows = conn.execute(sql).fetchall()
        return [
            RepositoryRow(str(r[0]), int(r[1]), str(r[2]), str(r[3]), *(int(x) for x in r[4:8])) for r in rows
        ]

    def task_rows(
        self, repository: str, status: str | None, agent: str | None, offset: int, limit: int
    ) -> tuple[int, list[TaskRow], dict[int, str]]:
        """(matching task count, one page of tasks newest first, entry time of each page row's
        newest attempt). A task matches when one of its attempts has ``status`` and one was
        recorded by ``agent``."""
        having: list[str] = []
        args: list[Any] = [repository]
        if status == "outdated":
            having.append(f"sum({_OUTDATED}) > 0")
        elif status is not None:
            having.append("sum(CASE WHEN a.status = ? THEN 1 ELSE 0 END) > 0")
            args.append(status)
        join = ""
        if agent is not None:
            join = "JOIN entries e ON e.rowid = a.rowid "
            having.append("sum(CASE WHEN e.agent = ? THEN 1 ELSE 0 END) > 0")
            args.append(agent)
        grouped = (
            "SELECT a.task_id, count(*) AS n, "
            "sum(CASE WHEN a.status = 'passed' THEN 1 ELSE 0 END), "
            "sum(CASE WHEN a.status = 'failed' THEN 1 ELSE 0 END), "
            "sum(CASE WHEN a.status = 'unverified' THEN 1 ELSE 0 END), "
            f"sum({_OUTDATED}), max(a.rowid) AS last "
            f"FROM attempt_idx a {join}WHERE a.repository = ? GROUP BY a.task_id"
            + (f" HAVING {' AND '.join(having)}" if having else "")
        )
        with self._read() as conn:
            total = conn.execute(self._sql(f"SELECT count(*) FROM ({grouped}) g"), args).fetchone()[0]
            page = conn.execute(
                self._sql(f"{grouped} ORDER BY last DESC LIMIT ? OFFSET ?"), [*args, limit, offset]
            ).fetchall()
            rows = [TaskRow(str(r[0]), *(int(x) for x in r[1:7])) for r in page]
            times: dict[int, str] = {}
            if rows:
                marks = ",".join("?" * len(rows))
                times = {
                    int(r): str(at)
                    for r, at in conn.execute(
                        self._sql(f"SELECT rowid, at FROM entries WHERE rowid IN ({marks})"),
                        [t.last_rowid for t in rows],
                    )
                }
        return int(total), rows, times

    def attempt_agents(self, repository: str) -> list[str]:
        """The agents that recorded attempts in ``repository`` (for a filter's choices)."""
        sql = "SELECT DISTINCT agent FROM entries WHERE chain = ? AND kind = 'attempt' ORDER BY agent"
        with self._read() as conn:
            return [str(a) for (a,) in conn.execute(self._sql(sql), [repository])]

    def tombstones(self, repository: str) -> list[tuple[Entry, dict[str, Any]]]:
        """The hash-checked forget bodies of ``repository``, oldest first."""
        with self._read() as conn:
            rowids = [
                int(r)
                for (r,) in conn.execute(
                    self._sql("SELECT tomb_rowid FROM forgotten WHERE repository = ? ORDER BY tomb_rowid"),
                    [repository],
                )
            ]
            loaded = self._load(conn, rowids, "forget")
        return [loaded[r] for r in rowids if r in loaded]
