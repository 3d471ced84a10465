"""SKILL.md folders on disk, read and written without following links.

A skills folder is often part of a checkout someone else committed, so below the folder the user
names (``--to`` for export, the source of an import: that one is followed if it is a link, since
the user chose it) every folder and file is opened relative to its parent's descriptor with
``O_NOFOLLOW``:

- export writes ``<to>/<name>/SKILL.md`` only into a real folder (made if missing) and only as a
  new file (``O_EXCL``); a ``<name>`` that is a link, or a ``SKILL.md`` that exists in any form,
  is refused before anything is written;
- import reads ``<source>/SKILL.md`` and ``<source>/<name>/SKILL.md`` only from real folders and
  only when they are regular files (a FIFO is opened with ``O_NONBLOCK`` so it cannot block), and
  reads at most :data:`~mentis.api.skill_text.MAX_SKILL_BYTES` + 1 bytes of one. A folder that is a
  link, or a ``SKILL.md`` that is a link, a device or a FIFO, is refused naming it; plain files
  and links to files beside the skill folders are ignored, as before.

Errors are :class:`~mentis.errors.InvalidInput` naming the path; nothing here touches the store.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from mentis.api.skill_text import MAX_SKILL_BYTES, SKILL_FILE
from mentis.errors import InvalidInput

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)
_LINK_ERRORS = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)
"""What ``open`` with ``O_NOFOLLOW`` (and ``O_DIRECTORY``) reports for a symbolic link."""


@contextmanager
def _fd(path: str | Path, flags: int, dir_fd: int | None = None, mode: int = 0o777) -> Iterator[int]:
    fd = os.open(path, flags, mode, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _cannot(path: Path, exc: OSError, field: str) -> InvalidInput:
    return InvalidInput(f"{field}: cannot use {path}: {exc.strerror or exc}", field=field)


def _link(path: Path, field: str, what: str) -> InvalidInput:
    return InvalidInput(
        f"{field}: {path} is a symbolic link; skills {what} only real folders and regular files "
        "(replace the link with a copy)",
        field=field,
    )


# ---------------------------------------------------------------- export


def write_skill_files(target: Path, texts: dict[str, str]) -> list[Path]:
    """Write ``target/<name>/SKILL.md`` for each name of ``texts``; refuses before writing anything
    when a ``<name>`` is a link or not a folder, or when one of the files exists."""
    try:
        target.mkdir(parents=True, exist_ok=True)
        with _fd(target, os.O_RDONLY | _DIRECTORY) as root:
            for name in texts:
                _check_free(root, target / name)
            return [_write_one(root, target / name, texts[name]) for name in texts]
    except OSError as exc:
        raise _cannot(target, exc, "to") from None


def _check_free(root: int, folder: Path) -> None:
    try:
        found = os.stat(folder.name, dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(found.st_mode):
        raise _link(folder, "to", "export into")
    if not stat.S_ISDIR(found.st_mode):
        raise InvalidInput(f"to: {folder} exists and is not a folder; export into an empty directory", "to")
    with _fd(folder.name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=root) as sub:
        try:
            os.stat(SKILL_FILE, dir_fd=sub, follow_symlinks=False)
        except FileNotFoundError:
            return
    raise InvalidInput(f"to: {folder / SKILL_FILE} already exists; export into an empty directory", "to")


def _write_one(root: int, folder: Path, text: str) -> Path:
    path = folder / SKILL_FILE
    with suppress(FileExistsError):
        os.mkdir(folder.name, 0o755, dir_fd=root)
    try:
        with _fd(folder.name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=root) as sub:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
            with os.fdopen(
                os.open(SKILL_FILE, flags, 0o644, dir_fd=sub), "w", encoding="utf-8", newline=""
            ) as f:
                f.write(text)
    except OSError as exc:
        if exc.errno in _LINK_ERRORS:
            raise _link(folder, "to", "export into") from None
        if isinstance(exc, FileExistsError):
            raise InvalidInput(f"to: {path} already exists; export into an empty directory", "to") from None
        raise InvalidInput(f"to: cannot write {path}: {exc.strerror or exc}", field="to") from None
    return path


# ---------------------------------------------------------------- import


def read_skill_files(source: Path) -> list[tuple[Path, bytes]]:
    """``source/SKILL.md`` (if any) and every ``source/<name>/SKILL.md``, in name order, as bytes."""
    out: list[tuple[Path, bytes]] = []
    try:
        with _fd(source, os.O_RDONLY | _DIRECTORY) as root:
            top = _read_in(root, source / SKILL_FILE)
            if top is not None:
                out.append((source / SKILL_FILE, top))
            for entry in sorted(os.scandir(root), key=lambda e: e.name):
                folder = source / entry.name
                if entry.is_symlink():
                    if entry.is_dir():  # a link to a folder: what a glob would have followed
                        raise _link(folder, "source", "import")
                    continue
                if not entry.is_dir(follow_symlinks=False):
                    continue
                found = _read_folder(root, folder)
                if found is not None:
                    out.append((folder / SKILL_FILE, found))
    except OSError as exc:
        raise _cannot(source, exc, "source") from None
    return out


def _read_folder(root: int, folder: Path) -> bytes | None:
    try:
        sub_fd = os.open(folder.name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=root)
    except OSError as exc:
        if exc.errno in _LINK_ERRORS:  # replaced by a link since it was listed
            raise _link(folder, "source", "import") from None
        raise _cannot(folder, exc, "source") from None
    try:
        return _read_in(sub_fd, folder / SKILL_FILE)
    finally:
        os.close(sub_fd)


def _read_in(dir_fd: int, path: Path) -> bytes | None:
    """The bytes of the regular file ``path`` (opened in ``dir_fd``), None when it does not exist."""
    try:
        fd = os.open(SKILL_FILE, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _NOCTTY, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in _LINK_ERRORS:
            raise _link(path, "source", "import") from None
        raise _cannot(path, exc, "source") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidInput(
                f"source: {path} is not a regular file (a FIFO, device or socket); skills import reads "
                "regular files only",
                field="source",
            )
        return read_capped(functools.partial(os.read, fd), path)
    finally:
        os.close(fd)


def read_capped(read: Callable[[int], bytes], path: Path | str, field: str = "content") -> bytes:
    """Everything ``read`` (a file's or descriptor's) gives, when that is at most MAX_SKILL_BYTES;
    InvalidInput naming ``path`` as soon as there is more (the rest is never read)."""
    chunks: list[bytes] = []
    size = 0
    while size <= MAX_SKILL_BYTES:
        chunk = read(min(1 << 16, MAX_SKILL_BYTES + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise InvalidInput(
        f"{field}: {path} is over {MAX_SKILL_BYTES:,} bytes, the limit of a skill's text", field
    )


__all__ = ["read_capped", "read_skill_files", "write_skill_files"]
