"""Branch and merge chains (issue 26, docs/branches.md): the inputs and outputs of ``branch_from``,
``list_branches`` and ``merge_branch``, and the one check of a branch name (git's rules for a
branch ref, :func:`branch_name`, written here rather than shelling out to ``git check-ref-format``).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from mentis.api.common import MAX_ID_CHARS, Identifier, Out, Strict

BRANCH_SEP = ":"
"""Between a repository and a branch in the branch's chain name (``repo:feature/x``): git branch
names cannot hold it, so the part after the last one is always the branch."""

_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
"""Characters no git ref name may hold: control characters, space, ``~ ^ : ? * [`` and backslash."""


def branch_name(value: str) -> str:
    """``value`` if git accepts it as a branch name (``git check-ref-format --branch``), else
    ValueError saying which rule it breaks."""
    if not value:
        return _refuse("is empty")
    if (bad := _FORBIDDEN.search(value)) is not None:
        return _refuse(
            f"may not contain {bad.group()!r} (git ref names exclude control characters, "
            "space, ~ ^ : ? * [ and backslash)"
        )
    if value.startswith("-"):
        return _refuse("may not start with '-'")
    if value in ("@", "HEAD"):
        return _refuse(f"may not be {value!r}")
    if ".." in value or "@{" in value:
        return _refuse("may not contain '..' or '@{'")
    if value.startswith("/") or value.endswith("/") or "//" in value:
        return _refuse("may not start or end with '/' or contain '//'")
    if value.endswith("."):
        return _refuse("may not end with '.'")
    for part in value.split("/"):
        if part.startswith("."):
            return _refuse(f"component {part!r} may not start with '.'")
        if part.endswith(".lock"):
            return _refuse(f"component {part!r} may not end with '.lock'")
    return value


def _refuse(why: str) -> str:
    raise ValueError(f"is not a valid git branch name: {why}")


BranchName = Annotated[str, Field(max_length=MAX_ID_CHARS), AfterValidator(branch_name)]
"""A git branch name. Its schema states the length cap only: git's rules (which refuse an empty name
too) are checked by :func:`branch_name`, and a ``minLength`` would cost every tool taking it tokens
and say less than the error does."""
EntryHash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


# ---------------------------------------------------------------- inputs


class BranchFromInput(Strict):
    """Fork branch ``branch`` of ``repository`` at a head of its chain (default: the head now)."""

    repository: Identifier
    branch: BranchName
    fork_seq: Annotated[int, Field(ge=0)] | None = None
    fork_hash: EntryHash | None = None
    parent: BranchName | None = Field(None, description="fork from this branch (default: the main line)")
    exist_ok: bool = False


class MergeBranchInput(Strict):
    """Merge ``branch`` of ``repository`` into ``into`` (a branch; None: the main line)."""

    repository: Identifier
    branch: BranchName
    into: BranchName | None = None


class ListBranchesInput(Strict):
    repository: Identifier


# ---------------------------------------------------------------- outputs


class ChainPoint(Out):
    seq: int
    hash: str


class BranchInfo(Out):
    repository: str
    branch: str
    chain: str = Field(description="the branch's own chain: repository:branch")
    parent: str = Field(description="the chain it forked from")
    fork: ChainPoint = Field(description="the parent's head it forked at")
    head: ChainPoint
    merged_into: list[str] = Field(default_factory=list, description="chains it was merged into")


class MergeConflict(Out):
    kind: Literal["attempt", "thought", "skill"]
    record_id: str = Field(description="the attempt, thought or skill the two sides disagree on")
    source: str = Field(description="what the merged branch did")
    target: str = Field(description="what the target did")


class MergeReport(Out):
    repository: str
    branch: str
    into: str = Field(description="the target chain")
    merge: ChainPoint = Field(description="the merge entry on the target")
    source_head: ChainPoint
    conflicts: list[MergeConflict] = Field(default_factory=list)


class ListBranchesResult(Out):
    branches: list[BranchInfo]


__all__ = [
    "BRANCH_SEP",
    "BranchFromInput",
    "BranchInfo",
    "BranchName",
    "ChainPoint",
    "ListBranchesInput",
    "ListBranchesResult",
    "MergeBranchInput",
    "MergeConflict",
    "MergeReport",
    "branch_name",
]
