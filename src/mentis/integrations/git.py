"""Code context from git: HEAD commit, branch, dirty flag and blob ids, computed by git itself.

Every blob id here is what ``git hash-object <path>`` prints for the working-tree file (git
applies the path's clean filters, so it equals the id the file would get if committed). These
are the values ``record_attempt`` takes as ``code_context`` and ``search`` as
``current_commit`` / ``current_file_hashes``. Only the standard library is imported: hooks run
this on every tool call.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mentis.errors import ConfigError, InvalidInput, NotACheckout

GIT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Change:
    """One path that differs from HEAD: ``deleted`` paths have no blob id."""

    path: str
    deleted: bool = False


@dataclass(frozen=True)
class GitContext:
    toplevel: Path
    commit: str | None
    branch: str | None
    dirty: bool
    changed: tuple[Change, ...]
    file_hashes: dict[str, str] = field(default_factory=dict)

    def code_context(self) -> dict[str, Any]:
        """The ``code_context`` object of ``record_attempt`` (None fields left out)."""
        out: dict[str, Any] = {"dirty": self.dirty}
        if self.commit:
            out["commit"] = self.commit
        if self.branch:
            out["branch"] = self.branch
        if self.file_hashes:
            out["file_hashes"] = dict(self.file_hashes)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "toplevel": str(self.toplevel),
            "commit": self.commit,
            "branch": self.branch,
            "dirty": self.dirty,
            "changed_files": [c.path for c in self.changed],
            "deleted_files": [c.path for c in self.changed if c.deleted],
            "file_hashes": dict(self.file_hashes),
        }


def _run(args: list[str], cwd: Path, *, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run git and return what it did; a missing git or a timeout raises a clear error."""
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            env=env,
            check=False,
        )
    except FileNotFoundError as exc:
        if not cwd.is_dir():
            raise InvalidInput(f"{cwd} is not a directory") from None
        raise ConfigError(f"git is not installed or not on PATH ({exc}); install git") from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"git {' '.join(args[:2])} took more than {GIT_TIMEOUT_S:.0f} s in {cwd}") from None


def _failed(args: list[str], cwd: Path, done: subprocess.CompletedProcess[str]) -> InvalidInput:
    message = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
    return InvalidInput(f"git {' '.join(args[:2])} failed in {cwd}: {message}")


def git(args: list[str], cwd: Path, *, stdin: str | None = None) -> str:
    """Run git, return its stdout; a missing git or a failed command raises a clear error."""
    done = _run(args, cwd, stdin=stdin)
    if done.returncode != 0:
        raise _failed(args, cwd, done)
    return done.stdout


def toplevel(cwd: Path) -> Path:
    """The working tree's root; :class:`NotACheckout` outside one."""
    try:
        out = git(["rev-parse", "--show-toplevel"], cwd)
    except InvalidInput as exc:
        raise NotACheckout(
            f"{cwd} is not inside a git checkout ({exc.message}); run this in one, or `git init` first"
        ) from None
    if not out.strip():
        raise NotACheckout(f"{cwd} is inside a .git directory, not a working tree; cd to the checkout")
    return Path(out.strip())


def _status(top: Path) -> tuple[str | None, str | None, list[Change]]:
    """HEAD commit (None before the first commit), branch (None when detached) and the changes
    against HEAD, untracked files included, from one ``git status --porcelain=v2``."""
    out = git(["status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all"], top)
    commit: str | None = None
    branch: str | None = None
    changes: list[Change] = []
    fields = out.split("\0")
    i = 0
    while i < len(fields):
        item = fields[i]
        i += 1
        if item.startswith("# branch.oid "):
            oid = item.removeprefix("# branch.oid ")
            commit = None if oid == "(initial)" else oid
        elif item.startswith("# branch.head "):
            head = item.removeprefix("# branch.head ")
            branch = None if head == "(detached)" else head
        elif item.startswith("1 "):
            parts = item.split(" ", 8)
            changes.append(Change(parts[8], deleted="D" in parts[1]))
        elif item.startswith("2 "):
            parts = item.split(" ", 9)
            changes.append(Change(parts[9], deleted="D" in parts[1]))
            changes.append(Change(fields[i], deleted=True))  # the rename's source path
            i += 1
        elif item.startswith("u "):
            changes.append(Change(item.split(" ", 10)[10]))
        elif item.startswith("? "):
            changes.append(Change(item[2:]))
    return commit, branch, changes


def head(top: Path) -> tuple[str | None, str | None]:
    """HEAD's commit (None before the first commit) and branch (None when detached)."""
    commit, branch, _ = _status(top)
    return commit, branch


def hash_files(top: Path, paths: list[str]) -> dict[str, str]:
    """``git hash-object`` of each path (relative to ``top``), in one git call."""
    files = [p for p in paths if (top / p).is_file() or (top / p).is_symlink()]
    plain = [p for p in files if "\n" not in p]  # --stdin-paths is one path per line
    hashes: dict[str, str] = {}
    if plain:
        out = git(["hash-object", "--stdin-paths"], top, stdin="".join(p + "\n" for p in plain)).split()
        if len(out) != len(plain):
            raise ConfigError(f"git hash-object returned {len(out)} ids for {len(plain)} files")
        hashes.update(zip(plain, out, strict=True))
    for p in files:
        if "\n" in p:
            hashes[p] = git(["hash-object", "--", p], top).strip()
    return hashes


