"""The records and the inputs of every operation, with their limits.

Every limit is defined here once; MCP, the CLI (and later REST) publish and enforce the
same ones because they all build these models. All models forbid unknown fields.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from mentis.errors import InvalidInput
from mentis.ledger.bodies import INVALIDATING_KINDS as INVALIDATING_KINDS
from mentis.ledger.bodies import REJECTING_KINDS as REJECTING_KINDS
from mentis.ledger.bodies import RELATION_KINDS, AttemptStatus
from mentis.ledger.bodies import THOUGHT_ROLES as THOUGHT_ROLES
from mentis.ledger.bodies import THOUGHT_TYPES as THOUGHT_TYPES
from mentis.ledger.signing import now_iso as now_iso

# ---------------------------------------------------------------- limits (documented in README)

MAX_TEXT_BYTES = 65_536
"""action, observation, inference, check output, reasons: 64 KiB of UTF-8 each."""
MAX_ID_CHARS = 256
"""repository, task_id, attempt ids, agent ids, commits, branches."""
MAX_TITLE_CHARS = 1_000
MAX_COMMAND_CHARS = 8_192
MAX_PATH_CHARS = 4_096
MAX_FILES = 1_000
MAX_TAGS = 64
MAX_TAG_CHARS = 128
MAX_QUERY_CHARS = 8_192
MAX_SQL_CHARS = 16_384
MAX_SEARCH_LIMIT = 50
EXIT_CODE_RANGE = (-(2**31), 2**31 - 1)

_GIT_SHA = re.compile(r"^[0-9a-fA-F]{4,64}$")


def _checked_text(value: str, *, max_bytes: int | None = None) -> str:
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(f"is not valid UTF-8 text (lone surrogate at character {exc.start})") from None
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    if max_bytes is not None and size > max_bytes:
        raise ValueError(f"is {size:,} bytes of UTF-8; the limit is {max_bytes:,} bytes")
    return value


def _text(value: str) -> str:
    return _checked_text(value, max_bytes=MAX_TEXT_BYTES)


def _plain(value: str) -> str:
    return _checked_text(value)


def _identifier(value: str) -> str:
    _checked_text(value)
    if not value.strip():
        raise ValueError("must not be empty or whitespace")
    if value != value.strip():
        raise ValueError("must not start or end with whitespace")
    if any(ord(ch) < 32 for ch in value):
        raise ValueError("must not contain control characters")
    return value


def _git_sha(value: str) -> str:
    if not _GIT_SHA.match(value):
        raise ValueError("must be a hexadecimal git object id (4 to 64 hex digits)")
    return value.lower()


Identifier = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS), AfterValidator(_identifier)]
Text = Annotated[str, Field(max_length=MAX_TEXT_BYTES), AfterValidator(_text)]
NonEmptyText = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_BYTES), AfterValidator(_text)]
Title = Annotated[str, Field(max_length=MAX_TITLE_CHARS), AfterValidator(_plain)]
Command = Annotated[str, Field(min_length=1, max_length=MAX_COMMAND_CHARS), AfterValidator(_plain)]
FilePath = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS), AfterValidator(_identifier)]
Tag = Annotated[str, Field(min_length=1, max_length=MAX_TAG_CHARS), AfterValidator(_identifier)]
GitSha = Annotated[str, Field(min_length=4, max_length=64), AfterValidator(_git_sha)]
ExitCode = Annotated[int, Field(ge=EXIT_CODE_RANGE[0], le=EXIT_CODE_RANGE[1])]


def _query(value: str) -> str:
    _checked_text(value)
    if not value.strip():
        raise ValueError("must not be empty or whitespace")
    return value


Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS), AfterValidator(_query)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- records


class CodeContext(Strict):
    """Where the attempt ran: the commit, branch, whether the tree was dirty, file blob hashes."""

    commit: GitSha | None = None
    branch: Identifier | None = None
    dirty: bool | None = None
    file_hashes: Annotated[dict[FilePath, GitSha], Field(max_length=MAX_FILES)] | None = None


class Check(Strict):
    """The check an attempt ran: a command and whether it passed."""

    command: Command
    status: Literal["passed", "failed"]
    exit_code: ExitCode | None = None
    output: Text | None = None


# ---------------------------------------------------------------- operation inputs


class RecordAttemptInput(Strict):
    repository: Identifier
    task_id: Identifier
    task_title: Title | None = None
    code_context: CodeContext | None = None
    action: NonEmptyText
    files: Annotated[list[FilePath], Field(max_length=MAX_FILES)] = Field(default_factory=list)
    observation: NonEmptyText
    inference: Text | None = None
    check: Check | None = None
    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] = Field(default_factory=list)
    session_id: Identifier | None = None


class SearchInput(Strict):
    query: Query
    repository: Identifier | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT)] = 10
    current_commit: GitSha | None = None
    current_file_hashes: Annotated[dict[FilePath, GitSha], Field(max_length=MAX_FILES)] | None = None


SqlText = Annotated[str, Field(min_length=1, max_length=MAX_SQL_CHARS), AfterValidator(_query)]


class RecallInput(Strict):
    sql: SqlText | None = None
    params: Annotated[dict[Identifier, str | int | float | bool | None], Field(max_length=100)] | None = None
    repository: Identifier | None = None
    task_id: Identifier | None = None


class MarkOutdatedInput(Strict):
    repository: Identifier
    attempt_id: Identifier
    reason: NonEmptyText
    latest_commit: GitSha | None = None


class ForgetInput(Strict):
    repository: Identifier
    attempt_id: Identifier
    reason: Text | None = None


class ForgetThoughtInput(Strict):
    repository: Identifier
    thought_id: Identifier
    reason: Text | None = None


M = TypeVar("M", bound=BaseModel)


# ---------------------------------------------------------------- thoughts

MAX_REFS = 64
MAX_RELATIONS = 64
MAX_CONCEPTS = 64
MAX_TRAVERSE_DEPTH = 5
MAX_TRAVERSE_NODES = 200
MAX_RECENT = 200

ThoughtType = Literal[THOUGHT_TYPES]  # type: ignore[valid-type]
ThoughtRole = Literal[THOUGHT_ROLES]  # type: ignore[valid-type]
RelationKind = Literal[RELATION_KINDS]  # type: ignore[valid-type]


def _timestamp(value: str) -> str:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 time such as 2026-12-01T09:45:00Z") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


Timestamp = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_timestamp)]
Unit = Annotated[float | str, AfterValidator(_unit)]
Uuid = Annotated[str, Field(pattern=r"^[0-9a-fA-F-]{32,36}$"), AfterValidator(lambda v: str(uuid.UUID(v)))]


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
    thought_id: Uuid | None = Field(
        None, description="optional client-chosen UUID (makes retries idempotent)"
    )

    @model_validator(mode="after")
    def _no_self_reference(self) -> AppendThoughtInput:
        if self.thought_id is not None:
            if self.thought_id in self.refs:
                raise ValueError("refs: a thought cannot refer to itself")
            if any(r.target_id == self.thought_id for r in self.relations):
                raise ValueError("relations: a thought cannot relate to itself")
        return self


class ThoughtFilters(Strict):
    types: Annotated[list[ThoughtType], Field(max_length=len(THOUGHT_TYPES))] | None = None
    roles: Annotated[list[ThoughtRole], Field(max_length=len(THOUGHT_ROLES))] | None = None
    agents: Annotated[list[Identifier], Field(max_length=100)] | None = None
    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] | None = None
    concepts: Annotated[list[Tag], Field(max_length=MAX_CONCEPTS)] | None = None
    text: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS), AfterValidator(_query)] | None = (
        None
    )
    since: Timestamp | None = None
    until: Timestamp | None = None
    min_importance: Unit | None = None
    min_confidence: Unit | None = None
    task_id: Identifier | None = None


class SearchThoughtsInput(Strict):
    query: Query | None = None
    repository: Identifier | None = None
    filters: ThoughtFilters = Field(default_factory=ThoughtFilters)
    as_of: Timestamp | None = None
    include_invalidated: bool = False
    limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT)] = 10


class GetThoughtInput(Strict):
    thought_id: Identifier | None = None
    repository: Identifier | None = Field(None, description="with seq: the chain to read")
    seq: Annotated[int, Field(ge=0)] | None = None
    hash: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None


class TraverseInput(Strict):
    thought_id: Identifier
    direction: Literal["out", "in", "both"] = "both"
    depth: Annotated[int, Field(ge=1, le=MAX_TRAVERSE_DEPTH)] = 2
    kinds: Annotated[list[RelationKind | Literal["ref"]], Field(max_length=13)] | None = None
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


class MemoryMdExportInput(Strict):
    repository: Identifier


class MemoryMdImportInput(Strict):
    repository: Identifier
    markdown: Annotated[str, Field(min_length=1, max_length=4 * 1024 * 1024), AfterValidator(_plain)]


class VerifyInput(Strict):
    repository: Identifier | None = None
    signatures: bool = False


def parse(model: type[M], data: dict[str, Any]) -> M:
    """Validate ``data`` into ``model``, turning pydantic's error into one clear InvalidInput."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_from(exc) from None


