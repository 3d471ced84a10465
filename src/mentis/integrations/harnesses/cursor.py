"""Cursor.

Followed: the Cursor docs "Model Context Protocol (MCP)" (cursor.com/docs/context/mcp) and
"Hooks" (cursor.com/docs/agent/hooks), Cursor 1.7+/2.x: ``~/.cursor/mcp.json`` (global) or
``.cursor/mcp.json`` (project), ``mcpServers``. Stdio: ``{"type": "stdio", "command", "args",
"env"}``; remote: ``{"url", "headers"}``. Values interpolate ``${env:NAME}``, so the token is
``${env:MENTIS_TOKEN}``.

Cursor documents hooks (``~/.cursor/hooks.json``, ``{"version": 1, "hooks": {"<event>":
[{"command"}]}}``), but ``mentis hook`` does not handle Cursor's payloads (its shell hook carries
no exit status and its prompt hook cannot add context), so ``--hooks`` writes nothing here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mentis.integrations.harnesses.base import TOKEN_ENV, Env, Harness


class Cursor(Harness):
    name = "cursor"
    title = "Cursor"
    source = "cursor.com/docs/context/mcp and /docs/agent/hooks, Cursor 2.x"
    no_hooks = "Cursor's hook payloads carry no exit status and cannot add context, which `mentis hook` needs"

    def user_config(self, env: Env) -> Path:
        return env.home / ".cursor" / "mcp.json"

    def project_config(self, env: Env, project: Path) -> Path:
        return project / ".cursor" / "mcp.json"

    def stdio_entry(self, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
        return {"type": "stdio", **super().stdio_entry(argv, env)}

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        return {"url": url, "headers": {"Authorization": f"Bearer ${{env:{TOKEN_ENV}}}"}}
