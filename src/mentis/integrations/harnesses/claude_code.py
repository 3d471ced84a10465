"""Claude Code.

Followed: the Claude Code docs "Connect Claude Code to tools via MCP" (code.claude.com/docs/en/mcp)
and "Hooks reference" (code.claude.com/docs/en/hooks), Claude Code 2.1.x:

- user scope: ``~/.claude.json``, top-level ``mcpServers``; project scope: ``.mcp.json`` at the
  project root, ``mcpServers``. A stdio server is ``{"type": "stdio", "command", "args", "env"}``;
  an HTTP server ``{"type": "http", "url", "headers"}``. ``${VAR}`` and ``${VAR:-default}`` are
  expanded in command, args, env, url and headers, so the token is referenced as
  ``${MENTIS_TOKEN}`` and never written into the file.
- hooks live in ``~/.claude/settings.json`` (user) or ``.claude/settings.json`` (project) under
  ``hooks.<Event>``: a list of ``{"matcher"?, "hooks": [{"type": "command", "command", "timeout"}]}``.
  SessionStart and UserPromptSubmit take no matcher; PostToolUse matches the tool name (``Bash``).
  A Bash command that exits non-zero fires PostToolUseFailure instead, so the post-tool-use hook
  is installed for both (failed checks are recorded too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mentis.integrations.harnesses.base import TOKEN_ENV, Env, Harness, HookItem, HookPlan

HOOK_TIMEOUT_S = 15


class ClaudeCode(Harness):
    name = "claude-code"
    title = "Claude Code"
    source = "code.claude.com/docs/en/mcp and /hooks, Claude Code 2.1"

    def user_config(self, env: Env) -> Path:
        return env.home / ".claude.json"

    def project_config(self, env: Env, project: Path) -> Path:
        return project / ".mcp.json"

    def stdio_entry(self, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
        return {"type": "stdio", **super().stdio_entry(argv, env)}

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        return {"type": "http", "url": url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}}

    def hooks(self, env: Env, project: Path | None, argv: list[str]) -> HookPlan:
        settings = (project or env.home) / ".claude" / "settings.json"
        return claude_style_hooks(self, settings, argv, failures=True)


def claude_style_hooks(harness: Harness, file: Path, argv: list[str], *, failures: bool = False) -> HookPlan:
    """SessionStart, UserPromptSubmit and PostToolUse (Bash) entries in the Claude Code shape,
    which Codex's hooks.json shares; ``failures`` adds PostToolUseFailure (Claude Code only)."""

    def item(event: str, matcher: str | None = None) -> dict[str, Any]:
        hook = {"type": "command", "command": harness.hook_command(argv, event), "timeout": HOOK_TIMEOUT_S}
        return {**({"matcher": matcher} if matcher else {}), "hooks": [hook]}

    return HookPlan(
        file,
        (
            HookItem(("hooks", "SessionStart"), item("session-start")),
            HookItem(("hooks", "UserPromptSubmit"), item("user-prompt-submit")),
            HookItem(("hooks", "PostToolUse"), item("post-tool-use", "Bash")),
            *([HookItem(("hooks", "PostToolUseFailure"), item("post-tool-use", "Bash"))] if failures else []),
        ),
    )
