"""Checkpoints at a cadence, from the hooks (``[checkpoint]`` in the user's ``hooks.toml``).

Whenever a hook runs in a checkout whose newest checkpoint (``.mentis/checkpoints/<chain>/``,
as ``mentis checkpoint --git`` writes them) is due, it starts ``mentis checkpoint --git --key
KEY`` there, detached, so the hook does not wait for it (its output goes to
``$MENTIS_HOME/logs/checkpoint-hook.log``). Due means:

- ``every = "day"``: no checkpoint of this repository in the checkout is 24 hours old or younger;
- ``every = "commit"``: the checkout's newest commit (of anything but ``.mentis/checkpoints``, so
  a committed checkpoint does not count) is newer than its newest checkpoint: at most one per
  commit; a checkout with no commit yet is never due.

No state is kept: the checkpoint files are the record. Only the user's file may set it (a project
file may only add check prefixes), and only for a local store: with ``[server] url`` the hooks
talk to a team server, whose operator makes its checkpoints. Standard library only (hook path).
"""

from __future__ import annotations

import calendar
import os
import subprocess
import sys
import time
from pathlib import Path

from mentis.integrations import git
from mentis.integrations.checkpoint_git import DIRECTORY, chain_key

DAY_S = 24 * 3600


def newest(top: Path, repository: str) -> float | None:
    """The time (Unix seconds) of the newest checkpoint of ``repository`` in the checkout, by its
    file name (``<YYYYMMDDTHHMMSSZ>-<seq>.json``), or None."""
    folder = top / DIRECTORY / chain_key(repository)
    try:
        names = [p.name for p in folder.iterdir() if p.name.endswith(".json")]
    except OSError:
        return None
    stamps = []
    for name in names:
        try:
            stamps.append(float(calendar.timegm(time.strptime(name.split("-", 1)[0], "%Y%m%dT%H%M%SZ"))))
        except ValueError:
            continue
    return max(stamps, default=None)


def due(every: str, top: Path, repository: str, now: float | None = None) -> bool:
    """Whether a checkpoint of ``repository`` is due in the checkout at ``top`` (module docstring)."""
    last = newest(top, repository)
    if every == "day":
        return last is None or (now if now is not None else time.time()) - last >= DAY_S
    try:
        # the newest commit of anything but the checkpoints: a committed checkpoint is no new commit
        out = git.git(["log", "-1", "--format=%ct", "--", ".", f":(exclude){DIRECTORY.as_posix()}"], top)
        committed = int(out.strip() or 0)
    except Exception:  # no commit yet, or git failed: not due
        return False
    return committed > 0 and (last is None or committed > last)


def command(key: Path, commit: bool) -> list[str]:
    """The command a due hook starts in the checkout."""
    argv = [sys.executable, "-m", "mentis", "checkpoint", "--git", "--key", str(key), "--json"]
    return [*argv, "--commit"] if commit else argv


def start(home: Path, top: Path, key: Path, commit: bool) -> None:
    """Start the checkpoint in the background, its output appended to the checkpoint hook log."""
    log = home / "logs" / "checkpoint-hook.log"
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        subprocess.Popen(
            command(key, commit),
            cwd=top,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
        )
    finally:
        os.close(fd)


__all__ = ["command", "due", "newest", "start"]
