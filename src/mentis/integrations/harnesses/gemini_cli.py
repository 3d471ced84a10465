"""Gemini CLI.

Followed: the Gemini CLI docs "MCP servers with Gemini CLI" (geminicli.com/docs/tools/mcp-server),
"Configuration" (geminicli.com/docs/cli/configuration) and "Hooks reference"
(geminicli.com/docs/hooks/reference), Gemini CLI 0.2x: ``~/.gemini/settings.json`` (user) or
``.gemini/settings.json`` (project), ``mcpServers``. Stdio: ``{"command", "args", "env"}``;
streamable HTTP: ``{"httpUrl", "headers"}``. String values in settings.json expand ``$VAR`` and
``${VAR}``, so the token is ``${MENTIS_TOKEN}``. Hooks sit in the same file under
``hooks.<Event>``: a list of ``{"matcher"?, "hooks": [{"name", "type": "command", "command"}]}``;
SessionStart, BeforeAgent (after a prompt is submitted) and AfterTool (matcher
``run_shell_command``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mentis.integrations.harnesses.base import TOKEN_ENV, Env, Harness, HookItem, HookPlan


class GeminiCli(Harness):
    name = "gemini-cli"
    title = "Gemini CLI"
    source = "geminicli.com/docs/tools/mcp-server, /docs/cli/configuration, /docs/hooks/reference"

    def user_config(self, env: Env) -> Path:
        return env.home / ".gemini" / "settings.json"

    def project_config(self, env: Env, project: Path) -> Path:
        return project / ".gemini" / "settings.json"

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        return {"httpUrl": url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}}

    def hooks(self, env: Env, project: Path | None, argv: list[str]) -> HookPlan:
        def item(event: str, matcher: str | None = None) -> dict[str, Any]:
            hook = {"name": f"mentis-{event}", "type": "command", "command": self.hook_command(argv, event)}
            return {**({"matcher": matcher} if matcher else {}), "hooks": [hook]}

        return HookPlan(
            self.config(env, project),
            (
                HookItem(("hooks", "SessionStart"), item("session-start")),
                HookItem(("hooks", "BeforeAgent"), item("user-prompt-submit")),
                HookItem(("hooks", "AfterTool"), item("post-tool-use", "run_shell_command")),
            ),
        )
