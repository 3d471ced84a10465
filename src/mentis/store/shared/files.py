"""Files private to their owner (DESIGN §4): what Mentis creates is 0600 (directories 0700).

SQLite creates ``-wal`` and ``-shm`` beside the database with the database file's permissions, and
the database itself with the process umask, so :func:`private_files` narrows the umask around the
connect that may create them and then sets 0600 on each file created during it. A store file or
directory that existed already is left as its owner set it, but a group- or world-accessible one is
reported on stderr (logging), since anyone who can read it reads every repository in it.

Other files Mentis writes (tokens, TLS keys) are created by :func:`write_new`, never through a
symbolic link.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

FILE_MODE = 0o600
DIR_MODE = 0o700
SUFFIXES = ("", "-wal", "-shm", "-journal")
"""The database and the files SQLite keeps beside it."""


def private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) readable by its owner only; an existing one is kept."""
    missing = []
    for p in (path, *path.parents):
        if p.exists():
            break
        missing.append(p)
    path.mkdir(parents=True, exist_ok=True)
    for p in missing:
        os.chmod(p, DIR_MODE)


@contextmanager
def private_files(db_path: str | Path) -> Iterator[None]:
    """Around opening the SQLite file at ``db_path``: files created meanwhile end up 0600, and
    existing ones open to group or others are reported."""
    path = str(db_path)
    existed = {s for s in SUFFIXES if os.path.exists(path + s)}
    private_dir(Path(path).parent)
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)
    for suffix in SUFFIXES:
        if suffix not in existed and os.path.exists(path + suffix):
            os.chmod(path + suffix, FILE_MODE)
    warn_if_shared(path, existed)


def warn_if_shared(path: str, existed: set[str]) -> None:
    for target in [os.path.dirname(os.path.abspath(path)), *(path + s for s in sorted(existed))]:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            continue
        if not mode & 0o077:
            continue
        if os.path.isdir(target):
            risk = "others can see the store's files there, and replace them where they may write"
        else:
            risk = "anyone who can read it reads every repository in the store"
        log.warning(
            "%s is open to group or others (mode %03o): %s; run `chmod %s %s` unless that is intended",
            target,
            mode,
            risk,
            "700" if os.path.isdir(target) else "600",
            target,
        )


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def write_new(path: Path, data: bytes, mode: int = 0o600, *, replace: bool = True) -> None:
    """Write ``data`` to ``path`` as a new regular file, never through a symbolic link.

    The bytes go to a fresh file in the same directory (``O_CREAT | O_EXCL | O_NOFOLLOW``, created
    with ``mode``), which is then renamed over ``path``: a symlink at ``path`` is replaced, not
    followed. Without ``replace``, the file is created at ``path`` itself and anything already
    there — a dangling symlink included — is an error (``FileExistsError``).
    """
    if not replace:
        fd = os.open(path, _NEW_FILE, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, _NEW_FILE, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file only its owner can read (mode 0600), replacing any old one."""
    write_new(path, data, 0o600)
