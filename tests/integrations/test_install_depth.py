"""Finding 12 of security issue 24: a harness config nested deeper than any real one is refused
with exit 10 and a message naming the file, never a RecursionError traceback.

A project's config is written by whoever committed it, so ``mentis install --project`` reads
hostile text. The JSONC parser bounds nesting at ``MAX_DEPTH`` levels of objects and arrays, and
tomlkit (>= 0.15.1) bounds TOML at 100; past either the command stops before changing any file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mentis.cli import app
from mentis.errors import ConfigError
from mentis.integrations.harnesses import jsonc

DEEP = 100_000


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "CODEX_HOME", "APPDATA"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    yield home


def mentis(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def deep_json(depth: int) -> str:
    return '{"mcpServers": {"x": ' + "[" * depth + "]" * depth + "}}\n"


def deep_toml(depth: int, kind: str) -> str:
    if kind == "array":
        return "a = " + "[" * depth + "]" * depth + "\n"
    return "a = " + "{b = " * depth + "1" + "}" * depth + "\n"


PROJECT_FILES = [
    ("claude-code", ".mcp.json", deep_json(DEEP)),
    ("cursor", ".cursor/mcp.json", deep_json(DEEP)),
    ("vscode", ".vscode/mcp.json", deep_json(DEEP)),
    ("gemini-cli", ".gemini/settings.json", deep_json(DEEP)),
    ("opencode", "opencode.json", deep_json(DEEP)),
    ("codex", ".codex/config.toml", deep_toml(DEEP, "array")),
    ("codex", ".codex/config.toml", deep_toml(DEEP, "table")),
]


@pytest.mark.parametrize("command", ["install", "uninstall"])
@pytest.mark.parametrize(("harness", "relpath", "text"), PROJECT_FILES)
def test_a_project_config_nested_100000_deep_exits_10_naming_the_file_and_changes_nothing(
    home: Path, tmp_path: Path, command: str, harness: str, relpath: str, text: str
) -> None:
    project = tmp_path / "shop"
    config = project / relpath
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(text)

    result = mentis(command, harness, "--project", str(project))

    assert result.exit_code == ConfigError.exit_code == 10, result.output
    assert str(config) in result.stderr and "nested" in result.stderr
    assert "Traceback" not in result.output
    assert config.read_text() == text
    assert sorted(p.name for p in config.parent.iterdir()) == [config.name]


def test_a_deep_hooks_file_is_refused_like_the_config(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "shop"
    hooks = project / ".claude" / "settings.json"
    hooks.parent.mkdir(parents=True)
    hooks.write_text('{"hooks": ' + "[" * DEEP + "]" * DEEP + "}")

    result = mentis("install", "claude-code", "--project", str(project), "--hooks")

    assert result.exit_code == 10, result.output
    assert str(hooks) in result.stderr and "nested" in result.stderr
    assert not (project / ".mcp.json").exists()


def test_install_list_reports_a_deep_config_as_an_error_row(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "shop"
    (project / ".cursor").mkdir(parents=True)
    (project / ".cursor" / "mcp.json").write_text(deep_json(DEEP))

    result = mentis("install", "--list", "--project", str(project), "--json")

    assert result.exit_code == 0, result.output
    (row,) = [r for r in json.loads(result.stdout)["harnesses"] if r["harness"] == "cursor"]
    assert "nested" in row["error"] and str(project / ".cursor" / "mcp.json") in row["error"]


def test_nesting_up_to_the_bound_parses_and_one_level_more_is_refused_with_line_and_column() -> None:
    depth = jsonc.MAX_DEPTH
    # the top-level object is one level, so depth - 1 arrays inside it reach the bound exactly
    ok = '{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    assert jsonc.loads(ok, "ok.json") == {"a": _nested_list(depth - 2)}
    over = '{"a": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(ConfigError) as caught:
        jsonc.loads(over, "over.json")
    assert caught.value.message.startswith(f"over.json: line 1 column {6 + depth}: ")
    assert f"nested more than {depth} levels" in caught.value.message


def _nested_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value
