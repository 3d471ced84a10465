"""``stats``' input and output: what a memory holds, counted over what the caller may read."""

from __future__ import annotations

from pydantic import Field

from mentis.api.common import Identifier, Out, Strict


class StatsInput(Strict):
    repository: Identifier | None = None


class RepositoryStats(Out):
    repository: str
    ledger_entries: dict[str, int]
    newest: str


class StatsResult(Out):
    repositories: int
    tasks: int
    attempts: int
    attempts_by_status: dict[str, int]
    outdated: int
    forgotten: int
    thoughts: int
    thoughts_by_type: dict[str, int]
    skills: int
    ledger_entries: int
    store_bytes: int | None
    bytes_per_attempt: int | None
    newest_activity: str | None
    by_repository: list[RepositoryStats]
    refused: list[str] = Field(
        default_factory=list,
        description="repositories left out of these counts: their ledger chain does not verify "
        "(run `mentis doctor`)",
    )
