"""Reading, backing up and atomically writing config files, and the TOML document editor.

A config that is a symlink is followed: the target is backed up and replaced, the link stays.
Writes go to a temporary file in the target's folder and are renamed over it, so a config is never
left half-written.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import tomlkit
import tomlkit.exceptions
from tomlkit.items import InlineTable

from mentis.errors import ConfigError
from mentis.integrations.harnesses.jsonc import Document as JsonDocument


class ConfigDocument(Protocol):
    text: str

    def get(self, path: tuple[str | int, ...]) -> Any: ...

    def set(self, path: tuple[str, ...], key: str, value: Any) -> bool: ...

    def remove(self, path: tuple[str | int, ...], *, prune: int = 0) -> bool: ...


class TomlDocument:
    """A TOML file. A new ``[table]`` is appended as text at the end of the file, and removed again
    as text, so install + uninstall gives back the original bytes; anything else (replacing an
    entry the user moved or edited) goes through tomlkit, which keeps comments and order."""

    def __init__(self, text: str, name: str) -> None:
        self.name = name
        self.text = text
        self.doc = self._parse(text)

    def _parse(self, text: str) -> tomlkit.TOMLDocument:
        """The parsed document; ConfigError for malformed TOML, and (tomlkit >= 0.15.1) for values
        or keys nested more than 100 levels, which older tomlkit parsed into a RecursionError."""
        try:
            return tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as exc:
            raise ConfigError(
                f"{self.name}: line {exc.line} column {exc.col}: {_toml_reason(exc)}; the file was not "
                "changed (fix it or move it aside, then run the command again)"
            ) from None

    def get(self, path: tuple[str | int, ...]) -> Any:
        return _walk(self.doc.unwrap(), path)

    def set(self, path: tuple[str, ...], key: str, value: Any) -> bool:
        if self.get((*path, key)) == value:
            return False
        if self.get((*path, key)) is None:
            block = _block(path, key, value)
            text = self.text
            candidate = (
                block if not text.strip() else text + ("\n" if text.endswith("\n") else "\n\n") + block
            )
            if self._same(candidate, (*path, key), value):
                self._commit(candidate)
                return True
        node: Any = self.doc
        for step in path:
            if step not in node:
                node[step] = tomlkit.table(is_super_table=True)
            node = node[step]
            if not isinstance(node, dict):
                raise ConfigError(f"{self.name}: {step!r} is not a table; the file was not changed")
        node[key] = _inline(value) if isinstance(node, InlineTable) else _table(value)
        self._commit(tomlkit.dumps(self.doc))
        return True

    def remove(self, path: tuple[str | int, ...], *, prune: int = 0) -> bool:
        value = self.get(path)
        if value is None:
            return False
        expected = self.doc.unwrap()
        _delete(expected, path, prune)
        if len(path) >= 2 and all(isinstance(p, str) for p in path):
            block = _block(tuple(str(p) for p in path[:-1]), str(path[-1]), value)
            if self.text.endswith(block):
                candidate = self.text[: -len(block)]
                candidate = candidate[:-1] if candidate.endswith("\n\n") else candidate
                if self._parse(candidate).unwrap() == expected:
                    self._commit(candidate)
                    return True
        node: Any = self.doc
        for step in path[:-1]:
            node = node[step]
        del node[path[-1]]
        for depth in range(prune):
            parent = path[: len(path) - 1 - depth]
            if not parent or _walk(self.doc.unwrap(), parent):
                break
            holder: Any = self.doc
            for step in parent[:-1]:
                holder = holder[step]
            del holder[parent[-1]]
        self._commit(tomlkit.dumps(self.doc))
        return True

    def _same(self, candidate: str, path: tuple[str, ...], value: Any) -> bool:
        try:
            parsed = tomlkit.parse(candidate).unwrap()
        except tomlkit.exceptions.ParseError:
            return False
        expected = self.doc.unwrap()
        holder = expected
        for step in path[:-1]:
            holder = holder.setdefault(step, {})
        holder[path[-1]] = value
        return parsed == expected

    def _commit(self, text: str) -> None:
        self.text = text
        self.doc = self._parse(text)


def _walk(node: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        if not isinstance(node, dict) or step not in node:
            return None
        node = node[step]
    return node


def _delete(data: dict[str, Any], path: tuple[str | int, ...], prune: int) -> None:
    holder: Any = data
    for step in path[:-1]:
        holder = holder[step]
    del holder[path[-1]]
    if prune and len(path) > 1 and not _walk(data, path[:-1]):
        _delete(data, path[:-1], prune - 1)


def _table(value: dict[str, Any]) -> Any:
    table = tomlkit.table()
    for k, v in value.items():
        table[k] = _inline(v)
    return table


def _block(path: tuple[str, ...], key: str, value: dict[str, Any]) -> str:
    """The text of ``[path.key]`` holding ``value`` (nested dicts as inline tables)."""
    doc = tomlkit.document()
    node: Any = doc
    for step in path:
        node[step] = tomlkit.table(is_super_table=True)
        node = node[step]
    node[key] = _table(value)
    return tomlkit.dumps(doc)


def _inline(value: Any) -> Any:
    if isinstance(value, dict):
        table = tomlkit.inline_table()
        table.update(value)
        return table
    return value


def _toml_reason(exc: Exception) -> str:
    text = str(exc)
    return text.split(" at line ")[0] if " at line " in text else text


def document(fmt: str, text: str, name: str) -> ConfigDocument:
    if fmt == "toml":
        return TomlDocument(text, name)
    return JsonDocument(text, name)


def read(path: Path) -> tuple[Path, str | None]:
    """The real file behind ``path`` (symlinks followed) and its text, or None when it does not exist."""
    target = path.resolve()
    if target.is_dir():
        raise ConfigError(f"{path} is a directory, not a config file; nothing was changed")
    if not target.exists():
        return target, None
    try:
        with target.open(encoding="utf-8", newline="") as handle:
            return target, handle.read()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: byte {exc.start} is not UTF-8; the file was not changed") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror}); nothing was changed") from None


def backup(target: Path) -> Path:
    """Copy ``target`` beside itself as ``<name>.mentis-backup-<UTC time>`` (never overwriting one)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    copy = target.with_name(f"{target.name}.mentis-backup-{stamp}")
    n = 1
    while copy.exists():
        n += 1
        copy = target.with_name(f"{target.name}.mentis-backup-{stamp}-{n}")
    shutil.copy2(target, copy)
    return copy


def write_atomic(target: Path, text: str, *, private: bool) -> None:
    """Write ``text`` to a temporary file next to ``target`` and rename it over ``target``, keeping
    the old file's mode (a new file gets 0600 when ``private``, else 0644)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o7777 if target.exists() else (0o600 if private else 0o644)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".mentis-tmp", dir=target.parent)
    except OSError as exc:
        raise ConfigError(f"{target}: cannot write it ({exc.strerror}); nothing was changed") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise ConfigError(f"{target}: cannot write it ({exc.strerror}); it was not changed") from None
        raise


def unified_diff(path: Path, before: str | None, after: str) -> str:
    lines = difflib.unified_diff(
        (before or "").splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile="/dev/null" if before is None else str(path),
        tofile=str(path),
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


__all__ = ["ConfigDocument", "JsonDocument", "TomlDocument", "backup", "document", "read"]
