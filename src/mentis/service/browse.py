"""Scoped reads for people browsing a memory (the dashboard): repositories with counts and chain
heads, a repository's tasks filtered and paginated, and a task's timeline with its tombstones.

Composed into :class:`mentis.service.memory.Memory`, like :mod:`mentis.service.thoughts`: every
method takes the :class:`Caller` and shows only the repositories it may read, so no page applies scope itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mentis.api.common import MAX_ID_CHARS
from mentis.errors import Forbidden, InvalidInput, NotFound
from mentis.ledger.bodies import AttemptBody
from mentis.ledger.entry import Entry
from mentis.service.access import Caller, may_read
from mentis.service.context import ServiceContext
from mentis.store.protocol import TASK_STATUSES, RepositoryRow, StoredAttempt, TaskRow

MAX_PAGE_SIZE = 100
MAX_PAGE = 1_000_000


@dataclass(frozen=True)
class TaskSummary:
    row: TaskRow
    title: str | None
    last_at: str


@dataclass(frozen=True)
class TaskPage:
    repository: str
    total: int
    page: int
    per_page: int
    tasks: list[TaskSummary]
    agents: list[str]

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


@dataclass(frozen=True)
class TimelineAttempt:
    stored: StoredAttempt
    status: str
    stale_files: list[str] | None = None
    other_commit: bool = False

    @property
    def body(self) -> AttemptBody:
        return self.stored.body


@dataclass(frozen=True)
class Tombstone:
    entry: Entry
    attempt_id: str
    reason: str | None
    agent_id: str
    at: str
    erased: list[int]


@dataclass(frozen=True)
class Timeline:
    repository: str
    task_id: str
    title: str | None
    current_commit: str | None
    items: list[TimelineAttempt | Tombstone] = field(default_factory=list)


def _checked_id(value: str, what: str) -> str:
    if not value or len(value) > MAX_ID_CHARS or any(ord(c) < 32 for c in value):
        raise InvalidInput(f"{what} must be 1 to {MAX_ID_CHARS} characters without control characters", what)
    return value


def _scopes(caller: Caller, repository: str) -> list[str] | None:
    """The scope keys of ``repository`` a page shows the caller (None: every one, for an admin)."""
    return None if caller.admin else caller.own_scopes(repository)


class BrowseOps:
    """The browsing reads of Memory, over the shared :class:`ServiceContext`."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.store = ctx.store

    def _readable(self, caller: Caller, repository: str) -> str:
        _checked_id(repository, "repository")
        if not caller.covers(repository):
            raise Forbidden("this caller may not read that repository")
        may_read(caller, repository)  # a damaged repository: its refusal
        return repository

    def repository_overview(self, caller: Caller) -> list[RepositoryRow]:
        """The repositories the caller may read, newest activity first."""
        rows = [r for r in self.store.repository_rows() if caller.sees(r.repository)]
        if caller.admin or not rows:
            return rows
        scopes = [k for r in rows for k in caller.own_scopes(r.repository)]
        return [r for r in self.store.repository_rows(scopes) if caller.sees(r.repository)]

    def task_page(
        self,
        caller: Caller,
        repository: str,
        *,
        status: str | None = None,
        agent: str | None = None,
        page: int = 1,
        per_page: int = 25,
    ) -> TaskPage:
        """One page of a repository's tasks, newest activity first; ``status`` (passed, failed,
        unverified, outdated) and ``agent`` keep the tasks with an attempt that matches."""
        self._readable(caller, repository)
        if status is not None and status not in TASK_STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(TASK_STATUSES)}", "status")
        if agent is not None:
            _checked_id(agent, "agent")
        if not 1 <= page <= MAX_PAGE:
            raise InvalidInput(f"page must be a whole number from 1 to {MAX_PAGE:,}", "page")
        if not 1 <= per_page <= MAX_PAGE_SIZE:
            raise InvalidInput(f"per_page must be from 1 to {MAX_PAGE_SIZE}", "per_page")
        scopes = _scopes(caller, repository)
        offset = (page - 1) * per_page
        total, rows, times = self.store.task_rows(repository, status, agent, offset, per_page, scopes)
        info = self.store.task_info([(repository, r.task_id) for r in rows], scopes)
        tasks = [
            TaskSummary(
                row=r, title=info.get((repository, r.task_id), (None, 0))[0], last_at=times[r.last_rowid]
            )
            for r in rows
        ]
        agents = self.store.attempt_agents(repository, scopes)
        return TaskPage(repository, total, page, per_page, tasks, agents)

    def task_timeline(
        self, caller: Caller, repository: str, task_id: str, current_commit: str | None = None
    ) -> Timeline:
        """Every attempt of a task with its corrections, and its forgotten attempts as tombstones,
        in ledger order. With ``current_commit``, attempts recorded on another commit are marked,
        and so are the files whose recorded hash differs from the one recorded at that commit."""
        self._readable(caller, repository)
        _checked_id(task_id, "task_id")
        if current_commit is not None:
            _checked_id(current_commit, "commit")
        attempts = self.store.task_history(repository, task_id, _scopes(caller, repository))
        tombs = [
            Tombstone(e, t.attempt_id, t.reason, t.agent_id, t.at, t.erased)
            for e, t in self.store.tombstones(repository)
            if t.task_id == task_id and t.attempt_id is not None
        ]
        if not attempts and not tombs:
            raise NotFound("no such task in this repository")
        bodies = [a.body for a in attempts]
        current: dict[str, str] = {}
        for b in bodies:
            if current_commit is not None and b.code_context and b.commit == current_commit:
                current.update(b.code_context.file_hashes or {})
        items: list[TimelineAttempt | Tombstone] = []
        for a, b in zip(attempts, bodies, strict=True):
            stale = None if current_commit is None else b.stale_files(current)
            other = current_commit is not None and b.commit not in (None, current_commit)
            items.append(TimelineAttempt(a, b.status, stale, other))
        items += tombs
        items.sort(key=lambda i: i.stored.entry.seq if isinstance(i, TimelineAttempt) else i.entry.seq)
        title = next((b.task_title for b in reversed(bodies) if b.task_title), None)
        return Timeline(repository, task_id, title, current_commit, items)


__all__ = ["BrowseOps", "TaskPage", "TaskSummary", "Timeline", "TimelineAttempt", "Tombstone"]
