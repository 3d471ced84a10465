"""Windsurf (Cascade).

Followed: the Windsurf docs "Cascade MCP integration" (docs.windsurf.com/windsurf/cascade/mcp),
Windsurf 1.1x: one user file ``~/.codeium/windsurf/mcp_config.json``, ``mcpServers``; no
project-level file. Stdio: ``{"command", "args", "env"}``; remote HTTP: ``{"serverUrl",
"headers"}``. command, args, env, serverUrl, url and headers interpolate ``${env:NAME}``, so the
token is ``${env:MENTIS_TOKEN}``.

Windsurf documents hooks ("Cascade Hooks", beta: ``~/.codeium/windsurf/hooks.json``,
``{"hooks": {"<event>": [{"command", "show_output"}]}}``), but its ``post_run_command`` payload
has only the command line (no exit status, no output) and no hook can add context, so
``mentis hook`` has nothing to do there and ``--hooks`` writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mentis.integrations.harnesses.base import TOKEN_ENV, Env, Harness


class Windsurf(Harness):
    name = "windsurf"
    title = "Windsurf"
    source = "docs.windsurf.com/windsurf/cascade/mcp and /cascade/hooks, Windsurf 1.1x"
    no_hooks = "Windsurf's hook payloads carry no exit status or output and cannot add context"

    def user_config(self, env: Env) -> Path:
        return env.home / ".codeium" / "windsurf" / "mcp_config.json"

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        return {"serverUrl": url, "headers": {"Authorization": f"Bearer ${{env:{TOKEN_ENV}}}"}}
