"""Windsurf (Cascade).

Followed: the Windsurf docs "Cascade MCP integration" (docs.windsurf.com/windsurf/cascade/mcp),
Windsurf 1.1x: one user file ``~/.codeium/windsurf/mcp_config.json``, ``mcpServers``; no
project-level file. Stdio: ``{"command", "args", "env"}``; remote HTTP: ``{"serverUrl",
"headers"}``. command, args, env, serverUrl, url and headers interpolate ``${env:NAME}``, so the
token is ``${env:MENTIS_TOKEN}``.

Hooks: the Windsurf docs "Cascade Hooks" (docs.windsurf.com/windsurf/cascade/hooks, beta):
``~/.codeium/windsurf/hooks.json`` (user) or ``.windsurf/hooks.json`` (workspace),
``{"hooks": {"<event>": [{"command", "show_output"}]}}``. There is no session-start event; Mentis
hooks ``pre_user_prompt`` (user-prompt-submit) and ``post_run_command`` (post-tool-use).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mentis.integrations.harnesses.base import TOKEN_ENV, Env, Harness, HookItem, HookPlan


class Windsurf(Harness):
    name = "windsurf"
    title = "Windsurf"
    source = "docs.windsurf.com/windsurf/cascade/mcp and /cascade/hooks, Windsurf 1.1x"

    def user_config(self, env: Env) -> Path:
        return env.home / ".codeium" / "windsurf" / "mcp_config.json"

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        return {"serverUrl": url, "headers": {"Authorization": f"Bearer ${{env:{TOKEN_ENV}}}"}}

    def hooks(self, env: Env, project: Path | None, argv: list[str]) -> HookPlan:
        file = (
            project / ".windsurf" / "hooks.json" if project else self.user_config(env).parent / "hooks.json"
        )
        events = {"pre_user_prompt": "user-prompt-submit", "post_run_command": "post-tool-use"}
        items = tuple(
            HookItem(("hooks", theirs), {"command": self.hook_command(argv, ours), "show_output": False})
            for theirs, ours in events.items()
        )
        return HookPlan(file, items)
