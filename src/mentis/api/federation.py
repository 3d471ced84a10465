"""Federated search's input and output: one search over this memory and the others configured
(``MENTIS_FEDERATION``), fused by rank (docs/search.md#federated-search)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from mentis.api.attempts import TaskResult
from mentis.api.common import MAX_SEARCH_LIMIT, Identifier, Out, Query, Strict

LOCAL = "local"
"""The name this process's own store answers under in a federated search."""


class FederatedSearchInput(Strict):
    query: Query
    repository: Identifier | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT)] = 10
    memories: Annotated[list[Identifier], Field(min_length=1, max_length=32)] | None = Field(
        default=None, description="names of the memories to search (default: local and every configured one)"
    )


class MemoryRank(Out):
    memory: str
    rank: int = Field(description="the task's rank in that memory's own answer, 1 = best")


class FederatedTask(Out):
    memory: str = Field(description="the memory whose preview is shown (recall the task there)")
    fused: float = Field(description="reciprocal-rank fusion of the task's ranks: sum of 1/(k + rank)")
    ranks: list[MemoryRank]
    task: TaskResult


class MemoryDown(Out):
    memory: str
    reason: str


class FederatedSearchResult(Out):
    tasks: list[FederatedTask]
    answered: list[str] = Field(description="the memories that answered")
    unavailable: list[MemoryDown] = Field(description="the memories that did not, and why")
    ranking: str
