"""A minimal-edit editor for JSON and JSONC (JSON with ``//`` and ``/* */`` comments, trailing commas).

Harness configs are edited in place: the text is parsed into a tree that remembers where every
key, value and comma sits, and an edit replaces only the bytes of the entry it touches. Every
other byte (comments, key order, spacing, the file's own indentation and line endings) stays.
Removal is the inverse of insertion, so inserting an entry and removing it again gives back the
original bytes.

A malformed file raises :class:`~mentis.errors.ConfigError` naming the file, line and column, and
so does one nested more than :data:`MAX_DEPTH` levels of objects and arrays: a project's config
is written by whoever committed it, and real configs nest a few levels (the parser recurses once
per level, so an unbounded depth would end in a RecursionError).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from mentis.errors import ConfigError

MAX_DEPTH = 64
"""Levels of objects and arrays (the top-level object is one) a config may nest (TOML configs are
bounded by tomlkit itself, at 100 levels)."""

_WS = " \t\r\n\ufeff"  # a UTF-8 byte-order mark at the start counts as blank
_BLANKS = re.compile(r"(?:[ \t\r\n\ufeff]+|//[^\n]*|/\*.*?\*/)*", re.DOTALL)
_STRING = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')
_PLAIN = re.compile(r"[^\x00-\x1f]*")  # a string without escapes or control characters reads as is
_LITERAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_WORD = re.compile(r"[^ \t\r\n,\]}/]*")


@dataclass
class Node:
    start: int
    end: int
    value: Any = None
    kind: str = "scalar"  # scalar | object | array


@dataclass
class Member:
    """One object member (key + value) or array item (key is None); ``comma`` is the offset of the
    comma that follows it, if any."""

    start: int
    key: str | None
    value: Node
    comma: int | None = None


@dataclass
class Container(Node):
    members: list[Member] = field(default_factory=list)


class _Parser:
    def __init__(self, text: str, name: str) -> None:
        self.text = text
        self.name = name
        self.pos = 0
        self.depth = 0

    def error(self, message: str, pos: int | None = None) -> ConfigError:
        at = self.pos if pos is None else pos
        line = self.text.count("\n", 0, at) + 1
        column = at - (self.text.rfind("\n", 0, at) + 1) + 1
        return ConfigError(
            f"{self.name}: line {line} column {column}: {message}; the file was not changed "
            "(fix it or move it aside, then run the command again)"
        )

    def skip(self) -> None:
        text, pos = self.text, self.pos
        if pos < len(text) and text[pos] not in _WS and text[pos] != "/":
            return
        self.pos = _BLANKS.match(text, pos).end()  # type: ignore[union-attr]
        if self.text.startswith("/*", self.pos):
            raise self.error("unterminated /* comment")

    def document(self) -> Node:
        self.skip()
        if self.pos >= len(self.text):
            raise self.error("the file holds no JSON value")
        root = self.value()
        self.skip()
        if self.pos < len(self.text):
            raise self.error("unexpected text after the JSON value")
        return root

    def value(self) -> Node:
        if self.pos >= len(self.text):
            raise self.error("unexpected end of file")
        ch = self.text[self.pos]
        if ch == "{":
            return self.container("}", keyed=True)
        if ch == "[":
            return self.container("]", keyed=False)
        if ch == '"':
            start = self.pos
            return Node(start, self.string_end(), self.decode(start))
        return self.literal()

    def string_end(self) -> int:
        found = _STRING.match(self.text, self.pos)
        if found is None:
            raise self.error("unterminated string")
        self.pos = found.end()
        return self.pos

    def decode(self, start: int) -> Any:
        raw = self.text[start + 1 : self.pos - 1]
        if "\\" not in raw and _PLAIN.fullmatch(raw):
            return raw
        try:
            return json.loads(self.text[start : self.pos])
        except json.JSONDecodeError as exc:
            raise self.error(f"bad string ({exc.msg})", start) from None

    def literal(self) -> Node:
        start = self.pos
        found = _LITERAL.match(self.text, start)
        end = found.end() if found else start
        if found is None or (end < len(self.text) and self.text[end] not in _WS + ",]}/"):
            word = _WORD.match(self.text, start)
            raw = word.group() if word else ""
            shown = raw[:20] or self.text[start : start + 1] or "end of file"
            raise self.error(f"expected a value, found {shown!r}")
        self.pos = end
        return Node(start, end, json.loads(found.group()))

    def container(self, close: str, *, keyed: bool) -> Container:
        if self.depth >= MAX_DEPTH:
            raise self.error(f"nested more than {MAX_DEPTH} levels of objects and arrays")
        self.depth += 1
        node = self._members(close, keyed=keyed)
        self.depth -= 1
        return node

    def _members(self, close: str, *, keyed: bool) -> Container:
        node = Container(self.pos, -1, kind="object" if keyed else "array")
        self.pos += 1
        values: Any = {} if keyed else []
        while True:
            self.skip()
            if self.pos >= len(self.text):
                raise self.error(f"missing {close!r}")
            if self.text[self.pos] == close:
                self.pos += 1
                node.end = self.pos
                node.value = values
                return node
            if node.members and node.members[-1].comma is None:
                raise self.error(f"expected ',' or {close!r}")
            start = self.pos
            key: str | None = None
            if keyed:
                if self.text[self.pos] != '"':
                    raise self.error("expected a quoted key")
                self.string_end()
                key = self.decode(start)
                self.skip()
                if self.pos >= len(self.text) or self.text[self.pos] != ":":
                    raise self.error("expected ':' after the key")
                self.pos += 1
                self.skip()
            child = self.value()
            member = Member(start, key, child)
            if keyed:
                values[key] = child.value
            else:
                values.append(child.value)
            node.members.append(member)
            self.skip()
            if self.pos < len(self.text) and self.text[self.pos] == ",":
                member.comma = self.pos
                self.pos += 1


def parse(text: str, name: str = "<config>") -> Node:
    """Parse JSONC; raises ConfigError naming ``name``, line and column on malformed input."""
    return _Parser(text, name).document()


def loads(text: str, name: str = "<config>") -> Any:
    return parse(text, name).value


# ---------------------------------------------------------------- editing


@dataclass
class Document:
    """A JSONC text plus the edits that keep its formatting."""

    text: str
    name: str = "<config>"
    root: Container = field(init=False)

    def __post_init__(self) -> None:
        if not self.text.strip():
            self.text = "{}\n"
        self.newline = "\r\n" if "\r\n" in self.text else "\n"
        self.unit = _indent_unit(self.text)
        self._reparse()

    @property
    def value(self) -> Any:
        return self.root.value

    def _reparse(self) -> None:
        root = parse(self.text, self.name)
        if not isinstance(root, Container) or root.kind != "object":
            raise ConfigError(f"{self.name}: the top level is not a JSON object; the file was not changed")
        self.root = root

    def find(self, path: tuple[str | int, ...]) -> Node | None:
        node: Node = self.root
        for step in path:
            if not isinstance(node, Container):
                return None
            member = _lookup(node, step)
            if member is None:
                return None
            node = member.value
        return node

    def get(self, path: tuple[str | int, ...]) -> Any:
        node = self.find(path)
        return None if node is None else node.value

    def _object(self, path: tuple[str, ...], key: str, value: Any) -> Container | None:
        """The object at ``path``; when part of the path is missing, the missing objects are
        inserted holding ``key: value`` (one edit) and None is returned."""
        node = self.root
        for i, step in enumerate(path):
            member = _lookup(node, step)
            if member is None:
                self._insert(node, step, _nest((*path[i + 1 :], key), value))
                return None
            if not isinstance(member.value, Container) or member.value.kind != "object":
                where = ".".join(path[: i + 1])
                raise ConfigError(
                    f"{self.name}: {where!r} is not an object; the file was not changed (fix it by hand)"
                )
            node = member.value
        return node

    def set(self, path: tuple[str, ...], key: str, value: Any) -> bool:
        """Set ``path.key`` to ``value``; returns whether the text changed."""
        container = self._object(path, key, value)
        if container is None:
            return True
        member = _lookup(container, key)
        if member is None:
            self._insert(container, key, value)
            return True
        if member.value.value == value and type(member.value.value) is type(value):
            return False
        indent = _line_indent(self.text, member.start)
        self._splice(member.value.start, member.value.end, self._dump(value, indent))
        return True

    def append(self, path: tuple[str, ...], key: str, item: Any) -> None:
        """Append ``item`` to the array ``path.key``, creating it when missing."""
        container = self._object(path, key, [item])
        if container is None:
            return
        member = _lookup(container, key)
        if member is None:
            self._insert(container, key, [item])
            return
        if not isinstance(member.value, Container) or member.value.kind != "array":
            where = ".".join((*path, key))
            raise ConfigError(f"{self.name}: {where!r} is not an array; the file was not changed")
        self._insert(member.value, None, item)

    def remove(self, path: tuple[str | int, ...], *, prune: int = 0) -> bool:
        """Remove the member or item at ``path``; then remove up to ``prune`` parents left empty."""
        if not path:
            return False
        parent = self.find(path[:-1])
        if not isinstance(parent, Container):
            return False
        member = _lookup(parent, path[-1])
        if member is None:
            return False
        self._delete(parent, member)
        if prune and len(path) > 1:
            emptied = self.find(path[:-1])
            if (  # empty and without comments of its own
                isinstance(emptied, Container)
                and not emptied.members
                and not self.text[emptied.start + 1 : emptied.end - 1].strip()
            ):
                self.remove(path[:-1], prune=prune - 1)
        return True

    # -- primitive edits

    def _splice(self, start: int, end: int, new: str) -> None:
        self.text = self.text[:start] + new + self.text[end:]
        self._reparse()

    def _edits(self, edits: list[tuple[int, int, str]]) -> None:
        """Apply non-overlapping edits; at one offset the earlier-listed text ends up first."""
        order = sorted(range(len(edits)), key=lambda i: (edits[i][0], i), reverse=True)
        for i in order:
            start, end, new = edits[i]
            self.text = self.text[:start] + new + self.text[end:]
        self._reparse()

    def _dump(self, value: Any, indent: str) -> str:
        dumped = json.dumps(value, ensure_ascii=False, indent=self.unit)
        return dumped.replace("\n", self.newline + indent)

    def _entry(self, key: str | None, value: Any, indent: str, *, inline: bool) -> str:
        body = (
            json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
            if inline
            else self._dump(value, indent)
        )
        return body if key is None else json.dumps(key, ensure_ascii=False) + ": " + body

    def _insert(self, node: Container, key: str | None, value: Any) -> None:
        text, nl = self.text, self.newline
        close = node.end - 1
        after = _back(text, close)  # just after the last non-blank character inside the container
        if not node.members:
            base = _line_indent(text, node.start)
            inner = base + self.unit
            entry = self._entry(key, value, inner, inline=False)
            if after == node.start + 1:  # nothing but blanks inside: lay the entry out afresh
                self._splice(node.start + 1, close, nl + inner + entry + nl + base)
            else:  # only comments inside: keep them, add the entry after them
                self._splice(after, after, nl + inner + entry)
            return
        last = node.members[-1]
        if _starts_line(text, last.start):
            indent = _line_indent(text, last.start)
            entry = self._entry(key, value, indent, inline=False)
            if last.comma is not None:
                self._splice(after, after, nl + indent + entry + ",")
            else:
                self._edits([(last.value.end, last.value.end, ","), (after, after, nl + indent + entry)])
            return
        entry = self._entry(key, value, "", inline=True)
        if last.comma is not None:
            self._splice(after, after, " " + entry + ",")
        else:
            self._edits([(last.value.end, last.value.end, ","), (after, after, " " + entry)])

    def _delete(self, node: Container, member: Member) -> None:
        text = self.text
        index = node.members.index(member)
        start = _back(text, member.start)
        if index + 1 < len(node.members):  # a member follows: cut up to it
            assert member.comma is not None
            self._splice(member.start, _forward(text, member.comma + 1), "")
            return
        end = member.comma + 1 if member.comma is not None else member.value.end
        if index == 0:
            inside = text[node.start + 1 : node.end - 1]
            if member.comma is None and _blank_outside(
                inside, member.start - node.start - 1, end - node.start - 1
            ):
                self._splice(node.start + 1, node.end - 1, "")
            else:
                self._splice(start, end, "")
            return
        previous = node.members[index - 1]
        if member.comma is None and previous.comma is not None:
            self._edits([(previous.comma, previous.comma + 1, ""), (start, end, "")])
        else:
            self._splice(start, end, "")


def _nest(path: tuple[str, ...], value: Any) -> Any:
    for step in reversed(path):
        value = {step: value}
    return value


def _lookup(node: Container, step: str | int) -> Member | None:
    if isinstance(step, int):
        if node.kind != "array" or not -len(node.members) <= step < len(node.members):
            return None
        return node.members[step]
    if node.kind != "object":
        return None
    found = None
    for member in node.members:  # the last duplicate wins, as in JSON.parse
        if member.key == step:
            found = member
    return found


def _back(text: str, pos: int) -> int:
    while pos > 0 and text[pos - 1] in _WS:
        pos -= 1
    return pos


def _forward(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _line_indent(text: str, pos: int) -> str:
    line_start = text.rfind("\n", 0, pos) + 1
    end = line_start
    while end < len(text) and text[end] in " \t":
        end += 1
    return text[line_start:end]


def _starts_line(text: str, pos: int) -> bool:
    line_start = text.rfind("\n", 0, pos) + 1
    return not text[line_start:pos].strip()


def _blank_outside(inside: str, start: int, end: int) -> bool:
    return not (inside[:start] + inside[end:]).strip()


def _indent_unit(text: str) -> str:
    widths = []
    for line in text.splitlines():
        stripped = line.lstrip(" \t")
        if not stripped or len(stripped) == len(line):
            continue
        lead = line[: len(line) - len(stripped)]
        if lead.startswith("\t"):
            return "\t"
        widths.append(len(lead))
    return " " * min(widths) if widths else "  "
