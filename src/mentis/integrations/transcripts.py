"""Checks that ran in recorded coding-agent sessions, as proposed attempts (``mentis propose
transcript``), found without any LLM by the hooks' own recogniser (:mod:`mentis.integrations.hooks.checks`).

Format read — **Claude Code** session transcripts, ``~/.claude/projects/<project>/<session>.jsonl``
(format as documented by claude-dev.tools/docs/jsonl-format and the go-session "Session Format"
reference, 2026-02; Claude Code 2.x writes it): one JSON object per line, each with ``type``,
``uuid``, ``timestamp``, ``sessionId``, ``cwd``, ``gitBranch`` and ``version``. An ``assistant``
line's ``message.content`` holds ``tool_use`` blocks (``id``, ``name``, ``input``: ``Bash`` has
``command``; ``Edit``/``MultiEdit``/``Write`` have ``file_path``, ``NotebookEdit``
``notebook_path``); a ``user`` line's ``message.content`` holds the ``tool_result`` blocks
(``tool_use_id``, ``content`` as text or text blocks, ``is_error``) and, beside it,
``toolUseResult`` (Bash: ``stdout``, ``stderr``, ``interrupted``). A Bash command that exited
non-zero comes back with ``is_error`` and an ``Exit code N`` line before its output. Other line
types (``system``, ``summary``, ``file-history-snapshot``…) are skipped, and so is a line that is
not JSON (a session being written ends mid-line).

Codex keeps its sessions as ``rollout-*.jsonl`` too, but their format is not documented as a
stable interface, so it is not read here.

Each check that ran to an exit becomes one proposed attempt: its command, exit status and scrubbed
output tail, and as its files the paths edited since the session's previous check. Tasks group by
session and branch (``<branch>-<session>``), and each proposal names its source episode: the
transcript, the session, and the range of lines from after the previous check to this check's
result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from mentis.api.attempts import RecordAttemptInput
from mentis.api.common import SourceEpisode, parse
from mentis.api.thoughts import AppendThoughtInput
from mentis.errors import InvalidInput
from mentis.integrations import git
from mentis.integrations.hooks.checks import recognise
from mentis.integrations.hooks.config import HookConfig
from mentis.integrations.hooks.payload import ShellRun
from mentis.providers.extract import MAX_OUTPUT_TOKENS, Extractor, Line, Usage, estimate_tokens, render

HARNESS = "claude-code"
MAX_TRANSCRIPT_BYTES = 512 * 1024 * 1024
EDIT_TOOLS = {
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
}
_EXIT = re.compile(r"^\s*(?:error:\s*)?exit code:?\s*(-?\d+)\s*$", re.IGNORECASE | re.MULTILINE)
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Episode:
    """Where a proposal came from: the transcript file, its session and the lines (1-based, inclusive)."""

    transcript: str
    session_id: str
    from_line: int
    to_line: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "transcript": self.transcript,
            "session_id": self.session_id,
            "from_line": self.from_line,
            "to_line": self.to_line,
        }


@dataclass(frozen=True)
class ProposedAttempt:
    """One check found in a transcript: ``fields`` are a ``record_attempt`` body without its
    repository (the caller names it, or it comes from ``cwd``); ``cwd`` and ``branch`` are the
    session's at that check."""

    fields: dict[str, Any]
    episode: Episode
    cwd: str | None
    branch: str | None


@dataclass
class _Session:
    first_line: int
    edited: list[str] = field(default_factory=list)
    calls: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Pending Bash calls: tool_use id → (command, line)."""


def read_claude_code(path: Path, cfg: HookConfig) -> list[ProposedAttempt]:
    """Every recognised check in the Claude Code transcript at ``path``, in order."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InvalidInput(f"cannot read transcript {path}: {exc.strerror or exc}", field="file") from None
    if size > MAX_TRANSCRIPT_BYTES:
        raise InvalidInput(f"transcript {path} is over {MAX_TRANSCRIPT_BYTES:,} bytes", field="file")
    found: list[ProposedAttempt] = []
    sessions: dict[str, _Session] = {}
    seen_lines = 0
    for number, line in _lines(path):
        seen_lines += 1
        session_id = _str(line, "sessionId") or path.stem
        session = sessions.setdefault(session_id, _Session(first_line=number))
        content = (
            (line.get("message") or {}).get("content") if isinstance(line.get("message"), dict) else None
        )
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        if line.get("type") == "assistant":
            for block in blocks:
                if block.get("type") != "tool_use" or not isinstance(block.get("input"), dict):
                    continue
                name, tool_input = block.get("name"), block["input"]
                if (
                    name == "Bash"
                    and isinstance(tool_input.get("command"), str)
                    and isinstance(block.get("id"), str)
                ):
                    session.calls[block["id"]] = (tool_input["command"], number)
                elif name in EDIT_TOOLS and isinstance(tool_input.get(EDIT_TOOLS[name]), str):
                    edited = _relative(tool_input[EDIT_TOOLS[name]], _str(line, "cwd"))
                    if edited not in session.edited:
                        session.edited.append(edited)
        elif line.get("type") == "user":
            for block in blocks:
                if block.get("type") != "tool_result" or block.get("tool_use_id") not in session.calls:
                    continue
                command, _ = session.calls.pop(block["tool_use_id"])
                checked = recognise(_run(command, block, line.get("toolUseResult")), cfg)
                if checked is None:
                    continue
                branch = _str(line, "gitBranch")
                fields = {
                    "task_id": task_id(branch, session_id),
                    "task_title": f"Claude Code session {session_id[:8]}"
                    + (f" on {branch}" if branch else ""),
                    **checked.attempt_fields(session.edited),
                    "tags": ["transcript", HARNESS],
                    "session_id": session_id[:256],
                }
                episode = Episode(str(path), session_id, session.first_line, number)
                found.append(ProposedAttempt(fields, episode, _str(line, "cwd"), branch))
                session.edited, session.first_line = [], number + 1
    if seen_lines == 0:
        raise InvalidInput(
            f"{path} holds no Claude Code transcript line (JSON objects, one per line)", field="file"
        )
    return found