def invalid_from(exc: ValidationError) -> InvalidInput:
    """One message naming every offending field and why."""
    parts = []
    first_field = None
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "input"
        first_field = first_field or loc
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if err["type"] == "extra_forbidden":
            msg = "is not a known field"
        elif err["type"] == "missing":
            msg = "is required"
        elif err["type"] == "string_unicode":
            msg = "is not valid UTF-8 text (it holds a lone surrogate)"
        parts.append(f"{loc}: {msg}")
    return InvalidInput("invalid input: " + "; ".join(parts), field=first_field)


# ---------------------------------------------------------------- operation outputs


class Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LedgerRef(Out):
    seq: int
    hash: str


class RecordAttemptResult(Out):
    attempt_id: str
    status: AttemptStatus
    ledger: LedgerRef
    warnings: list[str] = Field(default_factory=list)
    reasserts: list[Rejection] = Field(
        default_factory=list, description="earlier rejected conclusions this attempt seems to re-assert"
    )


class CorrectionOut(Out):
    reason: str
    latest_commit: str | None = None
    at: str
    agent_id: str


class AttemptPreview(Out):
    attempt_id: str
    action: str
    observation: str
    inference: str | None = None
    status: AttemptStatus
    files: list[str]
    commit: str | None = None
    created_at: str
    agent_id: str
    correction: CorrectionOut | None = None
    corrections_count: int = 0
    stale_files: list[str] | None = None
    reasserts: list[Rejection] = Field(default_factory=list)


