"""A skill's text: its format (Markdown with YAML front matter, or JSON), its content hash, and
the unified diffs that store every version after the first.

The harness format followed is the Agent Skills specification (agentskills.io/specification, its
2025-11 rules as implementations quote them), which Claude Code loads from
``.claude/skills/<name>/SKILL.md`` (code.claude.com/docs/en/skills, read 2026-12-02): YAML front
matter between ``---`` lines with ``name`` (1-64 characters: lowercase letters, digits and hyphens,
no hyphen at either end and no ``--``; the folder is named after it) and ``description`` (non-empty,
at most 1,024 characters), then Markdown instructions. Mentis also reads ``tags``, ``triggers`` and
``warnings`` (lists of strings); other keys (``allowed-tools``, ``license``...) stay in the text.

Front matter is read with bounds set before YAML builds anything, since a skill is text from any
writer and PyYAML's pure-Python parser spent ~8 s of CPU on 0.84 MB of it (security issue 24): at
most :data:`MAX_FRONT_MATTER_BYTES` of UTF-8, then a scan of the parser's events refuses aliases
and nesting deeper than :data:`MAX_FRONT_MATTER_DEPTH` (the loader recurses once per level), then
libyaml's ``CSafeLoader`` builds it (PyYAML's ``SafeLoader`` where libyaml is missing).

Diffs are GNU-style unified diffs over ``\\n``-terminated lines (``difflib.unified_diff``), with
``\\ No newline at end of file`` after a last line that has no newline, so they apply byte for
byte. Nothing here touches the store; errors are :class:`~mentis.errors.SkillTextError` (an
InvalidInput naming the field), which the service words for its caller or turns into an
IntegrityError when a stored version does not rebuild.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
import yaml

from mentis.errors import SkillTextError

MAX_SKILL_BYTES = 1 << 20
"""A skill's text (and a diff uploaded for one): 1 MiB of UTF-8."""
MAX_FRONT_MATTER_BYTES = 16 * 1024
"""The front matter's UTF-8 bytes (the lines between the ``---`` lines, joined): a skill's front
matter is a few lines (name, a description of at most 1,024 characters, short lists)."""
MAX_FRONT_MATTER_DEPTH = 16
"""Levels of mappings and lists (the top-level mapping is one); Agent Skills front matter uses two
or three."""
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1_024
MAX_LIST_ITEMS = 64
MAX_ITEM_CHARS = 1_000
NO_NEWLINE = "\\ No newline at end of file\n"
SKILL_FILE = "SKILL.md"

_WHITESPACE = re.compile(r"\s+")
_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
JSON_KEYS = frozenset({"name", "description", "tags", "triggers", "warnings", "body"})

Format = Literal["markdown", "json"]
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


@dataclass(frozen=True)
class SkillDoc:
    """What Mentis reads from a skill's text."""

    name: str
    description: str
    format: Format
    body: str
    tags: list[str] = field(default_factory=list)
    triggers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def content_hash(text: str) -> str:
    """sha256 hex of the text's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_name(value: str, what: str = "name") -> str:
    """The Agent Skills name rule; ValueError naming ``what`` otherwise."""
    if not 1 <= len(value) <= MAX_NAME_CHARS:
        raise ValueError(f"{what} must be 1 to {MAX_NAME_CHARS} characters, found {len(value)}")
    if not _NAME.match(value):
        raise ValueError(
            f"{what} {value[:80]!r} may hold only lowercase letters, digits and single hyphens, "
            "and may not start or end with a hyphen (the Agent Skills name rule)"
        )
    return value


def check_size(text: str, what: str = "content") -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SKILL_BYTES:
        raise SkillTextError(
            f"{what} is {size:,} bytes of UTF-8; the limit is {MAX_SKILL_BYTES:,} bytes", what
        )


# ---------------------------------------------------------------- reading a skill


def skill_body(text: str) -> str:
    """A stored skill's instructions: the Markdown below its front matter, or a JSON skill's
    ``body`` ("" when it has none). Reads no YAML (what derivation and rebuild use)."""
    if text.lstrip().startswith("{"):
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return ""
        body = data.get("body", "") if isinstance(data, dict) else ""
        return body if isinstance(body, str) else ""
    lines = text.split("\n")
    end = _closing_line(lines)
    return "" if end is None else "\n".join(lines[end + 1 :])


def instructions_hash(body: str) -> str | None:
    """sha256 hex of a skill's instructions (its body; see :func:`skill_body`) in NFC with every
    run of whitespace made one space and none at either end, so a renamed copy or one with other
    line breaks hashes alike; None for a blank body, which instructs nothing. What revocations are
    keyed on besides the whole text's hash: changing this form changes which copies they catch."""
    norm = _WHITESPACE.sub(" ", unicodedata.normalize("NFC", body)).strip()
    return hashlib.sha256(norm.encode("utf-8", "surrogatepass")).hexdigest() if norm else None