def task_id(branch: str | None, session_id: str) -> str:
    """The task of one session on one branch: ``<branch>-<first 8 characters of the session>``."""
    head = _SLUG.sub("-", branch).strip("-") if branch else "session"
    return f"{head or 'session'}-{_SLUG.sub('-', session_id)[:8]}"


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        with path.open("rb") as fh:
            for number, raw in enumerate(fh, start=1):
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue  # not a transcript line, or the last one half written
                if isinstance(line, dict):
                    yield number, line
    except OSError as exc:
        raise InvalidInput(f"cannot read transcript {path}: {exc.strerror or exc}", field="file") from None


def _run(command: str, block: dict[str, Any], result: object) -> ShellRun:
    """The Bash call's outcome from its ``tool_result`` block (and ``toolUseResult`` beside it)."""
    text = _text(block.get("content"))
    if isinstance(result, dict) and result.get("interrupted"):
        return ShellRun(command, None, "")
    if block.get("is_error"):
        m = _EXIT.search(text[:2000])
        if m is None:
            return ShellRun(command, None, text)  # refused or failed to start: no exit status
        return ShellRun(command, int(m.group(1)), text[m.end() :].lstrip("\n"))
    if isinstance(result, dict):
        parts = [result.get("stdout"), result.get("stderr")]
        output = "\n".join(p for p in parts if isinstance(p, str) and p)
        return ShellRun(command, 0, output or text)
    return ShellRun(command, 0, text)


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text")) for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)
        )
    return ""


def _relative(path: str, cwd: str | None) -> str:
    """``path`` relative to the session's directory when it is inside it."""
    if cwd:
        try:
            return str(PurePosixPath(path).relative_to(PurePosixPath(cwd)))
        except ValueError:
            pass
    return path


def _str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and value else None


# ---------------------------------------------------------------- thoughts, with an LLM (--llm)

CHUNK_CHARS = 12_000
"""Characters of conversation sent in one request at most (a line longer than this is cut)."""
MAX_LINE_CHARS = 4_000


@dataclass(frozen=True)
class SessionText:
    """What the user asked and the agent said in one session, line by line."""

    transcript: str
    session_id: str
    cwd: str | None
    branch: str | None
    lines: list[Line]


@dataclass(frozen=True)
class Chunk:
    session: SessionText
    lines: list[Line]
    text: str
    """As sent: rendered and scrubbed (:func:`mentis.providers.extract.render`)."""
    estimate: int


@dataclass(frozen=True)
class Plan:
    """The requests a run will make within its budget, and the chunks it leaves out."""

    chunks: list[Chunk]
    skipped: int
    budget: int

    @property
    def estimate(self) -> int:
        """Tokens at most: each request's estimated input plus its output cap."""
        return sum(c.estimate + MAX_OUTPUT_TOKENS for c in self.chunks)


@dataclass(frozen=True)
class ProposedThought:
    """One thought the LLM found: ``fields`` are an ``append_thought`` body without its repository."""

    fields: dict[str, Any]
    episode: Episode
    cwd: str | None
    branch: str | None


def conversation(path: Path) -> list[SessionText]:
    """The user prompts and the agent's text of each session in the transcript at ``path``
    (tool calls and their output are left out: the checks are proposed as attempts)."""
    sessions: dict[str, tuple[str | None, str | None, list[Line]]] = {}
    for number, line in _lines(path):
        kind = line.get("type")
        if kind not in ("user", "assistant"):
            continue
        session_id = _str(line, "sessionId") or path.stem
        lines = sessions.setdefault(session_id, (_str(line, "cwd"), _str(line, "gitBranch"), []))[2]
        message = line.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts = [content]
        elif isinstance(content, list):
            texts = [
                b["text"]
                for b in content
                if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
            ]
        else:
            texts = []
        text = "\n".join(t.strip() for t in texts if t.strip())
        if text:
            lines.append(Line(number, "user" if kind == "user" else "agent", text[:MAX_LINE_CHARS]))
    return [
        SessionText(str(path), sid, cwd, branch, lines)
        for sid, (cwd, branch, lines) in sessions.items()
        if lines
    ]


