"""Per-checkout hook state: the current task (``mentis task start``) and the code the last
recorded attempt ran on, so the next one can list the files changed since.

One small JSON file per checkout under ``$MENTIS_HOME/hooks/checkouts/`` (mode 0600), keyed by
the checkout's absolute path, written to a temporary file and renamed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mentis.errors import InvalidInput
from mentis.integrations import git

DEFAULT_BRANCHES = ("main", "master", "trunk", "develop")


@dataclass
class CheckoutState:
    toplevel: str
    task_id: str | None = None
    title: str | None = None
    last_commit: str | None = None
    last_hashes: dict[str, str] = field(default_factory=dict)
    recorded: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "toplevel": self.toplevel,
            "task_id": self.task_id,
            "title": self.title,
            "last": {"commit": self.last_commit, "file_hashes": self.last_hashes} if self.recorded else None,
        }


def path_for(home: Path, top: Path) -> Path:
    key = hashlib.sha256(str(top.resolve()).encode()).hexdigest()[:24]
    return home / "hooks" / "checkouts" / f"{key}.json"


def load(home: Path, top: Path) -> CheckoutState:
    """The checkout's state; a missing or unreadable file is an empty state."""
    try:
        data = json.loads(path_for(home, top).read_text())
    except (OSError, ValueError):
        return CheckoutState(str(top))
    if not isinstance(data, dict):
        return CheckoutState(str(top))
    last = data.get("last") if isinstance(data.get("last"), dict) else None
    hashes = last.get("file_hashes") if last else None
    return CheckoutState(
        toplevel=str(top),
        task_id=data.get("task_id") if isinstance(data.get("task_id"), str) else None,
        title=data.get("title") if isinstance(data.get("title"), str) else None,
        last_commit=last.get("commit") if last and isinstance(last.get("commit"), str) else None,
        last_hashes={str(k): str(v) for k, v in hashes.items()} if isinstance(hashes, dict) else {},
        recorded=last is not None,
    )


def save(home: Path, state: CheckoutState) -> Path:
    target = path_for(home, Path(state.toplevel))
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(state.to_json(), fh, indent=1)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def set_task(home: Path, top: Path, task_id: str | None, title: str | None = None) -> CheckoutState:
    """Name the checkout's task (``mentis task start``; None: ``task stop``, back to the branch
    name). Either way its diff starts afresh: the next recorded attempt lists the files changed
    since HEAD, not since an attempt of another task."""
    st = CheckoutState(str(top), task_id, title)
    save(home, st)
    return st


def task_for(state: CheckoutState, ctx: git.GitContext) -> tuple[str | None, str | None]:
    """The task id and title: the one `mentis task start` set, else the branch name."""
    if state.task_id:
        return state.task_id, state.title
    return ctx.branch, None


def memory_branch(follow_git: bool, top: Path, branch: str | None) -> str | None:
    """The memory branch this checkout's hooks write to and search through: None (the
    repository's main line) unless ``[branches] follow_git`` is on and HEAD is on a git branch
    other than the repository's default (:func:`mentis.integrations.git.default_branch`). A
    checkout with no default branch known (a new repository whose only branch is HEAD's) writes
    to the main line."""
    if not follow_git or branch is None:
        return None
    default = git.default_branch(top)
    return None if default is None or branch == default else branch


def changed_since_last(state: CheckoutState, ctx: git.GitContext) -> tuple[list[str], dict[str, str]]:
    """Paths whose content differs from what the last recorded attempt ran on (every path that
    differs from HEAD when nothing was recorded yet), and the blob id of each that still exists."""
    changed_now = {c.path for c in ctx.changed}
    if not state.recorded:
        return sorted(changed_now), {p: h for p, h in ctx.file_hashes.items()}
    top = ctx.toplevel
    candidates = set(state.last_hashes) | changed_now
    if state.last_commit and state.last_commit != ctx.commit:
        try:
            candidates |= set(git.changed_between(top, state.last_commit))
        except InvalidInput:  # the last commit is gone (rebased, gc'd): what differs from HEAD
            return sorted(changed_now), dict(ctx.file_hashes)
    now = dict(ctx.file_hashes)
    if ctx.commit:
        now.update(git.blobs_at(top, ctx.commit, sorted(candidates - changed_now)))
    before = dict(state.last_hashes)
    if state.last_commit:
        before.update(git.blobs_at(top, state.last_commit, sorted(candidates - set(before))))
    since = sorted(p for p in candidates if now.get(p) != before.get(p))
    return since, {p: now[p] for p in since if p in now}
