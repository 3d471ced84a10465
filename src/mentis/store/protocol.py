"""The Store protocol every backend implements, and the records it passes back.

A store persists ledger entries, their bodies and the tables derived from them; it knows
nothing of validation or scopes (those live in ``mentis.service``). Its questions are asked in
terms, not SQL: query words for lexical search, a :class:`ThoughtQuery` for filtering thoughts.
Its reads answer in typed records: each body is parsed once, in the store, right after its bytes
were checked against the hash its ledger entry holds (:class:`Stored`, :class:`StoredAttempt`).
Conformance expectations:

- ``append_*`` runs in one transaction that includes the ledger entry; concurrent writers
  (threads or processes) never lose, duplicate or fork an entry. ``append_attempts`` appends its
  rows in order in one transaction, after checking every row: a bad row writes nothing.
- every read that returns content returns it from a body whose hash was checked;
- ``verify`` checks every chain (DESIGN §3) and raises at the first failure; ``verify_chains``
  checks each chain on its own and notes those that fail in ``damaged``; ``open`` runs it: a
  damaged repository chain is refused (every append to it raises, naming it), the others are
  served, and a store whose agent registry or whole ledger fails refuses to open;
- ``rebuild`` regenerates every derived table from the ledger alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import numpy as np

from mentis.errors import IntegrityError
from mentis.ledger.bodies import (
    AgentEventBody,
    AttemptBody,
    Body,
    CorrectionBody,
    EntityTypeBody,
    SkillStatusBody,
    SkillVersionBody,
    ThoughtBody,
    TombstoneBody,
    VisibilityBody,
)
from mentis.ledger.branches import BranchGraph, ConflictBody
from mentis.ledger.chain import ChainReport
from mentis.ledger.entry import Entry
from mentis.ledger.registry import Registry
from mentis.store.seal import Seal

BodyT = TypeVar("BodyT", bound=Body)


class Stored(NamedTuple, Generic[BodyT]):
    """A ledger entry and its body, parsed once after its bytes matched the entry's ``body_hash``."""

    entry: Entry
    body: BodyT


StoredThought = Stored[ThoughtBody]
StoredSkillVersion = Stored[SkillVersionBody]
StoredSkillStatus = Stored[SkillStatusBody]
StoredTombstone = Stored[TombstoneBody]


@dataclass(frozen=True, slots=True)
class StoredAttempt:
    """An attempt's checked body with its corrections' (oldest first), and its ledger rowid."""

    rowid: int
    entry: Entry
    body: AttemptBody
    corrections: list[CorrectionBody]


@dataclass(frozen=True, slots=True)
class RejectionRow:
    """The fingerprint of a rejected conclusion: who rejected what, when, and its text's vector."""

    by_rowid: int
    by_id: str
    target_id: str
    target_kind: str
    at: str
    norm_hash: str
    vector: np.ndarray


class AttemptRow(NamedTuple):
    """One attempt for :meth:`Store.append_attempts`: its body and its vector."""

    body: AttemptBody
    vector: np.ndarray


class SkillVersionRow(NamedTuple):
    """One skill version for :meth:`Store.append_skill_versions`: its body, the version's whole
    text (which the lexical index takes) and its vector."""

    body: SkillVersionBody
    content: str
    vector: np.ndarray


@dataclass(frozen=True, slots=True)
class SkillRow:
    """What the skill index knows of a live skill: keys, status and its newest version."""

    repository: str
    skill_id: str
    rowid: int
    status: str
    version: int
    content_hash: str


@dataclass(frozen=True, slots=True)
class ThoughtQuery:
    """Which thoughts :meth:`Store.filter_thoughts` keeps: every given condition holds.

    ``repositories`` None means every repository (an empty tuple: none); ``as_of`` keeps the
    thoughts recorded by then; ``tags``/``concepts`` keep a thought holding any one of them.
    """

    as_of: str | None = None
    repositories: Sequence[str] | None = None
    scopes: Sequence[str] | None = None
    """Scope keys (``mentis.ledger.bodies.scope_key``) the thoughts must have (None: any)."""
    types: Sequence[str] = ()
    roles: Sequence[str] = ()
    agents: Sequence[str] = ()
    tags: Sequence[str] = ()
    concepts: Sequence[str] = ()
    since: str | None = None
    until: str | None = None
    min_importance: float | None = None
    min_confidence: float | None = None
    task_id: str | None = None
    entity_types: Sequence[str] = ()
    """Keep a thought about any one of these entity types."""
    source_session: str | None = None
    """Keep a thought whose source episode is of this session."""