def plan(sessions: list[SessionText], budget_tokens: int) -> Plan:
    """The chunks to send, in order, while their estimated cost (input plus the output cap) fits
    ``budget_tokens``; the rest are skipped, and the run says how many."""
    chunks: list[Chunk] = []
    for session in sessions:
        current: list[Line] = []
        size = 0
        for line in [*session.lines, None]:
            if line is None or (current and size + len(line.text) > CHUNK_CHARS):
                if current:
                    text = render(current, MAX_LINE_CHARS)
                    chunks.append(Chunk(session, current, text, estimate_tokens(text)))
                current, size = [], 0
            if line is not None:
                current.append(line)
                size += len(line.text)
    kept: list[Chunk] = []
    spent = 0
    for chunk in chunks:
        cost = chunk.estimate + MAX_OUTPUT_TOKENS
        if spent + cost > budget_tokens:
            break
        kept.append(chunk)
        spent += cost
    return Plan(kept, len(chunks) - len(kept), budget_tokens)


def extract_thoughts(run: Plan, extractor: Extractor) -> tuple[list[ProposedThought], Usage]:
    """Ask ``extractor`` for the thoughts of every planned chunk: all of them, or ExtractFailed."""
    found: list[ProposedThought] = []
    tokens_in = tokens_out = 0
    for chunk in run.chunks:
        thoughts, usage = extractor.extract(chunk.lines, chunk.text)
        tokens_in, tokens_out = tokens_in + usage.tokens_in, tokens_out + usage.tokens_out
        s = chunk.session
        for t in thoughts:
            fields = {
                "type": "LLMExtracted",
                "content": t.content,
                "tags": ["llm", t.kind],
                "task_id": task_id(s.branch, s.session_id),
                "session_id": s.session_id[:256],
                "confidence": "0.5",
            }
            found.append(
                ProposedThought(
                    fields, Episode(s.transcript, s.session_id, t.from_line, t.to_line), s.cwd, s.branch
                )
            )
    return found, Usage(tokens_in, tokens_out)


# ---------------------------------------------------------------- what `mentis propose transcript` queues


@dataclass(frozen=True)
class LlmReport:
    """What an ``--llm`` run planned and spent (tokens as the provider reported them)."""

    budget: int
    requests: int
    skipped: int
    estimate: int
    tokens_in: int
    tokens_out: int
    thoughts: int

    def as_dict(self) -> dict[str, int]:
        return {
            k: getattr(self, k)
            for k in ("budget", "requests", "skipped", "estimate", "tokens_in", "tokens_out", "thoughts")
        }


Draft = tuple[RecordAttemptInput | AppendThoughtInput, SourceEpisode]


def drafts_from(
    files: Sequence[Path],
    cfg: HookConfig,
    repository: str | None,
    *,
    extractor: Extractor | None = None,
    budget_tokens: int = 0,
    announce: Callable[[Plan], None] | None = None,
) -> tuple[list[Draft], LlmReport | None]:
    """The proposals of ``files``: an attempt per check that ran and, with ``extractor``, the
    thoughts an LLM finds in the conversation within ``budget_tokens`` (``announce`` hears the
    plan before anything is sent). Each is parsed as its tool's input: a field that breaks a rule
    is InvalidInput naming it, and nothing is proposed."""
    repositories: dict[str, str] = {}

    def repo_of(cwd: str | None) -> str:
        return repository or _repository_of(cwd, repositories)

    drafts: list[Draft] = []
    for file in files:
        for found in read_claude_code(file, cfg):
            attempt = parse(RecordAttemptInput, {**found.fields, "repository": repo_of(found.cwd)})
            drafts.append((attempt, SourceEpisode(**found.episode.as_dict())))
    if extractor is None:
        return drafts, None
    run = plan([s for file in files for s in conversation(file)], budget_tokens)
    if announce is not None:
        announce(run)
    thoughts, usage = extract_thoughts(run, extractor)
    for t in thoughts:
        thought = parse(AppendThoughtInput, {**t.fields, "repository": repo_of(t.cwd)})
        drafts.append((thought, SourceEpisode(**t.episode.as_dict())))
    report = LlmReport(
        budget_tokens,
        len(run.chunks),
        run.skipped,
        run.estimate,
        usage.tokens_in,
        usage.tokens_out,
        len(thoughts),
    )
    return drafts, report


def _repository_of(cwd: str | None, known: dict[str, str]) -> str:
    if cwd is None:
        raise InvalidInput(
            "repository: the transcript names no directory; pass --repository", field="repository"
        )
    if cwd not in known:
        try:
            known[cwd] = git.repository_identity(git.toplevel(Path(cwd)))
        except (InvalidInput, OSError):  # NotACheckout is an InvalidInput
            raise InvalidInput(
                f"repository: the session ran in {cwd}, which is not a git checkout here; pass --repository",
                field="repository",
            ) from None
    return known[cwd]
