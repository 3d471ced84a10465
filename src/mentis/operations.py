"""The registry of operations every transport exposes: MCP tools, REST routes, docs.

An operation is a name, its input and output models, the Memory method it calls and a
description written for the agent that reads it. Adding an operation here publishes it on
every transport; transports hold no list of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from mentis.memory import Caller, Memory
from mentis.model import (
    ForgetInput,
    ForgetResult,
    MarkOutdatedInput,
    MarkOutdatedResult,
    RecallInput,
    RecallResult,
    RecordAttemptInput,
    RecordAttemptResult,
    SearchInput,
    SearchResult,
    VerifyInput,
    VerifyResult,
)


@dataclass(frozen=True)
class Operation:
    name: str
    input: type[BaseModel]
    output: type[BaseModel]
    call: Callable[[Memory, Caller, Any], BaseModel]
    description: str
    writes: bool = False
    destructive: bool = False


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "record_attempt",
        RecordAttemptInput,
        RecordAttemptResult,
        lambda m, c, r: m.record_attempt(c, r),
        "Record one attempt at a task: the action you took, the files it touched, what you "
        "observed, an optional inference (kept apart from the observation), and the check you "
        "ran (command + passed/failed; omit it when nothing was verified). Creates the task on "
        "its first attempt. Returns the attempt id and its ledger position.",
        writes=True,
    ),
    Operation(
        "search",
        SearchInput,
        SearchResult,
        lambda m, c, r: m.search(c, r),
        "Find tasks where agents already worked on a problem, from a description in your own "
        "words. Returns tasks best first, each with one matching attempt, its status "
        "(passed/failed/unverified), its newest correction if it was marked outdated, and the "
        "score parts. Pass current_file_hashes to learn which results touch files that changed.",
    ),
    Operation(
        "recall",
        RecallInput,
        RecallResult,
        lambda m, c, r: m.recall(c, r),
        "Read a task's full history (repository + task_id), or run read-only SQL (sql, params) "
        "over the views tasks, attempts and corrections. SQL results are capped at 100 rows, "
        "512,000 bytes (truncation is flagged) and 5 seconds.",
    ),
    Operation(
        "mark_conclusion_outdated",
        MarkOutdatedInput,
        MarkOutdatedResult,
        lambda m, c, r: m.mark_conclusion_outdated(c, r),
        "Mark an attempt's conclusion as outdated, with the reason (and the commit where you saw "
        "it). The attempt itself never changes; every correction is kept and the newest is shown "
        "with the attempt in search results.",
        writes=True,
    ),
    Operation(
        "forget_attempt",
        ForgetInput,
        ForgetResult,
        lambda m, c, r: m.forget_attempt(c, r),
        "Erase an attempt's content (and its corrections) from the memory, e.g. when it holds a "
        "secret. The ledger keeps a tombstone (who, when, why), so the chain still verifies.",
        writes=True,
        destructive=True,
    ),
    Operation(
        "verify_integrity",
        VerifyInput,
        VerifyResult,
        lambda m, c, r: m.verify_integrity(c, r.repository),
        "Verify the hash chains of the ledger (all repositories, or one). Fails with the chain, "
        "seq and what did not match when the store was altered.",
    ),
)

BY_NAME = {op.name: op for op in OPERATIONS}
