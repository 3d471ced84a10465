"""Visual Studio Code (GitHub Copilot agent mode).

Followed: the VS Code docs "MCP configuration reference"
(code.visualstudio.com/docs/copilot/reference/mcp-configuration), VS Code 1.10x: JSONC
``mcp.json`` in the workspace (``.vscode/mcp.json``) or in the user profile folder
(``~/.config/Code/User``, ``~/Library/Application Support/Code/User``, ``%APPDATA%\\Code\\User``),
top-level ``servers``. Stdio: ``{"type": "stdio", "command", "args", "env"}``; HTTP:
``{"type": "http", "url", "headers"}``. Values take VS Code variables, so the token is
``${env:MENTIS_TOKEN}``. Hooks are not written: VS Code's agent hooks are a preview feature whose
file format we did not find settled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mentis.integrations.harnesses.base import TOKEN_ENV, Env, Harness


class VSCode(Harness):
    name = "vscode"
    title = "VS Code"
    source = "code.visualstudio.com/docs/copilot/reference/mcp-configuration, VS Code 1.10x"
    servers = ("servers",)
    no_hooks = "VS Code's agent hooks are in preview with no settled file format"

    def user_config(self, env: Env) -> Path:
        return env.config_home() / "Code" / "User" / "mcp.json"

    def project_config(self, env: Env, project: Path) -> Path:
        return project / ".vscode" / "mcp.json"

    def stdio_entry(self, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
        return {"type": "stdio", **super().stdio_entry(argv, env)}

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        return {"type": "http", "url": url, "headers": {"Authorization": f"Bearer ${{env:{TOKEN_ENV}}}"}}