TASK_STATUSES = ("passed", "failed", "unverified", "outdated")
"""The statuses a browsed task may be filtered by (``outdated``: one of its attempts has a correction)."""


@dataclass(frozen=True, slots=True)
class RepositoryRow:
    """A repository (chain) as the dashboard lists it: its head, newest entry time and live counts."""

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
    """A task as the dashboard lists it: its attempts counted by status, and its newest attempt."""

    task_id: str
    attempts: int
    passed: int
    failed: int
    unverified: int
    outdated: int
    last_rowid: int


SqlParams = Mapping[str, str | int | float | bool | None]
"""The named parameters of one ``recall`` statement."""


class WebhookRow(NamedTuple):
    """One webhook subscription (``mentis.store.shared.webhooks``)."""

    id: str
    url: str
    events: tuple[str, ...]
    repository: str | None
    status: str | None
    thought_type: str | None
    mode: str
    token_id: str
    secret: str
    created_at: str
    created_by: str


class DeliveryRow(NamedTuple):
    """One outbox row: a ledger entry to deliver to one subscription, and how that went."""

    id: str
    webhook_id: str
    event: str
    chain: str
    entry_rowid: int
    record_id: str
    at: str
    state: str
    attempts: int
    next_at: float
    last_error: str | None
    last_status: int | None
    created: float
    delivered_at: float | None


@dataclass(frozen=True, slots=True)
class SqlResult:
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    truncation_reason: str | None


Embed = Callable[[Sequence[str]], np.ndarray]
"""Embeds texts; checked for shape and finiteness by the service that passes it."""


@dataclass(frozen=True)
class ProposalRow:
    id: str
    content_key: str
    kind: str
    repository: str
    body: str
    """The proposed record's fields, as JSON."""
    source: str
    """Where it came from (the source episode), as JSON."""
    status: str
    reason: str | None
    proposed_at: str
    proposed_by: str
    decided_at: str | None
    decided_by: str | None
    record_id: str | None


