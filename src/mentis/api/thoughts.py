"""The thought operations' inputs and outputs: append_thought, search_thoughts, get_thought,
traverse_thoughts, context_bundle, recent_context, forget_thought, and MEMORY.md export/import."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from mentis.api.branches import BranchName
from mentis.api.common import (
    MAX_QUERY_CHARS,
    MAX_SEARCH_LIMIT,
    MAX_TAGS,
    EntityTypeName,
    EpisodeInput,
    Identifier,
    LedgerRef,
    NonEmptyText,
    Out,
    Query,
    Rejection,
    Strict,
    Tag,
    Text,
    Timestamp,
    Uuid,
    Visibility,
    plain,
    query,
)
from mentis.ledger.bodies import RELATION_KINDS, THOUGHT_ROLES, THOUGHT_TYPES

MAX_REFS = 64
MAX_RELATIONS = 64
MAX_CONCEPTS = 64
MAX_TRAVERSE_DEPTH = 5
MAX_TRAVERSE_NODES = 200
MAX_RECENT = 200

ThoughtType = Literal[THOUGHT_TYPES]  # type: ignore[valid-type]
ThoughtRole = Literal[THOUGHT_ROLES]  # type: ignore[valid-type]
RelationKind = Literal[RELATION_KINDS]  # type: ignore[valid-type]


def _one_of(allowed: tuple[str, ...]) -> AfterValidator:
    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    return AfterValidator(check)


# What a filter takes: the same names as ThoughtType, ThoughtRole and RelationKind, checked by the
# server, without the enum in the published schema. append_thought, in every profile that offers
# these reads, lists them already: an agent reads each list once (docs/tools.md, issue 27's trim).
TypeFilter = Annotated[str, _one_of(THOUGHT_TYPES)]
RoleFilter = Annotated[str, _one_of(THOUGHT_ROLES)]
KindFilter = Annotated[str, _one_of((*RELATION_KINDS, "ref"))]


def _unit(value: float | int | str) -> str:
    """A score in [0, 1] as the decimal string stored in hashed documents (≤ 4 places)."""
    if isinstance(value, bool):
        raise ValueError("must be a number between 0 and 1")
    try:
        d = Decimal(str(value))
    except InvalidOperation:
        raise ValueError("must be a number between 0 and 1") from None
    if not d.is_finite() or d < 0 or d > 1:
        raise ValueError(f"must be between 0 and 1 (got {value})")
    q = d.quantize(Decimal("0.0001")).normalize()
    return "0" if q.is_zero() else format(q, "f")


Unit = Annotated[float | str, AfterValidator(_unit)]

# ---------------------------------------------------------------- inputs


class Relation(Strict):
    kind: RelationKind
    target_id: Identifier
    valid_at: Timestamp | None = None
    invalid_at: Timestamp | None = None

    @model_validator(mode="after")
    def _window(self) -> Relation:
        if self.valid_at and self.invalid_at and self.invalid_at <= self.valid_at:
            raise ValueError("relation invalid_at must be after valid_at")
        return self


class AppendThoughtInput(Strict):
    repository: Identifier
    branch: BranchName | None = None
    type: ThoughtType
    content: NonEmptyText
    role: ThoughtRole = "Memory"
    confidence: Unit | None = None
    importance: Unit = "0.5"
    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] = Field(default_factory=list)
    concepts: Annotated[list[Tag], Field(max_length=MAX_CONCEPTS)] = Field(default_factory=list)
    refs: Annotated[list[Identifier], Field(max_length=MAX_REFS)] = Field(default_factory=list)
    relations: Annotated[list[Relation], Field(max_length=MAX_RELATIONS)] = Field(default_factory=list)
    task_id: Identifier | None = None
    session_id: Identifier | None = None
    visibility: Visibility | None = None
    thought_id: Uuid | None = None
    entity_type: EntityTypeName | None = None
    source_episode: EpisodeInput | None = None

    @model_validator(mode="after")
    def _no_self_reference(self) -> AppendThoughtInput:
        if self.thought_id is not None:
            if self.thought_id in self.refs:
                raise ValueError("refs: a thought cannot refer to itself")
            if any(r.target_id == self.thought_id for r in self.relations):
                raise ValueError("relations: a thought cannot relate to itself")
        return self


class ThoughtFilters(Strict):
    types: Annotated[list[TypeFilter], Field(max_length=len(THOUGHT_TYPES))] | None = None
    roles: Annotated[list[RoleFilter], Field(max_length=len(THOUGHT_ROLES))] | None = None
    agents: Annotated[list[Identifier], Field(max_length=100)] | None = None
    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] | None = None
    concepts: Annotated[list[Tag], Field(max_length=MAX_CONCEPTS)] | None = None
    text: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS), AfterValidator(query)] | None = None
    since: Timestamp | None = None
    until: Timestamp | None = None
    min_importance: Unit | None = None
    min_confidence: Unit | None = None
    task_id: Identifier | None = None
    entity_types: Annotated[list[EntityTypeName], Field(max_length=MAX_TAGS)] | None = None
    source_session: Identifier | None = None


class SearchThoughtsInput(Strict):
    query: Query | None = None
    repository: Identifier | None = None
    filters: ThoughtFilters = Field(default_factory=ThoughtFilters)
    as_of: Timestamp | None = None
    include_invalidated: bool = False
    limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT)] = 10


class GetThoughtInput(Strict):
    thought_id: Identifier | None = None
    repository: Identifier | None = None
    seq: Annotated[int, Field(ge=0)] | None = None
    hash: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None


class TraverseInput(Strict):
    thought_id: Identifier
    direction: Literal["out", "in", "both"] = "both"
    depth: Annotated[int, Field(ge=1, le=MAX_TRAVERSE_DEPTH)] = 2
    kinds: Annotated[list[KindFilter], Field(max_length=13)] | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_TRAVERSE_NODES)] = 50


class ContextBundleInput(Strict):
    query: Query
    repository: Identifier | None = None
    limit: Annotated[int, Field(ge=1, le=20)] = 5
    related: Annotated[int, Field(ge=0, le=20)] = 5
    as_of: Timestamp | None = None


class RecentContextInput(Strict):
    repository: Identifier
    agent_id: Identifier | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_RECENT)] = 20


class ForgetThoughtInput(Strict):
    repository: Identifier
    thought_id: Identifier
    reason: Text | None = None


class MemoryMdExportInput(Strict):
    repository: Identifier


class MemoryMdImportInput(Strict):
    repository: Identifier
    markdown: Annotated[str, Field(min_length=1, max_length=4 * 1024 * 1024), AfterValidator(plain)]


# ---------------------------------------------------------------- outputs


class ThoughtRelationOut(Out):
    kind: str
    target_id: str
    valid_at: str | None = None
    invalid_at: str | None = None


class ThoughtOut(Out):
    thought_id: str
    repository: str
    type: str
    role: str
    content: str
    confidence: float | None = None
    importance: float
    tags: list[str]
    concepts: list[str]
    refs: list[str]
    relations: list[ThoughtRelationOut]
    task_id: str | None = None
    agent_id: str
    session_id: str | None = None
    created_at: str
    ledger: LedgerRef
    invalidated_by: list[str] = Field(
        default_factory=list,
        description="ids of thoughts that supersede, correct or invalidate this one at the time asked about",
    )
    reasserts: list[Rejection] = Field(default_factory=list)
    entity_type: str | None = None
    source_episode: dict[str, Any] | None = Field(
        default=None, description="a SourceEpisode: transcript, session_id, from_line, to_line"
    )
    """Published as an object, its four fields documented in docs/provenance.md rather than in the
    schema of each of the five thought reads (48 tokens each; docs/tools.md)."""


class AppendThoughtResult(Out):
    thought_id: str
    ledger: LedgerRef
    superseded: list[str] = Field(default_factory=list, description="near-duplicates linked with Supersedes")
    warnings: list[str] = Field(default_factory=list)
    reasserts: list[Rejection] = Field(default_factory=list)


class ThoughtScoreParts(Out):
    """:class:`~mentis.api.common.ScoreParts` without what only a task search has (the title
    signal, the LLM usefulness score), which search_thoughts never computes."""

    lexical: float | None = None
    lexical_rank: int | None = None
    vector: float | None = None
    vector_rank: int | None = None
    fused: float
    graph: float | None = None

    @classmethod
    def of(cls, parts: dict[str, Any]) -> ThoughtScoreParts:
        return cls(**{k: v for k, v in parts.items() if k in cls.model_fields})


class ScoredThought(Out):
    thought: ThoughtOut
    score: float
    score_parts: ThoughtScoreParts | None = None


class SearchThoughtsResult(Out):
    thoughts: list[ScoredThought]
    ranking: str
    as_of: str


class TraverseEdge(Out):
    from_id: str
    kind: str
    to_id: str


class TraverseResult(Out):
    nodes: list[ThoughtOut]
    edges: list[TraverseEdge]
    truncated: bool
    dangling: list[TraverseEdge] = Field(default=[])
    """Edges whose other end was forgotten (its content is erased; the edge is all that is left)."""


class BundleItem(Out):
    seed: ScoredThought
    related: list[ThoughtOut]


class ContextBundleResult(Out):
    bundles: list[BundleItem]


class RecentContextResult(Out):
    thoughts: list[ThoughtOut]
    prompt: str


class ForgetThoughtResult(Out):
    forgotten: bool
    thought_id: str
    ledger: LedgerRef


class MemoryMdExportResult(Out):
    markdown: str
    count: int


class MemoryMdImportResult(Out):
    imported: int
    thought_ids: list[str]


# ---------------------------------------------------------------- retrospectives


class AppendRetrospectiveInput(Strict):
    repository: Identifier
    task_id: Identifier
    summary: NonEmptyText
    covers: Annotated[list[Identifier], Field(max_length=MAX_REFS + MAX_RELATIONS)] | None = Field(
        default=None,
        description="attempt and thought ids it covers (default: the task's attempts, newest 64)",
    )
    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] = Field(default_factory=list)
    session_id: Identifier | None = None


class AppendRetrospectiveResult(Out):
    thought_id: str
    ledger: LedgerRef
    attempts: list[str] = Field(description="the attempts it covers (linked as refs)")
    thoughts: list[str] = Field(description="the thoughts it covers (linked by Summarizes relations)")
    warnings: list[str] = Field(default_factory=list)