def _relative(top: Path, cwd: Path, path: str) -> str:
    full = (cwd / path).resolve() if not Path(path).is_absolute() else Path(path).resolve()
    try:
        rel = full.relative_to(top.resolve())
    except ValueError:
        raise InvalidInput(f"{path} is outside the checkout {top}", field="paths") from None
    if full.is_dir():
        raise InvalidInput(f"{path} is a directory; give files", field="paths")
    if not full.exists():
        raise InvalidInput(f"{path} does not exist in {top}", field="paths")
    return rel.as_posix()


def context(cwd: Path, paths: list[str] | None = None) -> GitContext:
    """HEAD, branch, dirty flag and blob ids of ``paths`` (relative to ``cwd``), or of every file
    that differs from HEAD (untracked included, deleted files have no blob) when none are given."""
    top = toplevel(cwd)
    commit, branch, changes = _status(top)
    wanted = [_relative(top, cwd, p) for p in paths] if paths else [c.path for c in changes if not c.deleted]
    return GitContext(
        toplevel=top,
        commit=commit,
        branch=branch,
        dirty=bool(changes),
        changed=tuple(changes),
        file_hashes=hash_files(top, wanted),
    )


def tree_hashes(top: Path) -> dict[str, str]:
    """Blob id of every file in the working tree, as ``git hash-object`` would print it: the
    index's id for files that match it, a fresh hash for modified and untracked ones."""
    hashes: dict[str, str] = {}
    for record in git(["ls-files", "-s", "-z"], top).split("\0"):
        if not record:
            continue
        meta, _, path = record.partition("\t")
        mode, blob, _stage = meta.split(" ")
        if mode != "160000":  # submodules are commits, not blobs
            hashes[path] = blob
    _, _, changes = _status(top)
    for change in changes:
        hashes.pop(change.path, None)
    hashes.update(hash_files(top, [c.path for c in changes if not c.deleted]))
    return hashes


def changed_between(top: Path, commit: str) -> list[str]:
    """Paths whose content differs between ``commit`` and the working tree (tracked files)."""
    out = git(["diff", "--name-only", "-z", "--no-renames", commit, "--"], top)
    return [p for p in out.split("\0") if p]


def blobs_at(top: Path, commit: str, paths: list[str]) -> dict[str, str]:
    """Blob id of each path at ``commit`` (paths absent there are left out)."""
    if not paths:
        return {}
    out = git(["ls-tree", "-z", "--full-tree", commit, "--", *paths], top)
    blobs: dict[str, str] = {}
    for record in out.split("\0"):
        if record:
            meta, _, path = record.partition("\t")
            parts = meta.split(" ")
            if parts[1] == "blob":
                blobs[path] = parts[2]
    return blobs


FALLBACK_DEFAULT_BRANCHES = ("main", "master", "trunk")
"""Tried in this order when neither ``origin/HEAD`` nor ``init.defaultBranch`` names a branch
that exists."""


def default_branch(top: Path) -> str | None:
    """The repository's default branch: what ``origin/HEAD`` points at (set by ``git clone`` and
    ``git remote set-head``), else ``init.defaultBranch`` when that branch exists, else the first of
    main, master, trunk that exists; None when none does."""
    done = _run(["symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD"], top)
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.strip().removeprefix("origin/")
    configured = _run(["config", "--get", "init.defaultBranch"], top).stdout.strip()
    for name in (configured, *FALLBACK_DEFAULT_BRANCHES) if configured else FALLBACK_DEFAULT_BRANCHES:
        if _run(["show-ref", "--verify", "--quiet", f"refs/heads/{name}"], top).returncode == 0:
            return name
    return None


def is_ancestor(top: Path, commit: str, of: str) -> bool:
    """Whether ``commit`` (a branch, a ref, an id) is an ancestor of ``of`` or the same commit:
    ``git merge-base --is-ancestor``, which answers 0 for yes and 1 for no. A name git cannot
    resolve is a clear error, not a no."""
    for name in (commit, of):
        if not name or name.startswith("-"):
            raise InvalidInput(f"{name!r} is not a commit or branch name")
    args = ["merge-base", "--is-ancestor", commit, of]
    done = _run(args, top)
    if done.returncode in (0, 1):
        return done.returncode == 0
    raise _failed(args, top, done)


_SCP = re.compile(r"^(?:[\w.-]+@)?([\w.-]+):(?!//)(.+)$")


def normalise_remote(url: str) -> str:
    """``git@github.com:acme/shop.git`` and ``https://github.com/acme/shop`` → ``github.com/acme/shop``."""
    url = url.strip()
    m = re.match(r"^[a-zA-Z][\w+.-]*://(?:[^@/]*@)?([^/:]+)(?::\d+)?/(.+)$", url)
    if m is None:
        m = _SCP.match(url)
    if m is None:
        return url.rstrip("/").removesuffix(".git")
    host, path = m.group(1), m.group(2)
    return f"{host.lower()}/{path.strip('/').removesuffix('.git')}"


def repository_identity(top: Path) -> str:
    """The normalised ``origin`` remote, else the checkout directory's name."""
    try:
        url = git(["config", "--get", "remote.origin.url"], top).strip()
    except InvalidInput:
        url = ""
    return normalise_remote(url) if url else top.name


__all__ = [
    "Change",
    "GitContext",
    "blobs_at",
    "changed_between",
    "context",
    "default_branch",
    "git",
    "hash_files",
    "head",
    "is_ancestor",
    "normalise_remote",
    "repository_identity",
    "toplevel",
    "tree_hashes",
]
