"""MEMORY.md, the plain-text form of a repository's thoughts (``export_memory_md`` /
``import_memory_md``): one ``## Type`` section per thought type, one ``- `` line per thought
with its metadata in an HTML comment. Writing and reading the format only; the thought
operations (:mod:`mentis.service.thoughts`) choose what is exported and append what is imported."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput, ThoughtOut
from mentis.errors import InvalidInput
from mentis.ledger.bodies import THOUGHT_TYPES


def render_memory_md(repository: str, thoughts: Sequence[ThoughtOut]) -> str:
    """The file: a title, then each thought type's section in :data:`THOUGHT_TYPES` order."""
    by_type: dict[str, list[ThoughtOut]] = {}
    for t in thoughts:
        by_type.setdefault(t.type, []).append(t)
    out = [f"# MEMORY: {repository}", ""]
    for kind in THOUGHT_TYPES:
        if kind in by_type:
            out += [f"## {kind}", ""] + [md_line(t) for t in by_type[kind]] + [""]
    return "\n".join(out)


_MD_META = re.compile(r"\s+<!-- mentis (\{.*\}) -->$")
MD_META_KEYS = frozenset({"role", "importance", "confidence", "tags", "concepts", "task_id"})
"""What a MEMORY.md line's metadata may set (what :func:`md_line` writes): never the repository,
the thought's id, its refs or relations, which the file may not choose."""


def md_line(t: ThoughtOut) -> str:
    """One MEMORY.md line: the content (newlines and backslashes escaped) and its metadata."""
    content = t.content.replace("\\", "\\\\").replace("\n", "\\n")
    meta: dict[str, Any] = {"role": t.role, "importance": _decimal(t.importance)}
    if t.confidence is not None:
        meta["confidence"] = _decimal(t.confidence)
    for key in ("tags", "concepts"):
        if getattr(t, key):
            meta[key] = getattr(t, key)
    if t.task_id:
        meta["task_id"] = t.task_id
    return f"- {content} <!-- mentis {orjson.dumps(meta).decode()} -->"


def _decimal(value: float) -> str:
    return format(value, ".4f").rstrip("0").rstrip(".") or "0"


def parse_memory_md(repository: str, text: str) -> list[AppendThoughtInput]:
    """Thoughts from a MEMORY.md (``## Type`` sections, one ``- `` line each); all or nothing:
    every line is checked before the caller writes any."""
    kind: str | None = None
    out: list[AppendThoughtInput] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            kind = line[3:].strip()
            if kind not in THOUGHT_TYPES:
                raise InvalidInput(
                    f"MEMORY.md line {number}: unknown thought type {kind!r}", field="markdown"
                )
            continue
        if not line.startswith("- "):
            continue
        if kind is None:
            raise InvalidInput(
                f"MEMORY.md line {number}: a thought line before any '## Type' heading", "markdown"
            )
        body, meta = line[2:], {}
        m = _MD_META.search(body)
        if m:
            try:
                meta = orjson.loads(m.group(1))
            except orjson.JSONDecodeError:
                raise InvalidInput(
                    f"MEMORY.md line {number}: malformed metadata comment", field="markdown"
                ) from None
            body = body[: m.start()]
            if not isinstance(meta, dict) or not set(meta) <= MD_META_KEYS:
                extra = sorted(set(meta) - MD_META_KEYS) if isinstance(meta, dict) else meta
                raise InvalidInput(
                    f"MEMORY.md line {number}: metadata may hold only {', '.join(sorted(MD_META_KEYS))}, "
                    f"not {extra}; the target repository is the one given",
                    field="markdown",
                )
        content = re.sub(r"\\(\\|n)", lambda g: "\n" if g.group(1) == "n" else "\\", body)
        data = {"repository": repository, "type": kind, "content": content, **meta}
        try:
            out.append(parse(AppendThoughtInput, data))
        except InvalidInput as exc:
            raise InvalidInput(f"MEMORY.md line {number}: {exc}", field="markdown") from None
    return out
