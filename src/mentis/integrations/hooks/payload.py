"""What each harness sends a hook on stdin, and what it reads back on stdout.

Formats followed (looked up for this module):

- **Claude Code** — hooks reference at code.claude.com/docs/en/hooks as of 2026-08-10. Every
  input has ``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``. ``PostToolUse``
  (a tool that succeeded) adds ``tool_name``, ``tool_input`` (Bash: ``command``) and
  ``tool_response`` (Bash: ``stdout``, ``stderr``, ``interrupted``); a Bash command that exits
  non-zero fires ``PostToolUseFailure`` instead, with ``error`` whose first line is
  ``Exit code N`` followed by the interleaved output, and ``is_interrupt``. ``SessionStart`` has
  ``source``; ``UserPromptSubmit`` has ``prompt``. Context goes back as
  ``{"hookSpecificOutput": {"hookEventName": …, "additionalContext": …}}`` (capped by Claude
  Code at 10,000 characters). Install the post-tool-use hook for both ``PostToolUse`` and
  ``PostToolUseFailure`` with matcher ``Bash``.
- **Codex** — developers.openai.com/codex/hooks as of 2026-05-18: the same wire format and event
  names as Claude Code (``SessionStart``, ``UserPromptSubmit``, ``PostToolUse`` for ``Bash``);
  its Bash ``tool_response`` is read as a string or object, the exit code from an
  ``exit_code`` field or an ``Exit code: N`` line.
- **Gemini CLI** — docs/hooks/reference.md (google-gemini/gemini-cli, commit 06c0d81): events
  ``SessionStart`` (``source``), ``BeforeAgent`` (``prompt``) and ``AfterTool`` (``tool_name``
  ``run_shell_command``, ``tool_input.command``, ``tool_response`` with ``llmContent``,
  ``returnDisplay`` and optional ``error``); stdout must be JSON only, context goes back in
  ``hookSpecificOutput.additionalContext``. The exit code is read from the ``Exit Code: N`` line
  of ``llmContent``.

Claude Desktop, VS Code, Cursor, OpenCode and Windsurf are not handled here: Claude Desktop has
no hooks, and the others' hook payloads either carry no exit status or no way to add context
(see the README's Hooks section).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mentis.errors import InvalidInput

HARNESSES = (
    "claude-code",
    "claude-desktop",
    "codex",
    "cursor",
    "vscode",
    "gemini-cli",
    "opencode",
    "windsurf",
)
EVENTS = ("session-start", "user-prompt-submit", "post-tool-use")
SUPPORTED = ("claude-code", "codex", "gemini-cli")

# the harness's own event names for ours, per harness
_EVENT_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "claude-code": {
        "session-start": ("SessionStart",),
        "user-prompt-submit": ("UserPromptSubmit",),
        "post-tool-use": ("PostToolUse", "PostToolUseFailure"),
    },
    "codex": {
        "session-start": ("SessionStart",),
        "user-prompt-submit": ("UserPromptSubmit",),
        "post-tool-use": ("PostToolUse",),
    },
    "gemini-cli": {
        "session-start": ("SessionStart",),
        "user-prompt-submit": ("BeforeAgent",),
        "post-tool-use": ("AfterTool",),
    },
}
_SHELL_TOOLS = {
    "claude-code": ("Bash",),
    "codex": ("Bash", "shell", "exec_command"),
    "gemini-cli": ("run_shell_command",),
}
_EXIT_LINE = re.compile(r"^\s*exit code:?\s*(-?\d+)\s*$", re.IGNORECASE | re.MULTILINE)
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
# run_shell_command's llmContent: "Command: …\nDirectory: …\nOutput: …\nError: …\nExit Code: …\n…"
_GEMINI_OUTPUT = re.compile(
    r"^Output:[ \t]?(.*?)(?=^(?:Error|Exit Code|Signal|Background PIDs|Process Group PGID):|\Z)",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class ShellRun:
    """A finished shell command: None ``exit_code`` means it did not run to an exit."""

    command: str
    exit_code: int | None
    output: str


@dataclass(frozen=True)
class HookInput:
    harness: str
    event: str
    cwd: str | None
    session_id: str | None
    prompt: str | None = None
    source: str | None = None
    run: ShellRun | None = None
    event_name: str | None = None


def check_names(harness: str, event: str) -> None:
    if harness not in HARNESSES:
        raise InvalidInput(f"unknown harness {harness!r}; known: {', '.join(HARNESSES)}", field="harness")
    if event not in EVENTS:
        raise InvalidInput(f"unknown hook event {event!r}; known: {', '.join(EVENTS)}", field="event")
    if harness not in SUPPORTED:
        raise InvalidInput(
            f"{harness} has no hook payload Mentis reads; hooks exist for {', '.join(SUPPORTED)}",
            field="harness",
        )


def _str(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and value else None


def parse(harness: str, event: str, raw: bytes) -> HookInput:
    """Read one hook payload; anything malformed raises :class:`InvalidInput`."""
    check_names(harness, event)
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise InvalidInput(f"the hook payload is over {MAX_PAYLOAD_BYTES:,} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"the hook payload on stdin is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidInput("the hook payload on stdin is not a JSON object")
    name = _str(data, "hook_event_name")
    expected = _EVENT_NAMES[harness][event]
    if name is not None and name not in expected:
        raise InvalidInput(f"{harness} sent {name!r} to the {event} hook; expected {' or '.join(expected)}")
    cwd, session = _str(data, "cwd"), _str(data, "session_id")
    if event == "user-prompt-submit":
        prompt = _str(data, "prompt")
        if prompt is None:
            raise InvalidInput(f"the {name or event} payload has no 'prompt'")
        return HookInput(harness, event, cwd, session, prompt=prompt, event_name=name)
    if event == "session-start":
        source = _str(data, "source") or _str(data, "trigger")
        return HookInput(harness, event, cwd, session, source=source, event_name=name)
    return HookInput(harness, event, cwd, session, run=_shell_run(harness, name, data), event_name=name)


def _shell_run(harness: str, name: str | None, data: dict[str, Any]) -> ShellRun | None:
    """The shell command of a post-tool-use payload, or None for any other tool."""
    tool = _str(data, "tool_name")
    if tool is None:
        raise InvalidInput("the post-tool-use payload has no 'tool_name'")
    if tool not in _SHELL_TOOLS[harness]:
        return None
    tool_input = data.get("tool_input")
    command = _str(tool_input, "command") if isinstance(tool_input, dict) else None
    if command is None:
        raise InvalidInput(f"the {tool} payload has no 'tool_input.command'")
    if name == "PostToolUseFailure":
        if data.get("is_interrupt"):
            return ShellRun(command, None, "")
        error = data.get("error")
        if not isinstance(error, str):
            raise InvalidInput("the PostToolUseFailure payload has no 'error' text")
        return ShellRun(command, _exit_line(error), _after_exit_line(error))
    response = data.get("tool_response")
    if harness == "gemini-cli":
        return _gemini_run(command, response)
    if isinstance(response, str):
        return ShellRun(command, _exit_line(response) if harness == "codex" else 0, response)
    if not isinstance(response, dict):
        raise InvalidInput(f"the {tool} payload has no 'tool_response' object")
    if response.get("interrupted"):
        return ShellRun(command, None, "")
    output = "\n".join(
        s for s in (response.get("stdout"), response.get("stderr")) if isinstance(s, str) and s
    )
    if not output and isinstance(response.get("output"), str):
        output = response["output"]
    code = next(
        (response[k] for k in ("exit_code", "exitCode", "returncode", "return_code") if k in response), None
    )
    if isinstance(code, bool) or not isinstance(code, int):
        # Claude Code fires PostToolUse only for a command that succeeded
        code = 0 if harness == "claude-code" else _exit_line(output)
    return ShellRun(command, code, output)


def _gemini_run(command: str, response: object) -> ShellRun:
    if not isinstance(response, dict):
        raise InvalidInput("the run_shell_command payload has no 'tool_response' object")
    content = response.get("llmContent")
    text = content if isinstance(content, str) else json.dumps(content) if content is not None else ""
    code = _exit_line(text)
    if code is None:
        code = 1 if response.get("error") else 0
    m = _GEMINI_OUTPUT.search(text)
    return ShellRun(command, code, m.group(1).strip() if m else text)


def _exit_line(text: str) -> int | None:
    m = _EXIT_LINE.search(text[:2000])
    return int(m.group(1)) if m else None


def _after_exit_line(text: str) -> str:
    m = _EXIT_LINE.search(text[:2000])
    return text[m.end() :].lstrip("\n") if m else text


def output(harness: str, hook: HookInput, context: str | None) -> str:
    """What the hook prints: the harness's JSON with the additional context, or nothing."""
    if context:
        name = hook.event_name or _EVENT_NAMES[harness][hook.event][0]
        return json.dumps({"hookSpecificOutput": {"hookEventName": name, "additionalContext": context}})
    return "{}" if harness == "gemini-cli" else ""