def _closing_line(lines: list[str]) -> int | None:
    """The index of the line that closes the front matter opened by line 0, or None."""
    if lines[0].rstrip("\r") != "---":
        return None
    return next((i for i in range(1, len(lines)) if lines[i].rstrip("\r") == "---"), None)


def parse_skill(text: str) -> SkillDoc:
    """Read a skill: JSON when the text starts with ``{``, else Markdown with YAML front matter."""
    check_size(text)
    if text.lstrip().startswith("{"):
        return _parse_json(text)
    return _parse_markdown(text)


def _parse_markdown(text: str) -> SkillDoc:
    lines = text.split("\n")
    if lines[0].rstrip("\r") != "---":
        raise SkillTextError(
            "content: a skill in Markdown starts with YAML front matter between '---' lines "
            "(name, description, and optionally tags, triggers, warnings)"
        )
    end = _closing_line(lines)
    if end is None:
        raise SkillTextError("content: the front matter has no closing '---' line")
    try:
        meta = _front_matter("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 2}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SkillTextError(f"content: the front matter is not valid YAML ({where}{problem})") from None
    if not isinstance(meta, dict):
        raise SkillTextError("content: the front matter must be a YAML mapping (name: ..., description: ...)")
    return _doc(meta, "markdown", "\n".join(lines[end + 1 :]))


def _front_matter(source: str) -> Any:
    """The YAML ``source``, once it is within the size, depth and alias bounds."""
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > MAX_FRONT_MATTER_BYTES:
        raise SkillTextError(
            f"content: the front matter is {size:,} bytes; the limit is {MAX_FRONT_MATTER_BYTES:,} "
            "(keep it to name, description and short lists; instructions go below the closing '---')"
        )
    depth = 0
    for event in yaml.parse(source, Loader=_LOADER):
        if isinstance(event, yaml.AliasEvent):
            raise SkillTextError(
                "content: the front matter may not use YAML aliases (*name); write the value out"
            )
        if isinstance(event, _OPEN):
            depth += 1
            if depth > MAX_FRONT_MATTER_DEPTH:
                raise SkillTextError(
                    f"content: the front matter nests more than {MAX_FRONT_MATTER_DEPTH} levels of "
                    "mappings and lists"
                )
        elif isinstance(event, _CLOSE):
            depth -= 1
    return yaml.load(source, Loader=_LOADER)  # a safe loader: plain data only


def _parse_json(text: str) -> SkillDoc:
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise SkillTextError(f"content: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SkillTextError("content: a skill in JSON is an object {name, description, body, ...}")
    unknown = sorted(set(data) - JSON_KEYS)
    if unknown:
        raise SkillTextError(
            f"content: unknown key(s) {', '.join(unknown)} in a JSON skill; "
            f"known: {', '.join(sorted(JSON_KEYS))}"
        )
    body = data.get("body", "")
    if not isinstance(body, str):
        raise SkillTextError("content: body must be a string (the Markdown instructions)")
    return _doc(data, "json", body)


def _doc(meta: dict[Any, Any], fmt: Format, body: str) -> SkillDoc:
    for key in ("name", "description"):
        if meta.get(key) in (None, ""):
            raise SkillTextError(f"content: the front matter's `{key}` is required")
        if not isinstance(meta[key], str):
            raise SkillTextError(f"content: the front matter's `{key}` must be a string")
    try:
        name = check_name(meta["name"], "content: the front matter's `name`")
    except ValueError as exc:
        raise SkillTextError(str(exc)) from None
    description = meta["description"].strip()
    if not description or len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillTextError(
            f"content: the front matter's `description` must be 1 to {MAX_DESCRIPTION_CHARS:,} "
            f"characters, found {len(description):,}"
        )
    lists = {key: _strings(meta.get(key), key) for key in ("tags", "triggers", "warnings")}
    return SkillDoc(name=name, description=description, format=fmt, body=body, **lists)


def _strings(value: Any, key: str) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
        raise SkillTextError(f"content: the front matter's `{key}` must be a list of strings")
    if len(items) > MAX_LIST_ITEMS or any(len(v) > MAX_ITEM_CHARS for v in items):
        raise SkillTextError(
            f"content: the front matter's `{key}` holds at most {MAX_LIST_ITEMS} items of "
            f"{MAX_ITEM_CHARS:,} characters each"
        )
    return [v.strip() for v in items if v.strip()]


def render_markdown(doc: SkillDoc) -> str:
    """A JSON skill as a SKILL.md (what export writes for it)."""
    meta: dict[str, Any] = {"name": doc.name, "description": doc.description}
    for key in ("tags", "triggers", "warnings"):
        if getattr(doc, key):
            meta[key] = getattr(doc, key)
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1_000)
    return f"---\n{front}---\n{doc.body}"


# ---------------------------------------------------------------- diffs


def _lines(text: str) -> list[str]:
    """Lines split on ``\\n`` only, each keeping it (the last one may have none)."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def make_diff(old: str, new: str) -> str:
    """The unified diff that turns ``old`` into ``new`` (3 lines of context)."""
    out = []
    for line in difflib.unified_diff(_lines(old), _lines(new), "a/SKILL.md", "b/SKILL.md"):
        out.append(line if line.endswith("\n") else line + "\n" + NO_NEWLINE)
    return "".join(out)


def apply_diff(old: str, diff: str) -> str:
    """``old`` with ``diff`` (a unified diff) applied; SkillTextError (field ``diff``) naming the
    hunk and line where it does not apply."""
    src = _lines(old)
    lines = diff.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out: list[str] = []
    pos = 0  # next line of src to copy
    i = 0
    while i < len(lines) and not lines[i].startswith("@@"):
        if not lines[i].startswith(("---", "+++", "diff ", "index ")):
            raise SkillTextError(
                f"diff: line {i + 1} is not a unified diff header: {lines[i][:80]!r}", "diff"
            )
        i += 1
    if i == len(lines) and lines:
        raise SkillTextError("diff: it has no hunk (no line starting with @@)", "diff")
    while i < len(lines):
        m = _HUNK.match(lines[i])
        if m is None:
            raise SkillTextError(f"diff: line {i + 1} should start a hunk (@@ -a,b +c,d @@)", "diff")
        start, count = int(m.group(1)), int(m.group(2) or "1")
        new_count = int(m.group(4) or "1")
        at = start - 1 if count else start
        if at < pos or at > len(src):
            raise SkillTextError(f"diff: the hunk at line {i + 1} starts outside the text", "diff")
        out += src[pos:at]
        pos = at
        i += 1
        seen_old = seen_new = 0
        while i < len(lines) and not lines[i].startswith("@@"):
            line = lines[i]
            tag, rest = line[:1], line[1:] + "\n"
            if i + 1 < len(lines) and lines[i + 1] == NO_NEWLINE.rstrip("\n"):
                rest = line[1:]
                i += 1
            if tag in (" ", "-"):
                if pos >= len(src) or src[pos] != rest:
                    raise SkillTextError(
                        f"diff: does not apply: the hunk's line {i + 1} does not match line {pos + 1} "
                        "of the version it is applied to",
                        "diff",
                    )
                pos += 1
                seen_old += 1
                if tag == " ":
                    out.append(rest)
                    seen_new += 1
            elif tag == "+":
                out.append(rest)
                seen_new += 1
            else:
                raise SkillTextError(f"diff: line {i + 1} is neither context, '-' nor '+'", "diff")
            i += 1
        if (seen_old, seen_new) != (count, new_count):
            raise SkillTextError(
                f"diff: a hunk announces {count} old and {new_count} new lines but holds "
                f"{seen_old} and {seen_new}",
                "diff",
            )
    out += src[pos:]
    return "".join(out)


__all__ = [
    "MAX_FRONT_MATTER_BYTES",
    "MAX_FRONT_MATTER_DEPTH",
    "MAX_SKILL_BYTES",
    "SKILL_FILE",
    "SkillDoc",
    "apply_diff",
    "check_name",
    "content_hash",
    "instructions_hash",
    "make_diff",
    "parse_skill",
    "render_markdown",
    "skill_body",
]
