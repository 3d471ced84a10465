"""The bodies the ledger holds (DESIGN §1-2) as types: attempt, correction, thought, tombstone.

A body is the JSON object whose canonical bytes an entry's ``body_hash`` covers. Each type reads
one (``from_json``, or ``parse`` from bytes) and writes one (``to_json``): a field that is None is
absent from the object, except a tombstone's ``reason``, which is written as null. So for every
body Mentis writes, ``canonical(T.from_json(body).to_json()) == canonical(body)``. Keys a type
does not know (a hand-made import may carry them) are dropped on reading, so a body read back is
never written again: the stores keep the bytes they were given.

Each type carries the facts derived from its body, so the service, both stores and the recall
views apply one rule: an attempt's ``status``, a record's ``conclusion`` and ``embed_text``, and
what the lexical index (``index_fields``) and label tables (``labels``) take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, NamedTuple, Self

import orjson

from mentis.errors import IntegrityError
from mentis.ledger.links import entity_type_name

# ---------------------------------------------------------------- vocabularies

THOUGHT_TYPES = (
    *("Finding", "Insight", "FactLearned", "PatternDetected", "Hypothesis", "Mistake", "Correction"),
    *("LessonLearned", "AssumptionInvalidated", "Constraint", "Plan", "Subgoal", "Decision"),
    *("StrategyShift", "Wonder", "Question", "Idea", "Experiment", "ActionTaken", "TaskComplete"),
    *("Checkpoint", "StateSnapshot", "Handoff", "Summary", "Surprise", "Reframe", "Goal"),
    *("PreferenceUpdate", "UserTrait", "RelationshipUpdate", "LLMExtracted"),
)
THOUGHT_ROLES = (
    *("Memory", "WorkingMemory", "Summary", "Compression", "Checkpoint", "Handoff", "Audit"),
    "Retrospective",
)
RELATION_KINDS = (
    *("References", "Summarizes", "Corrects", "Invalidates", "CausedBy", "Supports", "Contradicts"),
    *("DerivedFrom", "ContinuesFrom", "BranchesFrom", "RelatedTo", "Supersedes"),
)
INVALIDATING_KINDS = frozenset({"Supersedes", "Corrects", "Invalidates"})
"""Relations whose target is left out of default reads."""
REJECTING_KINDS = frozenset({"Corrects", "Invalidates"})
"""Relations that reject the target's content (a fingerprint is kept; see memory.rejections)."""

AttemptStatus = Literal["passed", "failed", "unverified"]
UNVERIFIED: AttemptStatus = "unverified"
"""The status of an attempt that ran no check."""

FTS_WEIGHTS = (3.0, 1.0, 1.0, 0.5, 1.5, 1.0)
"""BM25 field weights for an attempt's title, action, observation, inference, files, tags. They
are applied when a record is indexed: changing them needs ``mentis rebuild``."""
THOUGHT_FTS_WEIGHTS = (1.0, 0.5, 0.5, 0.2)
"""BM25 field weights for a thought's content, tags, concepts and type."""
EMBED_FIELDS = ("task_title", "action", "observation", "inference")
"""The attempt fields its vector is computed from, in order (the model truncates at 256 tokens)."""


VISIBILITIES = ("repository", "agent", "session")
"""Who may read a record (DESIGN §2, issue 26): every reader of its repository (the default,
absent from the body), only its writing agent (and admins), or only that agent in the same session."""
SCOPE_SEP = "\x1f"
"""Separates the parts of a private record's scope key (identifiers hold no control characters)."""


def scope_key(repository: str, visibility: str | None, agent_id: str, session_id: str | None) -> str:
    """The partition a record's derived rows are kept and searched in: its repository for a
    record every reader of it sees, else the repository with the agent (and the session) that
    may read it. A reader's search takes candidates and every statistic from the keys it may read."""
    if visibility in (None, "repository"):
        return repository
    if visibility == "agent":
        return SCOPE_SEP.join((repository, "agent", agent_id))
    return SCOPE_SEP.join((repository, "session", agent_id, session_id or ""))


def visibility_of(repository: str, scope: str) -> str:
    """The visibility a scope key of ``repository`` stands for (the inverse of :func:`scope_key`)."""
    if scope == repository:
        return "repository"
    return scope.split(SCOPE_SEP)[1]


def widens(visibility: str, than: str) -> bool:
    """Whether ``visibility`` lets more readers in than ``than`` (repository ⊃ agent ⊃ session)."""
    return VISIBILITIES.index(visibility) < VISIBILITIES.index(than)


def _check_visibility(value: str | None) -> None:
    if value is not None and value not in VISIBILITIES:
        raise IntegrityError(f"a ledger body has an unknown visibility {value!r}")


