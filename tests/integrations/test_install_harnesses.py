"""`mentis install` / `uninstall` on realistic existing configs of every harness, in a temp HOME.

Each config holds other servers, comments where the format has them, and odd formatting; install
adds exactly the Mentis entry, a second install changes no byte, and uninstall gives back the
original bytes.
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mentis.cli import app
from mentis.integrations.harnesses import HARNESSES, jsonc

MENTIS = str(Path(sys.executable).parent / "mentis")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private HOME with no XDG/Codex/AppData overrides, so every harness path lands in it."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "CODEX_HOME", "APPDATA", "MENTIS_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    yield home


def mentis(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    return result


@dataclass(frozen=True)
class Case:
    harness: str
    relpath: str  # under HOME
    text: str
    strict_json: bool  # the harness reads plain JSON: the result must parse with json.loads
    servers: tuple[str, ...]
    others: tuple[str, ...]  # server names already there that must survive


CASES = [
    Case(
        "claude-code",
        ".claude.json",
        '{\n  "numStartups": 12,\n  "theme": "dark",\n  "mcpServers": {\n    "github": {\n'
        '      "type": "http",\n      "url": "https://api.githubcopilot.com/mcp/"\n    }\n  },\n'
        '  "projects": {\n    "/work/shop": {\n      "allowedTools": []\n    }\n  }\n}\n',
        True,
        ("mcpServers",),
        ("github",),
    ),
    Case(
        "claude-desktop",
        ".config/Claude/claude_desktop_config.json",
        '{"mcpServers":{"fs":{"command":"npx","args":["-y","@modelcontextprotocol/server-filesystem","/tmp"]}},'
        '"globalShortcut":"Ctrl+Space"}',
        True,
        ("mcpServers",),
        ("fs",),
    ),
    Case(
        "codex",
        ".codex/config.toml",
        '# Codex settings\nmodel = "gpt-5-codex"\napproval_policy = "on-request"  # ask first\n\n'
        '[mcp_servers.docs]\ncommand = "npx"\nargs = ["-y", "docs-mcp"]\n\n[mcp_servers.docs.env]\n'
        'DOCS_TOKEN_FILE = "/etc/docs"\n\n[profiles.fast]\nmodel = "gpt-5-mini"\n',
        False,
        ("mcp_servers",),
        ("docs",),
    ),
    Case(
        "cursor",
        ".cursor/mcp.json",
        '{\r\n\t"mcpServers": {\r\n\t\t"linear": {\r\n\t\t\t"url": "https://mcp.linear.app/mcp"\r\n\t\t}\r\n'
        "\t}\r\n}\r\n",
        True,
        ("mcpServers",),
        ("linear",),
    ),
    Case(
        "vscode",
        ".config/Code/User/mcp.json",
        '// VS Code user MCP servers\n{\n\t"inputs": [\n\t\t{ "type": "promptString", "id": "gh", '
        '"password": true },\n\t],\n\t"servers": {\n\t\t/* the GitHub server */\n\t\t"github": {\n'
        '\t\t\t"type": "http",\n\t\t\t"url": "https://api.githubcopilot.com/mcp/", // remote\n'
        "\t\t},\n\t},\n}\n",
        False,
        ("servers",),
        ("github",),
    ),
    Case(
        "gemini-cli",
        ".gemini/settings.json",
        '{\n    // picked in /theme\n    "theme": "Dracula",\n    "selectedAuthType": "gemini-api-key",\n'
        '    "mcpServers": {\n        "git": { "command": "uvx", "args": ["mcp-server-git"] }\n    }\n}\n',
        False,
        ("mcpServers",),
        ("git",),
    ),
    Case(
        "opencode",
        ".config/opencode/opencode.jsonc",
        '{\n  "$schema": "https://opencode.ai/config.json",\n  // local tools\n  "mcp": {\n'
        '    "sentry": {"type": "remote", "url": "https://mcp.sentry.dev/mcp", "enabled": true},\n  },\n'
        '  "model": "anthropic/claude-sonnet-4-5"\n}\n',
        False,
        ("mcp",),
        ("sentry",),
    ),
    Case(
        "windsurf",
        ".codeium/windsurf/mcp_config.json",
        '{\n  "mcpServers" : {\n    "ollama" : {\n      "command" : "py",\n'
        '      "args" : [ "-m", "mcp_ollama" ],\n'
        '      "disabled" : false,\n      "env" : { }\n    }\n  }\n}\n\n',
        True,
        ("mcpServers",),
        ("ollama",),
    ),
]


def load(case: Case, text: str) -> Any:
    if HARNESSES[case.harness].fmt == "toml":
        return tomllib.loads(text)
    if case.strict_json:
        return json.loads(text)
    return jsonc.loads(text)


def servers_of(case: Case, text: str) -> dict[str, Any]:
    data = load(case, text)
    for key in case.servers:
        data = data[key]
    assert isinstance(data, dict)
    return data


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".mentis-backup-*"))


@pytest.mark.parametrize("case", CASES, ids=[c.harness for c in CASES])
def test_install_adds_only_the_stdio_entry_and_uninstall_restores_the_original_bytes(
    home: Path, case: Case
) -> None:
    path = home / case.relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(case.text.encode())

    first = mentis("install", case.harness, "--json")
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    assert report["file"] == str(path) and report["changed"] is True
    after = path.read_bytes().decode()
    before_servers = servers_of(case, case.text)
    now = servers_of(case, after)
    assert {k: v for k, v in now.items() if k != "mentis"} == before_servers
    entry = now["mentis"]
    if case.harness == "opencode":
        assert entry["command"] == [MENTIS, "serve"]
        assert entry["environment"] == {"MENTIS_AGENT_ID": "opencode"}
    else:
        assert (entry["command"], entry["args"]) == (MENTIS, ["serve"])
        assert entry["env"] == {"MENTIS_AGENT_ID": case.harness}
    for line in case.text.splitlines():  # every comment line is still there, as it was
        if "//" in line or "#" in line or "/*" in line:
            assert line in after
    (backup,) = backups(path)
    assert backup.read_bytes() == case.text.encode()

    again = mentis("install", case.harness, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["changed"] is False
    assert path.read_bytes().decode() == after
    assert len(backups(path)) == 1

    removed = mentis("uninstall", case.harness, "--json")
    assert removed.exit_code == 0, removed.output
    assert path.read_bytes() == case.text.encode()


@pytest.mark.parametrize("case", [c for c in CASES if c.harness != "claude-desktop"], ids=lambda c: c.harness)
def test_the_http_entry_references_the_token_and_never_holds_it(home: Path, case: Case) -> None:
    path = home / case.relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(case.text.encode())
    token = home / "mentis.token"
    token.write_text("mts_secret_token_value\n")

    result = mentis(
        "install", case.harness, "--http", "http://127.0.0.1:9471/mcp", "--token-file", str(token)
    )
    assert result.exit_code == 0, result.output
    after = path.read_text()
    assert "mts_secret_token_value" not in after
    entry = servers_of(case, after)["mentis"]
    assert "http://127.0.0.1:9471/mcp" in json.dumps(entry)
    references = {
        "claude-code": "Bearer ${MENTIS_TOKEN}",
        "cursor": "Bearer ${env:MENTIS_TOKEN}",
        "vscode": "Bearer ${env:MENTIS_TOKEN}",
        "gemini-cli": "Bearer ${MENTIS_TOKEN}",
        "opencode": f"Bearer {{file:{token}}}",
        "windsurf": "Bearer ${env:MENTIS_TOKEN}",
    }
    if case.harness == "codex":
        assert entry == {"url": "http://127.0.0.1:9471/mcp", "bearer_token_env_var": "MENTIS_TOKEN"}
    else:
        assert entry["headers"] == {"Authorization": references[case.harness]}
        assert "MENTIS_TOKEN" in result.stderr or case.harness == "opencode"

    assert mentis("uninstall", case.harness).exit_code == 0
    assert path.read_bytes() == case.text.encode()


def test_switching_from_stdio_to_http_replaces_the_entry_in_place(home: Path) -> None:
    case = CASES[0]
    path = home / case.relpath
    path.write_text(case.text)
    assert mentis("install", "claude-code").exit_code == 0
    assert mentis("install", "claude-code", "--http", "https://mentis.internal/mcp").exit_code == 0
    servers = servers_of(case, path.read_text())
    assert servers["mentis"] == {
        "type": "http",
        "url": "https://mentis.internal/mcp",
        "headers": {"Authorization": "Bearer ${MENTIS_TOKEN}"},
    }
    assert list(servers) == ["github", "mentis"]
    assert mentis("uninstall", "claude-code").exit_code == 0
    assert path.read_text() == case.text


@pytest.mark.parametrize(
    ("harness", "relpath", "key"),
    [
        ("claude-code", ".mcp.json", "mcpServers"),
        ("codex", ".codex/config.toml", "mcp_servers"),
        ("cursor", ".cursor/mcp.json", "mcpServers"),
        ("vscode", ".vscode/mcp.json", "servers"),
        ("gemini-cli", ".gemini/settings.json", "mcpServers"),
        ("opencode", "opencode.json", "mcp"),
    ],
)
def test_project_installs_write_the_projects_own_file(
    home: Path, tmp_path: Path, harness: str, relpath: str, key: str
) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    result = mentis("install", harness, "--project", str(project), "--json")
    assert result.exit_code == 0, result.output
    path = project / relpath
    assert json.loads(result.stdout)["file"] == str(path)
    text = path.read_text()
    data = tomllib.loads(text) if relpath.endswith(".toml") else json.loads(text)
    assert "mentis" in data[key]
    assert not list(home.rglob("*.json")) and not list(home.rglob("*.toml"))


@pytest.mark.parametrize("harness", ["claude-desktop", "windsurf"])
def test_harnesses_without_a_project_file_refuse_project_and_write_nothing(
    home: Path, tmp_path: Path, harness: str
) -> None:
    result = mentis("install", harness, "--project", str(tmp_path))
    assert result.exit_code == 10
    assert "no project-level MCP config" in result.stderr
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_claude_desktop_refuses_http_and_names_the_connectors_setting(home: Path) -> None:
    result = mentis("install", "claude-desktop", "--http", "http://127.0.0.1:9471/mcp")
    assert result.exit_code == 10
    assert "Connectors" in result.stderr and "--stdio" in result.stderr
    assert not (home / ".config").exists()


def test_a_new_config_file_is_created_private_with_only_the_entry(home: Path) -> None:
    result = mentis("install", "windsurf", "--json")
    assert result.exit_code == 0, result.output
    path = home / ".codeium/windsurf/mcp_config.json"
    assert json.loads(result.stdout)["files"][0]["created"] is True
    assert json.loads(path.read_text()) == {
        "mcpServers": {
            "mentis": {"command": MENTIS, "args": ["serve"], "env": {"MENTIS_AGENT_ID": "windsurf"}}
        }
    }
    assert path.stat().st_mode & 0o777 == 0o600
    assert not backups(path)
