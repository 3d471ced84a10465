"""``stats``: what a memory holds, counted only over the repositories the caller may read.

Counts of live records come from the documented ``recall`` views (the same on every backend,
scoped inside the views, every value read out of a hash-checked body); ledger activity (entries
per kind, forgets, the newest entry) from the ledger's keys, for a non-admin leaving out the entries
of other agents' private records (``Store.ledger_summary``). The store's size on disk is given only
to a caller that sees every repository, since it also measures what others stored.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel

from mentis.api.stats import RepositoryStats, StatsInput, StatsResult
from mentis.errors import NotFound
from mentis.service.access import Caller, may_read
from mentis.store.protocol import Store

STATUSES = ("passed", "failed", "unverified")


def _scalar_rows(store: Store, caller: Caller, sql: str, repository: str | None) -> list[list[Any]]:
    where = " WHERE repository = :repo" if repository is not None else ""
    result = store.run_sql(
        sql.format(where=where),
        {"repo": repository} if repository is not None else None,
        visible=caller.reads_key,
        max_rows=100,
        max_bytes=512_000,
        timeout_s=30.0,
    )
    return result.rows


def collect_stats(store: Store, caller: Caller, req: StatsInput) -> StatsResult:
    """Count what ``caller`` may read (one repository with ``req.repository``)."""
    may_read(caller, req.repository)
    scopes = None
    if not caller.admin:
        scopes = [k for r in store.repositories() if caller.sees(r) for k in caller.own_scopes(r)]
    summary = [
        row
        for row in store.ledger_summary(scopes)
        if caller.sees(row[0]) and (req.repository is None or row[0] == req.repository)
    ]
    if req.repository is not None and not summary:
        raise NotFound(f"no chain for repository {req.repository!r}")
    per_repo: dict[str, RepositoryStats] = {}
    kinds: Counter[str] = Counter()
    for chain, kind, count, newest in summary:
        repo = per_repo.setdefault(chain, RepositoryStats(repository=chain, ledger_entries={}, newest=newest))
        repo.ledger_entries[kind] = count
        repo.newest = max(repo.newest, newest)
        kinds[kind] += count
    status_rows = _scalar_rows(
        store,
        caller,
        "SELECT status, count(*), sum(outdated) FROM attempts{where} GROUP BY status",
        req.repository,
    )
    by_status = dict.fromkeys(STATUSES, 0) | {str(s): int(n) for s, n, _ in status_rows}
    (tasks,) = _scalar_rows(store, caller, "SELECT count(*) FROM tasks{where}", req.repository)[0]
    type_rows = _scalar_rows(
        store,
        caller,
        "SELECT type, count(*) FROM thoughts{where} GROUP BY type ORDER BY type",
        req.repository,
    )
    attempts = sum(by_status.values())
    size = store.size_bytes() if caller.repositories is None and req.repository is None else None
    return StatsResult(
        repositories=len(per_repo),
        tasks=int(tasks),
        attempts=attempts,
        attempts_by_status=by_status,
        outdated=sum(int(o or 0) for _, _, o in status_rows),
        forgotten=kinds["forget"],
        thoughts=sum(int(n) for _, n in type_rows),
        thoughts_by_type={str(t): int(n) for t, n in type_rows},
        skills=sum(n for kind, n in kinds.items() if kind.startswith("skill")),
        ledger_entries=sum(kinds.values()),
        store_bytes=size,
        bytes_per_attempt=size // attempts if size is not None and attempts else None,
        newest_activity=max((r.newest for r in per_repo.values()), default=None),
        by_repository=sorted(per_repo.values(), key=lambda r: r.repository),
        refused=caller.left_out(req.repository),
    )


def result_lines(result: BaseModel) -> list[str]:
    """The human rendering of a :class:`StatsResult`, one fact a line."""
    assert isinstance(result, StatsResult)
    status = ", ".join(f"{n} {s}" for s, n in result.attempts_by_status.items())
    types = ", ".join(f"{n} {t}" for t, n in result.thoughts_by_type.items()) or "none"
    size = (
        f"{result.store_bytes:,} bytes ({result.bytes_per_attempt or 0:,} per attempt)"
        if result.store_bytes is not None
        else "not shown (this caller does not see every repository)"
    )
    lines = [
        f"repositories  {result.repositories}",
        f"tasks         {result.tasks}",
        f"attempts      {result.attempts} ({status})",
        f"              {result.outdated} outdated, {result.forgotten} forgotten",
        f"thoughts      {result.thoughts} ({types})",
        f"skills        {result.skills} ledger entries",
        f"ledger        {result.ledger_entries} entries",
        f"store size    {size}",
        f"newest        {result.newest_activity or 'nothing recorded yet'}",
    ]
    for r in result.by_repository:
        entries = ", ".join(f"{n} {k}" for k, n in sorted(r.ledger_entries.items()))
        lines.append(f"  {r.repository}: {entries}; newest {r.newest}")
    if result.refused:
        lines.append(
            f"refused       {', '.join(result.refused)} (ledger chain does not verify; see mentis doctor)"
        )
    return lines