def status_sql(check_status: str) -> str:
    """The status rule in a recall view's SQL: ``check_status`` is the dialect's expression for
    the body's ``check.status``."""
    return f"coalesce({check_status}, '{UNVERIFIED}')"


def attempt_text(body: Mapping[str, Any]) -> str:
    """What an attempt's vector is computed from, for a body (or a record_attempt input) as a
    mapping; :attr:`AttemptBody.embed_text` for a typed one."""
    return _embedded(body.get(f) for f in EMBED_FIELDS)


def _embedded(parts: Iterable[str | None]) -> str:
    """The embedded text of an attempt: its non-empty ``EMBED_FIELDS``, one per line."""
    return "\n".join(p for p in parts if p)


class IndexFields(NamedTuple):
    """What a record gives the lexical index: its fields' texts and their BM25 weights."""

    texts: tuple[str, ...]
    weights: tuple[float, ...]


# ---------------------------------------------------------------- the body types


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type[Body]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


@dataclass(frozen=True, slots=True, kw_only=True)
class Body:
    """A JSON object hashed into the ledger: None fields are absent, nested bodies nest."""

    KEEP_NULL: ClassVar[frozenset[str]] = frozenset()
    """Fields written as null rather than left out when None."""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        return cls._make(obj)

    @classmethod
    def parse(cls, raw: bytes | bytearray | memoryview | str) -> Self:
        """A body from its stored JSON bytes."""
        return cls.from_json(orjson.loads(raw))

    @classmethod
    def _make(cls, obj: Mapping[str, Any], **nested: Any) -> Self:
        values = {**obj, **nested}
        try:
            return cls(**values)
        except TypeError:
            names = _field_names(cls)
            known = {k: v for k, v in values.items() if k in names}
            try:
                return cls(**known)
            except TypeError as exc:
                raise IntegrityError(f"a ledger body does not hold {cls.__name__}: {exc}") from None

    def to_json(self) -> dict[str, Any]:
        """The object whose canonical bytes are hashed."""
        out: dict[str, Any] = {}
        for name in _field_names(type(self)):
            value = getattr(self, name)
            if value is None:
                if name in self.KEEP_NULL:
                    out[name] = None
            elif isinstance(value, Body):
                out[name] = value.to_json()
            elif isinstance(value, list) and value and isinstance(value[0], Body):
                out[name] = [v.to_json() for v in value]
            else:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckBody(Body):
    """The check an attempt ran."""

    command: str
    status: Literal["passed", "failed"]
    exit_code: int | None = None
    output: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CodeContextBody(Body):
    """Where an attempt ran."""

    commit: str | None = None
    branch: str | None = None
    dirty: bool | None = None
    file_hashes: dict[str, str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptBody(Body):
    """What an agent tried on a task; its own fields never change (corrections are separate)."""

    attempt_id: str
    repository: str
    task_id: str
    agent_id: str
    created_at: str
    action: str
    observation: str
    files: list[str]
    tags: list[str]
    task_title: str | None = None
    session_id: str | None = None
    inference: str | None = None
    code_context: CodeContextBody | None = None
    check: CheckBody | None = None
    reasserts: list[dict[str, Any]] | None = None
    """Earlier rejected conclusions it seemed to re-assert when written (without their reasons)."""
    visibility: str | None = None
    """``agent`` or ``session`` for a private attempt (absent: every reader of the repository)."""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        check, ctx = obj.get("check"), obj.get("code_context")
        _check_visibility(obj.get("visibility"))
        return cls._make(
            obj,
            check=None if check is None else CheckBody.from_json(check),
            code_context=None if ctx is None else CodeContextBody.from_json(ctx),
        )

    @property
    def scope(self) -> str:
        """Its scope key as written (:func:`scope_key`)."""
        return scope_key(self.repository, self.visibility, self.agent_id, self.session_id)

    @property
    def status(self) -> AttemptStatus:
        """The check's status, else unverified (``status_sql`` is the same rule in SQL)."""
        return UNVERIFIED if self.check is None else self.check.status

    @property
    def conclusion(self) -> str:
        """Its inference when it drew one, else its observation."""
        return self.inference or self.observation

    @property
    def embed_text(self) -> str:
        return _embedded(getattr(self, f) for f in EMBED_FIELDS)

    @property
    def index_fields(self) -> IndexFields:
        """Title, action, observation, inference, files and tags, weighted by ``FTS_WEIGHTS``."""
        texts = (self.task_title or "", self.action, self.observation, self.inference or "")
        return IndexFields((*texts, " ".join(self.files), " ".join(self.tags)), FTS_WEIGHTS)

    @property
    def labels(self) -> list[tuple[str, str]]:
        """(kind, label) rows that link attempts in the graph: each file and tag."""
        return [("file", f) for f in self.files] + [("tag", t) for t in self.tags]

    @property
    def commit(self) -> str | None:
        return None if self.code_context is None else self.code_context.commit

    def stale_files(self, current: Mapping[str, str]) -> list[str] | None:
        """The recorded files whose hash differs from ``current`` (paths it lacks are not
        compared); None when the attempt recorded no file hashes."""
        hashes = None if self.code_context is None else self.code_context.file_hashes
        if not hashes:
            return None
        return sorted(p for p, h in hashes.items() if p in current and current[p] != h)


@dataclass(frozen=True, slots=True, kw_only=True)
class CorrectionBody(Body):
    """A mark that an attempt's conclusion is outdated; every correction is kept."""

    attempt_id: str
    repository: str
    reason: str
    at: str
    agent_id: str
    latest_commit: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RelationBody(Body):
    kind: str
    target_id: str
    valid_at: str | None = None
    invalid_at: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeBody(Body):
    """Where a record came from (issue 27, provenance): a transcript (a file path, or another name
    of where the session's turns are kept), its session, and the lines or turns (1-based,
    inclusive) — the shape of a review proposal's source (``mentis.api.review.SourceEpisode``)."""

    transcript: str
    session_id: str
    from_line: int
    to_line: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ThoughtBody(Body):
    """Typed memory; ``importance`` and ``confidence`` are decimal strings (no floats are hashed)."""

    thought_id: str
    repository: str
    type: str
    role: str
    content: str
    importance: str
    agent_id: str
    created_at: str
    tags: list[str]
    concepts: list[str]
    refs: list[str]
    relations: list[RelationBody]
    confidence: str | None = None
    task_id: str | None = None
    session_id: str | None = None
    reasserts: list[dict[str, Any]] | None = None
    visibility: str | None = None
    """``agent`` or ``session`` for a private thought (absent: every reader of the repository)."""
    source_episode: EpisodeBody | None = None
    """The transcript, session and lines it came from (absent: not said)."""
    entity_type: str | None = None
    """What it is about: a name of the entity-type registry (``mentis.ledger.entity_types``)."""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        relations = [RelationBody.from_json(r) for r in obj.get("relations", ())]
        _check_visibility(obj.get("visibility"))
        episode = obj.get("source_episode")
        if episode is not None and not isinstance(episode, Mapping):
            raise IntegrityError("a thought body's source_episode is not an object")
        if obj.get("entity_type") is not None and not entity_type_name(obj["entity_type"]):
            raise IntegrityError(f"a thought body has an invalid entity_type {obj['entity_type']!r}")
        return cls._make(
            obj,
            relations=relations,
            source_episode=None if episode is None else EpisodeBody.from_json(episode),
        )

    @property
    def scope(self) -> str:
        """Its scope key as written (:func:`scope_key`)."""
        return scope_key(self.repository, self.visibility, self.agent_id, self.session_id)

    @property
    def conclusion(self) -> str:
        """What a Corrects or Invalidates relation rejects: the content."""
        return self.content

    @property
    def embed_text(self) -> str:
        return self.content

    @property
    def index_fields(self) -> IndexFields:
        """Content, tags, concepts and type, weighted by ``THOUGHT_FTS_WEIGHTS``."""
        texts = (self.content, " ".join(self.tags), " ".join(self.concepts), self.type)
        return IndexFields(texts, THOUGHT_FTS_WEIGHTS)

    @property
    def labels(self) -> list[tuple[str, str]]:
        """(kind, label) rows the thought filters and graph use: each tag and concept, its entity
        type and its source episode's session (the graph links shared labels, concepts weighing most)."""
        out = [("tag", t) for t in self.tags] + [("concept", c) for c in self.concepts]
        if self.entity_type is not None:
            out.append(("entity_type", self.entity_type))
        if self.source_episode is not None:
            out.append(("source_session", self.source_episode.session_id))
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class VisibilityBody(Body):
    """A ``visibility`` entry's body: a private attempt or thought of this chain made readable to
    a wider scope (``publish``) by its writer or an admin. A scope is only ever widened: an entry
    that would narrow one changes nothing (and the service refuses to write it)."""

    record_id: str
    repository: str
    visibility: str
    at: str
    agent_id: str

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        if obj.get("visibility") not in VISIBILITIES:
            raise IntegrityError(f"a visibility entry names an unknown visibility {obj.get('visibility')!r}")
        return cls._make(obj)


@dataclass(frozen=True, slots=True, kw_only=True)
class TombstoneBody(Body):
    """A forget entry's body: who erased which record, when and why, and the seqs it erased."""

    KEEP_NULL: ClassVar[frozenset[str]] = frozenset({"reason"})

    repository: str
    erased: list[int]
    agent_id: str
    at: str
    reason: str | None = None
    attempt_id: str | None = None
    thought_id: str | None = None
    skill_id: str | None = None
    version_id: str | None = None
    """A skill's tombstone names its newest version (the ledger checks it is one of that skill)."""
    version: int | None = None
    task_id: str | None = None
    """An attempt's tombstone names its task, so a task's timeline can show the gap."""


def tombstone(
    record: Literal["attempt", "thought", "skill"],
    record_id: str,
    chain: str,
    erased: list[int],
    reason: str | None,
    agent: str,
    at: str,
    task_id: str | None = None,
    *,
    version_id: str | None = None,
    version: int | None = None,
) -> TombstoneBody:
    """The tombstone that forgetting ``record_id`` (an attempt, a thought or a skill) appends:
    ``erased`` lists the seqs whose bodies go with it (an attempt's own and its corrections', every
    version of a skill; a skill's tombstone also names its newest version)."""
    ids = {f"{record}_id": record_id}
    return TombstoneBody(
        **ids,
        repository=chain,
        erased=erased,
        reason=reason,
        agent_id=agent,
        at=at,
        task_id=task_id,
        version_id=version_id,
        version=version,
    )


# ---------------------------------------------------------------- skills

SKILL_FTS_WEIGHTS = (3.0, 2.0, 1.0, 1.5, 0.5)
"""BM25 field weights for a skill's name, description, tags, triggers and text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillVersionBody(Body):
    """One version of a skill: the first stored whole (``content``), each later one as a unified
    diff (``diff``) against the version before it (``base_id``); ``content_hash`` is the sha256 of
    the version's whole text, checked whenever it is reconstructed. The metadata read from the
    text (name, description, tags, triggers, warnings) is kept whole in every version."""

    version_id: str
    repository: str
    skill_id: str
    version: int
    name: str
    description: str
    format: str
    content_hash: str
    agent_id: str
    created_at: str
    tags: list[str]
    triggers: list[str]
    warnings: list[str]
    content: str | None = None
    diff: str | None = None
    base_id: str | None = None

    @property
    def embed_text(self) -> str:
        return _embedded((self.name.replace("-", " "), self.description, *self.triggers))

    def index_fields(self, text: str) -> IndexFields:
        """Name, description, tags, triggers and the version's whole ``text``."""
        texts = (self.name.replace("-", " "), self.description, " ".join(self.tags), " ".join(self.triggers))
        return IndexFields((*texts, text), SKILL_FTS_WEIGHTS)


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillStatusBody(Body):
    """A skill deprecated or revoked, at its version ``version`` (``version_id``). A revocation
    lists the content hash of every version it revokes, so the same text uploaded under another
    id is recognised, and (since security issue 24; absent from older bodies) the distinct
    instruction hashes of those versions (``skill_text.instructions_hash``), so a renamed or
    reformatted copy is too."""

    KEEP_NULL: ClassVar[frozenset[str]] = frozenset({"reason"})

    repository: str
    skill_id: str
    op: str
    version_id: str
    version: int
    content_hashes: list[str]
    agent_id: str
    at: str
    reason: str | None = None
    instructions_hashes: list[str] | None = None


# ---------------------------------------------------------------- the agent registry


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentEventBody(Body):
    """One event of the agent registry's chain (the fields each ``op`` has are listed in
    :mod:`mentis.ledger.registry`, whose :meth:`~mentis.ledger.registry.Registry.apply` checks
    them). ``at`` is set by the store as it appends (the write's planned time, else its clock
    once it holds the registry's lock)."""

    op: str
    agent_id: str
    by: str
    at: str = ""
    display_name: str | None = None
    description: str | None = None
    aliases: list[str] | None = None
    key_id: str | None = None
    public_key: str | None = None
    reason: str | None = None


# ---------------------------------------------------------------- the entity-type registry


@dataclass(frozen=True, slots=True, kw_only=True)
class EntityTypeBody(Body):
    """One upsert of the entity-type registry's chain (:data:`mentis.ledger.links.ENTITY_TYPES_CHAIN`):
    the type ``name`` is registered, or its description replaced, by ``by`` at ``at``. The newest
    upsert of a name is its description."""

    name: str
    description: str
    by: str
    at: str

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Self:
        if not entity_type_name(obj.get("name")):
            raise IntegrityError(f"an entity_type body names an invalid type {obj.get('name')!r}")
        return cls._make(obj)
