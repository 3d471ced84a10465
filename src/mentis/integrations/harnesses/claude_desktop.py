"""Claude Desktop.

Followed: the MCP "Connect to local MCP servers" quickstart (modelcontextprotocol.io) and the
Claude Desktop help pages, Claude Desktop 0.x/1.x: ``claude_desktop_config.json`` in
``~/Library/Application Support/Claude`` (macOS), ``%APPDATA%\\Claude`` (Windows) or
``$XDG_CONFIG_HOME/Claude`` (Linux builds), ``mcpServers`` of ``{"command", "args", "env"}``.
The file holds local (stdio) servers only: remote servers are added in the app under
Settings → Connectors, so ``--http`` is refused. There is no project-level file and no hook system.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mentis.errors import ConfigError
from mentis.integrations.harnesses.base import Env, Harness


class ClaudeDesktop(Harness):
    name = "claude-desktop"
    title = "Claude Desktop"
    source = "modelcontextprotocol.io quickstart (user), claude_desktop_config.json"
    no_hooks = "Claude Desktop has no command-hook system"

    def user_config(self, env: Env) -> Path:
        return env.config_home() / "Claude" / "claude_desktop_config.json"

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        raise ConfigError(
            "Claude Desktop reads only local (stdio) servers from claude_desktop_config.json; "
            f"add {url} in the app under Settings → Connectors, or install with --stdio"
        )
