"""OpenAI Codex (CLI, IDE extension and app share one config).

Followed: the Codex docs "Model Context Protocol" and "Configuration reference"
(developers.openai.com/codex/mcp, /codex/config-reference), Codex CLI 0.15x: TOML in
``$CODEX_HOME/config.toml`` (default ``~/.codex/config.toml``) or, for a trusted project,
``.codex/config.toml``; one ``[mcp_servers.<name>]`` table per server. Stdio: ``command``,
``args``, ``env``; streamable HTTP: ``url`` and ``bearer_token_env_var`` (the *name* of the
variable holding the token — Codex refuses an inline token). No command-hook settings are
documented for Codex, so ``--hooks`` writes nothing here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mentis.integrations.harnesses.base import TOKEN_ENV, Env, Harness


class Codex(Harness):
    name = "codex"
    title = "Codex"
    source = "developers.openai.com/codex/mcp and /codex/config-reference, Codex CLI 0.15x"
    fmt = "toml"
    servers = ("mcp_servers",)
    no_hooks = "Codex documents no command-hook settings (only a `notify` program)"

    def user_config(self, env: Env) -> Path:
        return Path(env.environ.get("CODEX_HOME") or env.home / ".codex") / "config.toml"

    def project_config(self, env: Env, project: Path) -> Path:
        return project / ".codex" / "config.toml"

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        return {"url": url, "bearer_token_env_var": TOKEN_ENV}
