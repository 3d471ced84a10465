"""``mentis checkpoint --git``: a checkpoint written into the checkout of the repository it is about.

The file goes to ``.mentis/checkpoints/<chain key>/<time>-<seq>.json`` under the working tree's
root: the chain key is the repository's identity made one safe path component
(``github.com/acme/shop`` → ``github.com_acme_shop``), the time the checkpoint's own
(``20260102T030405Z``) and seq the chain's head seq it vouches for. It holds heads only, never
content. With ``commit``, that one path is committed (``git commit --only``: nothing else staged
goes with it); without, :func:`commit_hint` is the command that does.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from mentis.errors import InvalidInput
from mentis.integrations.git import git, toplevel

if TYPE_CHECKING:  # the hooks import this module on their light path (no cryptography)
    from mentis.ledger.checkpoint import Checkpoint

DIRECTORY = Path(".mentis") / "checkpoints"


def chain_key(chain: str) -> str:
    """``chain`` as one path component: every run of other characters than letters, digits,
    ``.``, ``_`` and ``-`` becomes ``_`` (and a leading dot is dropped)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", chain).lstrip(".") or "_"


def relative_path(cp: Checkpoint, chain: str) -> Path:
    head = cp.head(chain)
    if head is None:
        raise InvalidInput(f"the checkpoint does not name chain {chain!r}", field="repository")
    stamp = cp.at[:19].replace("-", "").replace(":", "") + "Z"
    return DIRECTORY / chain_key(chain) / f"{stamp}-{head.seq}.json"


def write(cp: Checkpoint, chain: str, cwd: Path, *, commit: bool = False) -> Path:
    """Write ``cp`` into the checkout around ``cwd`` as ``chain``'s checkpoint (never over an
    existing file), and commit that one file when ``commit``; returns the file's path."""
    top = toplevel(cwd)
    rel = relative_path(cp, chain)
    path = top / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except FileExistsError:
        raise InvalidInput(f"{path} already exists", field="git") from None
    with os.fdopen(fd, "wb") as f:
        f.write(cp.text())
    if commit:
        git(["add", "--", str(rel)], top)
        message = f"mentis checkpoint of {chain} at seq {rel.stem.rsplit('-', 1)[1]}"
        git(["commit", "--quiet", "--only", "-m", message, "--", str(rel)], top)
    return path


def commit_hint(path: Path) -> str:
    """The commands that commit ``path`` alone."""
    q = shlex.quote(str(path))
    return f"git add -- {q} && git commit --only -m 'mentis checkpoint' -- {q}"


__all__ = ["DIRECTORY", "chain_key", "commit_hint", "relative_path", "write"]
