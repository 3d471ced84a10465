"""The attempt operations' inputs and outputs: record_attempt, search, recall,
mark_conclusion_outdated, forget_attempt, and stale (passed checks whose files changed since)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from mentis.api.branches import BranchName
from mentis.api.common import (
    MAX_FILES,
    MAX_SEARCH_LIMIT,
    MAX_TAGS,
    FilePath,
    GitSha,
    Identifier,
    LedgerRef,
    NonEmptyText,
    Out,
    Query,
    Rejection,
    ScoreParts,
    Strict,
    Tag,
    Text,
    Title,
    Visibility,
    plain,
    query,
)
from mentis.ledger.bodies import AttemptStatus

MAX_COMMAND_CHARS = 8_192
MAX_SQL_CHARS = 16_384
EXIT_CODE_RANGE = (-(2**31), 2**31 - 1)
MAX_TREE_FILES = 1_000_000
"""How many paths ``stale``'s ``current_file_hashes`` may hold: a whole working tree."""

Command = Annotated[str, Field(min_length=1, max_length=MAX_COMMAND_CHARS), AfterValidator(plain)]
ExitCode = Annotated[int, Field(ge=EXIT_CODE_RANGE[0], le=EXIT_CODE_RANGE[1])]
SqlText = Annotated[str, Field(min_length=1, max_length=MAX_SQL_CHARS), AfterValidator(query)]
FileHashes = Annotated[dict[FilePath, GitSha], Field(max_length=MAX_FILES)]

# ---------------------------------------------------------------- inputs


# Where the attempt ran: the commit, the git branch, whether the tree was dirty, file blob hashes.
# (No docstring: it would be the schema's description, which the field names already say.)
class CodeContext(Strict):
    commit: GitSha | None = None
    branch: Identifier | None = None
    dirty: bool | None = None
    file_hashes: FileHashes | None = None


# The check an attempt ran: a command and whether it passed (no docstring, as CodeContext).
class Check(Strict):
    command: Command
    status: Literal["passed", "failed"]
    exit_code: ExitCode | None = None
    output: Text | None = None


class RecordAttemptInput(Strict):
    repository: Identifier
    branch: BranchName | None = None
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
    visibility: Visibility | None = None


class SearchInput(Strict):
    query: Query
    repository: Identifier | None = None
    branch: BranchName | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT)] = 10
    current_commit: GitSha | None = None
    current_file_hashes: FileHashes | None = None


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


class StaleInput(Strict):
    repository: Identifier
    current_file_hashes: Annotated[dict[FilePath, GitSha], Field(max_length=MAX_TREE_FILES)]
    include_outdated: bool = False


# ---------------------------------------------------------------- outputs


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


class RetrospectiveOut(Out):
    thought_id: str
    summary: str
    created_at: str
    agent_id: str


class TaskResult(Out):
    repository: str
    task_id: str
    title: str | None = None
    score: float
    score_parts: ScoreParts
    retrospective: RetrospectiveOut | None = Field(
        default=None, description="the task's newest retrospective, while no attempt is newer"
    )
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


class StaleFile(Out):
    path: str
    recorded: str
    current: str | None = Field(description="the blob id now; None when the file is gone")


class StaleAttempt(Out):
    attempt_id: str
    task_id: str
    title: str | None = None
    created_at: str
    agent_id: str
    check_command: str
    commit: str | None = None
    changed: list[StaleFile]
    outdated: bool = Field(description="already marked outdated (listed only with include_outdated)")


class StaleResult(Out):
    repository: str
    attempts: list[StaleAttempt]
    passed_checked: int = Field(description="passed attempts with recorded file hashes that were compared")