class Store(Protocol):
    """What the service needs of a backend; SqliteStore and PostgresStore both satisfy it (mypy
    checks that where the service is built) and both pass ``tests/conformance``."""

    path: str
    damaged: dict[str, IntegrityError]

    def warm(self) -> None: ...
    # webhook subscriptions and their outbox (mentis.store.shared.webhooks), outside the ledger
    def webhook_insert(self, row: WebhookRow) -> None: ...
    def webhook_rows(self, webhook_id: str | None = None) -> list[WebhookRow]: ...
    def webhook_delete(self, webhook_id: str) -> bool: ...
    def outbox_rows(self, webhook_id: str | None, state: str | None, limit: int) -> list[DeliveryRow]: ...
    def outbox_due(self, now: float) -> bool: ...
    def outbox_claim(self, now: float, lease_s: float, limit: int) -> list[DeliveryRow]: ...
    def outbox_settle(
        self, delivery_id: str, state: str, next_at: float, error: str | None, status: int | None
    ) -> None: ...
    def outbox_redeliver(self, delivery_id: str) -> DeliveryRow | None: ...
    def outbox_prune(self, before: float) -> int: ...
    def outbox_entry(self, rowid: int) -> tuple[Entry, bytes | None]: ...
    # writes: each takes the typed body, and the seal that says how its entries are made
    def append_attempt(self, body: AttemptBody, vector: np.ndarray, seal: Seal) -> Entry: ...
    def append_attempts(self, rows: Sequence[AttemptRow], seal: Seal) -> list[Entry]: ...
    def append_correction(
        self, body: CorrectionBody, conclusion: np.ndarray, seal: Seal
    ) -> tuple[Entry, int]: ...
    def append_thought(self, body: ThoughtBody, vector: np.ndarray, seal: Seal) -> Entry: ...
    def forget_attempt(
        self, chain: str, attempt_id: str, reason: str | None, agent: str, seal: Seal
    ) -> Entry: ...
    def forget_thought(
        self, chain: str, thought_id: str, reason: str | None, agent: str, seal: Seal
    ) -> Entry: ...
    def append_agent_event(self, body: AgentEventBody, seal: Seal) -> tuple[Entry, Registry]: ...
    # skills (mentis.store.shared.skills, shared by both backends)
    def append_skill_versions(self, rows: Sequence[SkillVersionRow], seal: Seal) -> list[Entry]: ...
    def append_skill_status(self, body: SkillStatusBody, seal: Seal) -> Entry: ...
    def append_checkpoint(self, body: bytes, at: str, agent: str, seal: Seal) -> Entry: ...
    # branch and merge chains (mentis.store.shared.branches)
    def branch_graph(self) -> BranchGraph: ...
    def chain_entries(
        self, chain: str, after_seq: int, kinds: tuple[str, ...]
    ) -> list[tuple[Entry, bytes]]: ...
    def record_bodies(self, ids: list[str]) -> dict[str, tuple[Entry, bytes]]: ...
    def entry_positions(self, rowids: list[int]) -> dict[int, tuple[str, int]]: ...
    def append_branch(
        self, root: str, branch: str, parent: str, fork: tuple[int, str | None] | None, agent: str, seal: Seal
    ) -> tuple[Entry, Entry]: ...
    def append_merge(
        self,
        source: str,
        target: str,
        source_head: tuple[int, str],
        conflicts: list[ConflictBody],
        agent: str,
        seal: Seal,
    ) -> Entry: ...

    def append_entity_type(self, body: EntityTypeBody, seal: Seal) -> Entry: ...

    def entity_types(self) -> list[Stored[EntityTypeBody]]: ...

    def entity_type_known(self, name: str) -> bool: ...
    def chain_heads(self) -> dict[str, tuple[int, str]]: ...
    def entry_hashes(self, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], str]: ...
    def delete_skill(
        self, chain: str, skill_id: str, reason: str | None, agent: str, seal: Seal
    ) -> Entry: ...
    def skill_row(self, repository: str, skill_id: str) -> SkillRow | None: ...
    def skill_rows(self, repositories: Sequence[str] | None, statuses: Sequence[str]) -> list[SkillRow]: ...
    def skill_rows_at(self, rowids: Sequence[int]) -> dict[int, SkillRow]: ...
    def skill_history(self, repository: str, skill_id: str) -> list[StoredSkillVersion]: ...
    def load_skill_versions(self, rowids: Sequence[int]) -> dict[int, StoredSkillVersion]: ...
    def skill_revocation(
        self, repository: str, skill_id: str, instructions: str | None = None
    ) -> StoredSkillStatus | None: ...
    def revoked_copies(self, content_hash: str, instructions: str | None) -> list[tuple[str, str]]: ...
    def skill_lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]: ...
    def skill_vector(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]: ...
    def attempt_conclusion_text(self, repository: str, attempt_id: str) -> str | None: ...
    def attempt_edges(
        self, seeds: Sequence[int], repositories: Sequence[str] | None, per_seed: int
    ) -> list[tuple[int, int, float]]: ...
    def attempt_keys(self, rowids: Sequence[int]) -> dict[int, tuple[str, str, str]]: ...
    def close(self) -> None: ...
    def filter_thoughts(self, rowids: Sequence[int] | None, query: ThoughtQuery, limit: int) -> list[int]: ...
    def task_thoughts(
        self, keys: Sequence[tuple[str, str]], role: str
    ) -> dict[tuple[str, str], list[int]]: ...
    def find_attempt(self, attempt_id: str) -> tuple[str, bool] | None: ...
    def find_records(self, ids: Iterable[str]) -> dict[str, tuple[str, str]]: ...
    def get_meta(self, key: str) -> str | None: ...
    def has_rejections(self, repository: str) -> bool: ...
    def import_ledger(self, items: Sequence[tuple[Entry, bytes | None]], embed: Embed) -> int: ...
    def invalidations(self, ids: Sequence[str], as_of: str) -> dict[str, list[str]]: ...
    def iter_ledger(self) -> Iterator[tuple[Entry, bytes | None]]: ...
    def lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]: ...
    def load_attempts(self, rowids: Sequence[int]) -> dict[int, StoredAttempt]: ...
    def load_thoughts(self, rowids: Sequence[int]) -> dict[int, StoredThought]: ...
    def rebuild(self, embed: Embed, progress: Callable[[int], None] | None = None) -> int: ...
    def recent_thought_vectors(self, repository: str, n: int) -> tuple[list[str], np.ndarray]: ...
    def rejection_reason(self, by_rowid: int) -> str: ...
    def rejections(self, repository: str) -> list[RejectionRow]: ...
    def repositories(self) -> list[str]: ...
    def record_scope(
        self, repository: str, record_id: str
    ) -> tuple[str, AttemptBody | ThoughtBody, str] | None: ...
    def record_scopes(self, record_ids: Sequence[str]) -> dict[str, str]: ...
    def append_visibility(self, body: VisibilityBody, vector: np.ndarray, seal: Seal) -> Entry: ...
    def scopes(self, repository: str | None = None) -> list[str]: ...
    def run_sql(
        self,
        sql: str,
        params: SqlParams | None,
        *,
        visible: Callable[[str], bool],
        max_rows: int,
        max_bytes: int,
        timeout_s: float,
    ) -> SqlResult: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def task_history(
        self, repository: str, task_id: str, scopes: Sequence[str] | None = None
    ) -> list[StoredAttempt]: ...
    def task_info(
        self, keys: Sequence[tuple[str, str]], scopes: Sequence[str] | None = None
    ) -> dict[tuple[str, str], tuple[str | None, int]]: ...
    def title_lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]: ...
    def window_lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]: ...
    def thought_edges(
        self, ids: Sequence[str], direction: str, kinds: Sequence[str] | None
    ) -> list[tuple[str, str, str]]: ...
    def thought_edges_between(
        self, seeds: Sequence[int], repositories: Sequence[str] | None, per_seed: int, fanout: int = 200
    ) -> list[tuple[int, int, float]]: ...
    def thought_lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]: ...
    def thought_rowid_at(self, chain: str | None, seq: int | None, hash_: str | None) -> int | None: ...
    def thought_rowids(self, ids: Sequence[str]) -> dict[str, int]: ...
    def thought_vector(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]: ...
    def vector(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]: ...
    def verify(self, signatures: bool = False) -> list[ChainReport]: ...
    def verify_chains(self, signatures: bool = False) -> list[ChainReport]: ...
    def agent_registry(self) -> Registry: ...
    def agent_key(self, key_id: str) -> tuple[str, str, str, str | None] | None: ...
    def counts(self) -> dict[str, int]: ...
    def ledger_summary(self, scopes: Sequence[str] | None = None) -> list[tuple[str, str, int, str]]: ...
    def size_bytes(self) -> int: ...
    # reads for browsing (mentis.store.shared.browse, shared by both backends)
    def repository_rows(self, scopes: Sequence[str] | None = None) -> list[RepositoryRow]: ...
    def task_rows(
        self,
        repository: str,
        status: str | None,
        agent: str | None,
        offset: int,
        limit: int,
        scopes: Sequence[str] | None = None,
    ) -> tuple[int, list[TaskRow], dict[int, str]]: ...
    def attempt_agents(self, repository: str, scopes: Sequence[str] | None = None) -> list[str]: ...
    def tombstones(self, repository: str) -> list[StoredTombstone]: ...
    def add_proposals(self, rows: Sequence[ProposalRow]) -> list[tuple[ProposalRow, bool]]: ...
    def proposal(self, proposal_id: str) -> ProposalRow | None: ...
    def proposals(self, status: str | None, repository: str | None) -> list[ProposalRow]: ...
    def pending_by_repository(self) -> dict[str, int]: ...
    def decide_proposal(
        self,
        proposal_id: str,
        *,
        status: str,
        by: str | None,
        at: str | None,
        reason: str | None = None,
        record_id: str | None = None,
        was: str = "pending",
    ) -> bool: ...
