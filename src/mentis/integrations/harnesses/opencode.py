"""OpenCode.

Followed: the OpenCode docs "MCP servers" and "Config" (opencode.ai/docs/mcp-servers,
opencode.ai/docs/config), opencode 1.x: ``~/.config/opencode/opencode.json`` (global) or
``opencode.json`` at the project root, either also as ``opencode.jsonc``; servers under ``mcp``.
Local: ``{"type": "local", "command": [argv...], "environment", "enabled"}``; remote:
``{"type": "remote", "url", "headers", "enabled"}``. Config values substitute ``{env:NAME}`` and
``{file:path}``, so the token is ``{file:/abs/token}`` with ``--token-file``, else
``{env:MENTIS_TOKEN}``. OpenCode's hooks are JavaScript plugins, not commands in a config file,
so ``--hooks`` writes nothing here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mentis.integrations.harnesses.base import TOKEN_ENV, Env, Harness


def _pick(folder: Path, stem: str) -> Path:
    jsonc = folder / f"{stem}.jsonc"
    return jsonc if jsonc.exists() and not (folder / f"{stem}.json").exists() else folder / f"{stem}.json"


class OpenCode(Harness):
    name = "opencode"
    title = "OpenCode"
    source = "opencode.ai/docs/mcp-servers and /docs/config, opencode 1.x"
    servers = ("mcp",)
    no_hooks = "OpenCode's hooks are JavaScript plugins, not config entries"
    reads_token_file = True

    def user_config(self, env: Env) -> Path:
        return _pick(
            Path(env.environ.get("XDG_CONFIG_HOME") or env.home / ".config") / "opencode", "opencode"
        )

    def project_config(self, env: Env, project: Path) -> Path:
        return _pick(project, "opencode")

    def stdio_entry(self, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
        return {"type": "local", "command": [*argv, "serve"], "environment": env, "enabled": True}

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        token = f"{{file:{token_file}}}" if token_file else f"{{env:{TOKEN_ENV}}}"
        return {
            "type": "remote",
            "url": url,
            "headers": {"Authorization": f"Bearer {token}"},
            "enabled": True,
        }
