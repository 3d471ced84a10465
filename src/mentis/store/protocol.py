"""The Store protocol every backend implements, and the records it passes back.

A store persists ledger entries, their bodies and the tables derived from them; it knows
nothing of validation or scopes (those live in ``memory.py``). Its questions are asked in terms,
not SQL: query words for lexical search, a :class:`ThoughtQuery` for filtering thoughts.
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

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
import orjson

from mentis.errors import IntegrityError
from mentis.ledger.bodies import (
    AgentEventBody,
    AttemptBody,
    CorrectionBody,
    SkillStatusBody,
    SkillVersionBody,
    ThoughtBody,
)
from mentis.ledger.chain import ChainReport, Entry
from mentis.ledger.registry import Registry
from mentis.store.seal import Seal

if TYPE_CHECKING:
    from mentis.store.shared.browse import RepositoryRow, TaskRow


@dataclass(frozen=True, slots=True)
class StoredAttempt:
    """An attempt's verified body plus what the index knows of it."""

    rowid: int
    entry: Entry
    body: dict[str, Any]
    corrections: list[dict[str, Any]]


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


@dataclass(frozen=True, slots=True)
class SqlResult:
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    truncation_reason: str | None


Embed = Callable[[Sequence[str]], np.ndarray]
"""Embeds texts; checked for shape and finiteness by the service that passes it."""


class Store(Protocol):
    """What the service needs of a backend; SqliteStore and PostgresStore both satisfy it (mypy
    checks that where the service is built) and both pass ``tests/conformance``."""

    path: str
    damaged: dict[str, IntegrityError]

    def warm(self) -> None: ...
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
    def delete_skill(
        self, chain: str, skill_id: str, reason: str | None, agent: str, seal: Seal
    ) -> Entry: ...
    def skill_row(self, repository: str, skill_id: str) -> SkillRow | None: ...
    def skill_rows(self, repositories: Sequence[str] | None, statuses: Sequence[str]) -> list[SkillRow]: ...
    def skill_rows_at(self, rowids: Sequence[int]) -> dict[int, SkillRow]: ...
    def skill_history(self, repository: str, skill_id: str) -> list[tuple[Entry, dict[str, Any]]]: ...
    def load_skill_versions(self, rowids: Sequence[int]) -> dict[int, tuple[Entry, dict[str, Any]]]: ...
    def skill_revocation(
        self, repository: str, skill_id: str, instructions: str | None = None
    ) -> tuple[Entry, dict[str, Any]] | None: ...
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
    def load_thoughts(self, rowids: Sequence[int]) -> dict[int, tuple[Entry, dict[str, Any]]]: ...
    def rebuild(self, embed: Embed, progress: Callable[[int], None] | None = None) -> int: ...
    def recent_thought_vectors(self, repository: str, n: int) -> tuple[list[str], np.ndarray]: ...
    def rejection_reason(self, by_rowid: int) -> str: ...
    def rejections(self, repository: str) -> list[RejectionRow]: ...
    def repositories(self) -> list[str]: ...
    def run_sql(
        self,
        sql: str,
        params: dict[str, Any] | None,
        *,
        visible: Callable[[str], bool],
        max_rows: int,
        max_bytes: int,
        timeout_s: float,
    ) -> SqlResult: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def task_history(self, repository: str, task_id: str) -> list[StoredAttempt]: ...
    def task_info(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[str | None, int]]: ...
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
    def ledger_summary(self) -> list[tuple[str, str, int, str]]: ...
    def size_bytes(self) -> int: ...
    # reads for browsing (mentis.store.shared.browse, shared by both backends)
    def repository_rows(self) -> list[RepositoryRow]: ...
    def task_rows(
        self, repository: str, status: str | None, agent: str | None, offset: int, limit: int
    ) -> tuple[int, list[TaskRow], dict[int, str]]: ...
    def attempt_agents(self, repository: str) -> list[str]: ...
    def tombstones(self, repository: str) -> list[tuple[Entry, dict[str, Any]]]: ...


REPLAY_BATCH = 128


def replay(
    placed: Sequence[tuple[int, Entry, bytes | None]],
    embed: Embed,
    progress: Callable[[int], None] | None,
    *,
    attempt: Callable[[int, AttemptBody, np.ndarray], None],
    thought: Callable[[int, ThoughtBody, np.ndarray], None],
    correction: Callable[[int, dict[str, Any]], None],
    forget: Callable[[int, dict[str, Any]], None],
    skill: Callable[[int, dict[str, Any]], None] | None = None,
    skill_status: Callable[[int, dict[str, Any]], None] | None = None,
) -> None:
    """Derive tables from ledger entries in order, for rebuild and import on every backend.

    Attempts and thoughts are embedded in batches; a correction, forget or skill entry first
    flushes the batch so it sees every entry before it (skill versions embed themselves).
    Entries whose body was erased derive nothing.
    """
    batch: list[tuple[int, AttemptBody | ThoughtBody]] = []

    def flush() -> None:
        if batch:
            for (rowid, record), vec in zip(batch, embed([r.embed_text for _, r in batch]), strict=True):
                if isinstance(record, AttemptBody):
                    attempt(rowid, record, vec)
                else:
                    thought(rowid, record, vec)
            if progress is not None:
                progress(len(batch))
            batch.clear()

    for rowid, entry, raw in placed:
        if raw is None:
            continue
        if entry.kind in ("attempt", "thought"):
            batch.append((rowid, (AttemptBody if entry.kind == "attempt" else ThoughtBody).parse(raw)))
            if len(batch) >= REPLAY_BATCH:
                flush()
            continue
        flush()
        body = orjson.loads(raw)
        if entry.kind == "correction":
            correction(rowid, body)
        elif entry.kind == "forget":
            forget(rowid, body)
        elif entry.kind == "skill" and skill is not None:
            skill(rowid, body)
        elif entry.kind == "skill_status" and skill_status is not None:
            skill_status(rowid, body)
    flush()