class ScoreParts(Out):
    lexical: float | None = Field(None, description="BM25 score of the best attempt (higher is better)")
    lexical_rank: int | None = None
    vector: float | None = Field(None, description="cosine similarity of the best attempt")
    vector_rank: int | None = None
    fused: float = Field(description="reciprocal-rank fusion of the two ranks")
    graph: float | None = Field(None, description="personalised PageRank from the fused hits (ranks tasks)")
    usefulness: float | None = Field(None, description="LLM usefulness score in [0, 1], when reranking ran")
    title: float | None = Field(None, description="BM25 of the query's first line against task titles alone")
    title_rank: int | None = None


class TaskResult(Out):
    repository: str
    task_id: str
    title: str | None = None
    score: float
    score_parts: ScoreParts
    attempt: AttemptPreview
    matched_attempt_ids: list[str]
    attempt_count: int


class SearchResult(Out):
    tasks: list[TaskResult]
    ranking: str


class RecallResult(Out):
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    truncation_reason: str | None = None


class MarkOutdatedResult(Out):
    attempt_id: str
    correction: CorrectionOut
    corrections_count: int
    ledger: LedgerRef


class ForgetResult(Out):
    forgotten: bool
    attempt_id: str
    ledger: LedgerRef


class ForgetThoughtResult(Out):
    forgotten: bool
    thought_id: str
    ledger: LedgerRef


class ChainResult(Out):
    chain: str
    ok: bool
    entries: int
    head_seq: int
    head_hash: str
    bodies_erased: int


class VerifyResult(Out):
    ok: bool
    chains: list[ChainResult]


class Rejection(Out):
    """An earlier conclusion that was rejected, which a new write seems to re-assert."""

    rejected_id: str = Field(description="the attempt or thought whose conclusion was rejected")
    rejected_kind: Literal["attempt", "thought"]
    reason: str
    at: str
    by_id: str = Field(description="the correction or thought that rejected it")
    similarity: float
    match: Literal["exact", "similar"]


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


class AppendThoughtResult(Out):
    thought_id: str
    ledger: LedgerRef
    superseded: list[str] = Field(default_factory=list, description="near-duplicates linked with Supersedes")
    warnings: list[str] = Field(default_factory=list)
    reasserts: list[Rejection] = Field(default_factory=list)


class ScoredThought(Out):
    thought: ThoughtOut
    score: float
    score_parts: ScoreParts | None = None


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
    dangling: list[TraverseEdge] = []
    """Edges whose other end was forgotten (its content is erased; the edge is all that is left)."""


class BundleItem(Out):
    seed: ScoredThought
    related: list[ThoughtOut]


class ContextBundleResult(Out):
    bundles: list[BundleItem]


class RecentContextResult(Out):
    thoughts: list[ThoughtOut]
    prompt: str


class MemoryMdExportResult(Out):
    markdown: str
    count: int


class MemoryMdImportResult(Out):
    imported: int
    thought_ids: list[str]
