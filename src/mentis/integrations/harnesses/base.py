"""The interface every harness module implements, and what they share.

A harness knows where its MCP config lives (user level, and project level when it has one), the
shape of one server entry in its own format, and, when it has a command-hook system, where the
hook entries go. The install engine (``install.py``) does the reading, editing and writing.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mentis.errors import ConfigError
from mentis.service.profiles import ENV as PROFILE_ENV

ENTRY = "mentis"
TOKEN_ENV = "MENTIS_TOKEN"
HOOK_EVENTS = ("session-start", "user-prompt-submit", "post-tool-use")


@dataclass(frozen=True)
class Env:
    """Where configs live on this machine: the home directory, the platform and the environment."""

    home: Path
    platform: str
    environ: Mapping[str, str]

    @classmethod
    def current(cls) -> Env:
        return cls(Path.home(), sys.platform, dict(os.environ))

    def config_home(self) -> Path:
        """``$XDG_CONFIG_HOME`` or ``~/.config`` (Linux); the app-support folders elsewhere."""
        if self.platform == "darwin":
            return self.home / "Library" / "Application Support"
        if self.platform == "win32":
            return Path(self.environ.get("APPDATA") or self.home / "AppData" / "Roaming")
        return Path(self.environ.get("XDG_CONFIG_HOME") or self.home / ".config")


@dataclass(frozen=True)
class Server:
    """What to install: a stdio command (``argv``, ``serve`` appended) or an HTTP URL."""

    argv: tuple[str, ...] = ()
    url: str | None = None
    token_file: Path | None = None
    tools: str | None = None
    """The tool profile (``MENTIS_TOOLS`` in a stdio entry's environment); None: the default."""


@dataclass(frozen=True)
class HookItem:
    """One hook entry: the array ``path`` (from the file's root) it is appended to, and the item."""

    path: tuple[str, ...]
    item: dict[str, Any]


@dataclass(frozen=True)
class HookPlan:
    file: Path
    items: tuple[HookItem, ...]
    fmt: str = "json"  # hook files are JSON even where the MCP config is TOML (Codex)


class Harness:
    """One coding-agent harness. Subclasses set the class attributes and override the entry shapes."""

    name: str = ""
    title: str = ""
    source: str = ""  # the documentation (and version) the format follows
    fmt: str = "json"  # json (JSONC accepted) | toml
    servers: tuple[str, ...] = ("mcpServers",)
    no_hooks: str = ""  # why no hooks are written, for harnesses without a command-hook system
    reads_token_file: bool = False  # its HTTP entry can name --token-file; else it reads $MENTIS_TOKEN

    def user_config(self, env: Env) -> Path:
        raise NotImplementedError

    def project_config(self, env: Env, project: Path) -> Path:
        raise ConfigError(f"{self.title} has no project-level MCP config; install without --project")

    def config(self, env: Env, project: Path | None) -> Path:
        return self.user_config(env) if project is None else self.project_config(env, project)

    def entry(self, server: Server, *, project: bool) -> dict[str, Any]:
        if server.url is None:
            profile = {PROFILE_ENV: server.tools} if server.tools else {}
            return self.stdio_entry(list(server.argv), {"MENTIS_AGENT_ID": self.name, **profile})
        return self.http_entry(server.url, server.token_file, project=project)

    def stdio_entry(self, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
        return {"command": argv[0], "args": [*argv[1:], "serve"], "env": env}

    def http_entry(self, url: str, token_file: Path | None, *, project: bool) -> dict[str, Any]:
        raise NotImplementedError

    def hooks(self, env: Env, project: Path | None, argv: list[str]) -> HookPlan | None:
        return None

    def hook_command(self, argv: list[str], event: str) -> str:
        return shlex.join([*argv, "hook", self.name, event])

    def is_ours(self, item: Any) -> bool:
        """Whether a hook item was written by ``mentis install`` for this harness."""
        return any(_is_mentis_hook(command, self.name) for command in _commands(item))


def _commands(item: Any) -> list[str]:
    if isinstance(item, dict):
        found = [v for k, v in item.items() if k == "command" and isinstance(v, str)]
        for v in item.values():
            if isinstance(v, dict | list):
                found += _commands(v)
        return found
    if isinstance(item, list):
        return [c for v in item for c in _commands(v)]
    return []


def _is_mentis_hook(command: str, harness: str) -> bool:
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return (
        len(words) >= 4
        and words[-3:-1] == ["hook", harness]
        and words[-1] in HOOK_EVENTS
        and any("mentis" in w for w in words[:-3])
    )


def mentis_argv() -> list[str]:
    """The absolute command that runs this Mentis: the ``mentis`` script being run, the one next
    to this Python, the one on PATH, else ``python -m mentis``."""
    script = "mentis.exe" if sys.platform == "win32" else "mentis"
    argv0 = Path(sys.argv[0])
    if argv0.name == script and argv0.is_file():
        return [str(argv0.absolute())]
    beside = Path(sys.executable).parent / script
    if beside.is_file():
        return [str(beside.absolute())]
    found = shutil.which(script)
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "mentis"]
