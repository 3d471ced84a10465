"""OpenAI Codex (CLI, IDE extension and app share one config).

Followed: the Codex docs "Model Context Protocol" and "Configuration reference"
(developers.openai.com/codex/mcp, /codex/config-reference), Codex CLI 0.15x: TOML in
``$CODEX_HOME/config.toml`` (default ``~/.codex/config.toml``) or, for a trusted project,
``.codex/config.toml``; one ``[mcp_servers.<name>]`` table per server. Stdio: ``command``,
``args``, ``env``; streamable HTTP: ``url`` and ``bearer_token_env_var`` (the *name* of the
variable holding the token — Codex refuses an inline token).

Hooks: the Codex docs "Hooks" (developers.openai.com/codex/hooks, May 2026: on by default, feature
key ``[features] hooks``, formerly ``codex_hooks``): ``~/.codex/hooks.json`` or
``<repo>/.codex/hooks.json``, ``hooks.<Event>`` lists of ``{"matcher"?, "hooks": [{"type":
"command", "command", "timeout"}]}`` with SessionStart, UserPromptSubmit and PostToolUse (matcher
``Bash``) — the Claude Code shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mentis.integrations.harnesses.base import TOKEN_ENV, Env, Harness, HookPlan
from mentis.integrations.harnesses.claude_code import claude_style_hooks


class Codex(Harness):
    name = "codex"
    title = "Codex"
    source = "developers.openai.com/codex/mcp and /codex/config-reference, Codex CLI 0.15x"
    fmt = "toml"
    servers = ("mcp_servers",)

    def user_config(self, env: Env) -> Path:
        return Path(env.environ.get("CODEX_HOME") or env.home / ".codex") / "config.toml"

    def project_config(self, env: Env, project: Path) -> Path:
        return project / ".codex" / "config.toml"

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        return {"url": url, "bearer_token_env_var": TOKEN_ENV}

    def hooks(self, env: Env, project: Path | None, argv: list[str]) -> HookPlan:
        folder = project / ".codex" if project else self.user_config(env).parent
        return claude_style_hooks(self, folder / "hooks.json", argv)
