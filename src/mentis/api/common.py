"""What every published model shares: the limits, the checked field types, the two bases and
:func:`parse`, which turns any validation failure into one clear :class:`~mentis.errors.InvalidInput`.

Every limit is defined once, in ``mentis.api``; MCP, REST and the CLI publish and enforce the same
ones because they all build these models. Inputs subclass :class:`Strict`, outputs :class:`Out`:
both forbid unknown fields.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from mentis.errors import InvalidInput
from mentis.ledger.entry import Entry
from mentis.ledger.links import entity_type_name

# ---------------------------------------------------------------- limits (documented in docs/tools.md)

MAX_TEXT_BYTES = 65_536
"""action, observation, inference, check output, reasons: 64 KiB of UTF-8 each."""
MAX_ID_CHARS = 256
"""repository, task_id, attempt ids, agent ids, commits, branches."""
MAX_TITLE_CHARS = 1_000
MAX_PATH_CHARS = 4_096
MAX_FILES = 1_000
MAX_TAGS = 64
MAX_TAG_CHARS = 128
MAX_QUERY_CHARS = 8_192
MAX_SEARCH_LIMIT = 50

_GIT_SHA = re.compile(r"^[0-9a-fA-F]{4,64}$")


def checked_text(value: str, *, max_bytes: int | None = None) -> str:
    """``value`` if it is valid UTF-8 without NUL and within ``max_bytes``; ValueError otherwise."""
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
    return checked_text(value, max_bytes=MAX_TEXT_BYTES)


def plain(value: str) -> str:
    return checked_text(value)


def _identifier(value: str) -> str:
    checked_text(value)
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


def query(value: str) -> str:
    checked_text(value)
    if not value.strip():
        raise ValueError("must not be empty or whitespace")
    return value


def _timestamp(value: str) -> str:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 time such as 2026-12-01T09:45:00Z") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


Identifier = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS), AfterValidator(_identifier)]
Text = Annotated[str, Field(max_length=MAX_TEXT_BYTES), AfterValidator(_text)]
NonEmptyText = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_BYTES), AfterValidator(_text)]
Title = Annotated[str, Field(max_length=MAX_TITLE_CHARS), AfterValidator(plain)]
FilePath = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS), AfterValidator(_identifier)]
Tag = Annotated[str, Field(min_length=1, max_length=MAX_TAG_CHARS), AfterValidator(_identifier)]
GitSha = Annotated[str, Field(min_length=4, max_length=64), AfterValidator(_git_sha)]
Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS), AfterValidator(query)]
Timestamp = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_timestamp)]
Visibility = Literal["repository", "agent", "session"]
"""Who may read a written record: every reader of its repository (the default), only the
writing agent (and admins), or only that agent in the same session (docs/scopes.md)."""
_UUID = re.compile(r"^[0-9a-fA-F-]{32,36}$")


def _uuid(value: str) -> str:
    if not _UUID.match(value):
        raise ValueError("must be a UUID such as 0b6c3f1e-8d2a-4e7b-9c1d-5f3a2e6b7c8d")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise ValueError("must be a UUID such as 0b6c3f1e-8d2a-4e7b-9c1d-5f3a2e6b7c8d") from None


Uuid = Annotated[str, AfterValidator(_uuid)]
"""A client-chosen record id (append_thought's ``thought_id``, signed_write's ``id``): 32 hex digits
with or without dashes, checked by the validator (the pattern is not published: 14 tokens a tool)."""


def _entity_type(value: str) -> str:
    if not entity_type_name(value):
        raise ValueError(
            "must be 1-64 lowercase letters, digits or _.- starting with a letter "
            "(e.g. service, file, library)"
        )
    return value


EntityTypeName = Annotated[str, AfterValidator(_entity_type)]
"""A name of the entity-type registry (what a thought is about): ``service``, ``file``, ``library``…
(its length and letters are checked by the validator, whose message says the rule)."""


class Strict(BaseModel):
    """An operation's input: unknown fields are refused, and it cannot be changed once parsed."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Out(BaseModel):
    """An operation's output."""

    model_config = ConfigDict(extra="forbid")


# Where a record came from: a transcript (its path, or another name of where the session's turns
# are kept), its session, and the lines or turns, 1-based and inclusive. (A comment, not a
# docstring: a model's docstring is published in every schema that holds it, docs/provenance.md
# says it once.)
class EpisodeInput(Strict):
    transcript: FilePath
    session_id: Identifier
    from_line: Annotated[int, Field(ge=1)]
    to_line: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _range(self) -> EpisodeInput:
        if self.to_line < self.from_line:
            raise ValueError(f"to_line ({self.to_line}) must not be before from_line ({self.from_line})")
        return self


# ---------------------------------------------------------------- outputs more than one topic shares


class SourceEpisode(Out):
    """Where a record or a proposal came from: a transcript, its session and the lines (1-based,
    inclusive); the shape of :class:`EpisodeInput` and of a thought body's ``source_episode``."""

    transcript: str
    session_id: str
    from_line: int
    to_line: int


class LedgerRef(Out):
    seq: int
    hash: str

    @classmethod
    def of(cls, entry: Entry) -> LedgerRef:
        return cls(seq=entry.seq, hash=entry.hash)


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


class Rejection(Out):
    """An earlier conclusion that was rejected, which a new write seems to re-assert."""

    rejected_id: str = Field(description="the attempt or thought whose conclusion was rejected")
    rejected_kind: Literal["attempt", "thought"]
    reason: str
    at: str
    by_id: str = Field(description="the correction or thought that rejected it")
    similarity: float
    match: Literal["exact", "similar"]


# ---------------------------------------------------------------- parsing

M = TypeVar("M", bound=BaseModel)


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
