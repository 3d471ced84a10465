"""The Store protocol every backend implements, and the records it passes back.

A store persists ledger entries, their bodies and the tables derived from them; it knows
nothing of validation or scopes (those live in ``memory.py``). Conformance expectations:

- ``append_*`` runs in one transaction that includes the ledger entry; concurrent writers
  (threads or processes) never lose, duplicate or fork an entry.
- every read that returns content returns it from a body whose hash was checked;
- ``verify`` checks every chain (DESIGN §3) and ``open`` refuses a store that fails it;
- ``rebuild`` regenerates every derived table from the ledger alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson

from mentis.ledger import ChainReport, Entry


@dataclass(frozen=True, slots=True)
class StoredAttempt:
    """An attempt's verified body plus what the index knows of it."""

    rowid: int
    entry: Entry
    body: dict[str, Any]
    corrections: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Candidate:
    rowid: int
    repository: str
    task_id: str
    score: float


@dataclass(frozen=True, slots=True)
class SqlResult:
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    truncation_reason: str | None


Embed = Callable[[Sequence[str]], np.ndarray]
"""Embeds texts; checked for shape and finiteness by the service that passes it."""


class Store(Protocol):
    path: str

    def verify(self) -> list[ChainReport]: ...
    def get_meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...

    def append_attempt(
        self,
        chain: str,
        attempt_id: str,
        at: str,
        agent: str,
        body: dict[str, Any],
        vector: np.ndarray,
    ) -> Entry: ...
    def append_correction(
        self, chain: str, correction_id: str, at: str, agent: str, body: dict[str, Any]
    ) -> tuple[Entry, int]: ...
    def forget_attempt(
        self,
        chain: str,
        tombstone_id: str,
        at: str,
        agent: str,
        attempt_id: str,
        reason: str | None,
    ) -> Entry: ...

    def attempt_state(self, attempt_id: str) -> tuple[str, bool] | None: ...
    def lexical(self, match: str, repository: str | None, limit: int) -> list[Candidate]: ...
    def vector(self, query: np.ndarray, repository: str | None, limit: int) -> list[Candidate]: ...
    def load_attempts(self, rowids: Sequence[int]) -> dict[int, StoredAttempt]: ...
    def task_info(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[str | None, int]]: ...
    def task_history(self, repository: str, task_id: str) -> list[StoredAttempt]: ...
    def run_sql(
        self,
        sql: str,
        params: dict[str, Any] | None,
        *,
        max_rows: int,
        max_bytes: int,
        timeout_s: float,
    ) -> SqlResult: ...

    def iter_ledger(self) -> Iterator[tuple[Entry, bytes | None]]: ...
    def import_ledger(self, items: Sequence[tuple[Entry, bytes | None]], embed: Embed) -> int: ...
    def rebuild(self, embed: Embed, progress: Callable[[int], None] | None = None) -> int: ...
    def close(self) -> None: ...


REPLAY_BATCH = 128


def replay(
    placed: Sequence[tuple[int, Entry, bytes | None]],
    embed: Embed,
    progress: Callable[[int], None] | None,
    *,
    attempt: Callable[[int, dict[str, Any], np.ndarray], None],
    thought: Callable[[int, dict[str, Any], np.ndarray], None],
    correction: Callable[[int, dict[str, Any]], None],
    forget: Callable[[int, dict[str, Any]], None],
) -> None:
    """Derive tables from ledger entries in order, for rebuild and import on every backend.

    Attempts and thoughts are embedded in batches; a correction or forget first flushes the batch
    so it sees every entry before it. Entries whose body was erased derive nothing.
    """
    from mentis.texts import attempt_text, thought_text

    batch: list[tuple[int, str, dict[str, Any]]] = []

    def flush() -> None:
        if batch:
            texts = [attempt_text(b) if k == "attempt" else thought_text(b) for _, k, b in batch]
            for (rowid, kind, body), vec in zip(batch, embed(texts), strict=True):
                (attempt if kind == "attempt" else thought)(rowid, body, vec)
            if progress is not None:
                progress(len(batch))
            batch.clear()

    for rowid, entry, raw in placed:
        if raw is None:
            continue
        body = orjson.loads(raw)
        if entry.kind in ("attempt", "thought"):
            batch.append((rowid, entry.kind, body))
            if len(batch) >= REPLAY_BATCH:
                flush()
            continue
        flush()
        if entry.kind == "correction":
            correction(rowid, body)
        elif entry.kind == "forget":
            forget(rowid, body)
    flush()
