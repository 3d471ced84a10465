"""`mentis install` options, hooks and bad input: dry runs, --list, symlinks, malformed configs."""

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
from mentis.integrations.harnesses import get
from mentis.integrations.harnesses.base import Env, Server
from mentis.integrations.harnesses.install import apply, plan_install

MENTIS = str(Path(sys.executable).parent / "mentis")


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


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


CLAUDE_SETTINGS = """{
  "permissions": {"allow": ["Bash(npm test:*)"]},
  "hooks": {
    "PostToolUse": [
      {
        "matcher": "Edit|Write",
        "hooks": [{"type": "command", "command": "npx prettier --write"}]
      }
    ]
  }
}
"""


def test_dry_run_prints_a_unified_diff_and_writes_nothing(home: Path) -> None:
    config = home / ".cursor" / "mcp.json"
    config.parent.mkdir()
    config.write_text('{\n  "mcpServers": {}\n}\n')
    before = files_under(home)

    result = mentis("install", "cursor", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"--- {config}\n+++ {config}\n@@")
    assert f'+      "command": "{MENTIS}",' in result.stdout
    assert files_under(home) == before

    as_json = mentis("install", "cursor", "--dry-run", "--json")
    report = json.loads(as_json.stdout)
    assert report["dry_run"] is True and report["file"] == str(config)
    assert report["files"][0]["diff"] == result.stdout
    assert files_under(home) == before

    assert mentis("install", "cursor").exit_code == 0
    unchanged = mentis("install", "cursor", "--dry-run")
    assert (unchanged.stdout, unchanged.stderr) == ("", "cursor: nothing would change\n")


def test_json_output_names_every_file_written(home: Path) -> None:
    result = mentis("install", "claude-code", "--hooks", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["file"] == str(home / ".claude.json")
    assert [(f["file"], f["parts"], f["created"]) for f in report["files"]] == [
        (str(home / ".claude.json"), ["mcp"], True),
        (str(home / ".claude" / "settings.json"), ["hooks"], True),
    ]


def test_an_unknown_harness_lists_the_known_ones(home: Path) -> None:
    for command in ("install", "uninstall"):
        result = mentis(command, "claude-cod")
        assert result.exit_code == 2
        assert "unknown harness 'claude-cod'" in result.stderr
        for name in ("claude-code", "claude-desktop", "codex", "cursor", "vscode", "gemini-cli", "opencode"):
            assert name in result.stderr
    assert mentis("instructions", "--harness", "nope").exit_code == 2
    assert not files_under(home)


@pytest.mark.parametrize(
    ("harness", "relpath", "text", "where"),
    [
        (
            "claude-code",
            ".claude.json",
            '{\n  "mcpServers": {\n    "a": {"command": "x"},,\n  }\n}\n',
            "line 3 column",
        ),
        ("vscode", ".config/Code/User/mcp.json", '{\n  "servers": {\n    "a": {\n', "line 4 column 1"),
        ("gemini-cli", ".gemini/settings.json", '{"theme": "x" /* unclosed\n}', "line 1 column 15"),
        ("codex", ".codex/config.toml", 'model = "o3"\n[mcp_servers.docs\ncommand = "x"\n', "line 2 column"),
        ("windsurf", ".codeium/windsurf/mcp_config.json", "[1, 2]\n", "not a JSON object"),
        ("cursor", ".cursor/mcp.json", '{"mcpServers": ["a"]}', "'mcpServers' is not an object"),
        ("codex", ".codex/config.toml", 'mcp_servers = "none"\n', "'mcp_servers' is not a table"),
        ("gemini-cli", ".gemini/settings.json", '{"mcpServers": null}', "'mcpServers' is not an object"),
    ],
)
def test_a_malformed_config_is_named_with_its_position_and_left_untouched(
    home: Path, harness: str, relpath: str, text: str, where: str
) -> None:
    path = home / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    before = files_under(home)
    commands = [["install", harness], ["install", harness, "--dry-run"]]
    if "line" in where:  # a file that does not parse cannot be uninstalled from either
        commands.append(["uninstall", harness])
    for command in commands:
        result = mentis(*command)
        assert result.exit_code == 10, (command, result.output)
        assert str(path) in result.stderr and where in result.stderr
        assert files_under(home) == before  # no backup, no temp file, no change


def test_a_symlinked_config_is_followed_and_its_target_backed_up(home: Path, tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "gemini-settings.json"
    original = '{\n  "theme": "Dracula"\n}\n'
    real.write_text(original)
    link = home / ".gemini" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(real)

    result = mentis("install", "gemini-cli", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)["files"][0]
    assert (report["file"], report["target"]) == (str(link), str(real))
    assert link.is_symlink() and link.resolve() == real
    assert "mentis" in json.loads(real.read_text())["mcpServers"]
    (backup,) = dotfiles.glob("gemini-settings.json.mentis-backup-*")
    assert backup.read_text() == original
    assert not list(link.parent.glob("*.mentis-backup-*"))

    assert mentis("uninstall", "gemini-cli").exit_code == 0
    assert link.is_symlink() and real.read_text() == original


def test_list_shows_each_harness_config_found_and_mentis_in_it(home: Path) -> None:
    (home / ".cursor").mkdir()
    (home / ".cursor" / "mcp.json").write_text('{"mcpServers": {}}')
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text("{oops")
    assert mentis("install", "codex").exit_code == 0
    assert mentis("install", "claude-code", "--hooks").exit_code == 0

    result = mentis("install", "--list", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["harness"]: r for r in json.loads(result.stdout)["harnesses"]}
    assert list(rows) == [
        "claude-code",
        "claude-desktop",
        "codex",
        "cursor",
        "vscode",
        "gemini-cli",
        "opencode",
        "windsurf",
    ]
    assert (rows["claude-code"]["found"], rows["claude-code"]["mentis"], rows["claude-code"]["hooks"]) == (
        True,
        True,
        True,
    )
    assert (rows["codex"]["found"], rows["codex"]["mentis"], rows["codex"]["hooks"]) == (True, True, False)
    assert rows["claude-desktop"]["hooks"] is None
    assert (rows["cursor"]["found"], rows["cursor"]["mentis"], rows["cursor"]["hooks"]) == (
        True,
        False,
        None,
    )
    assert (rows["vscode"]["found"], rows["vscode"]["mentis"]) == (False, False)
    assert rows["gemini-cli"]["found"] is True and "line 1 column 2" in rows["gemini-cli"]["error"]
    assert rows["windsurf"]["file"] == str(home / ".codeium/windsurf/mcp_config.json")

    project = mentis("install", "--list", "--project", str(home), "--json")
    rows = {r["harness"]: r for r in json.loads(project.stdout)["harnesses"]}
    assert rows["claude-code"]["file"] == str(home / ".mcp.json")
    assert rows["windsurf"]["file"] is None and "no project-level" in rows["windsurf"]["note"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["install"], "name a harness"),
        (["install", "codex", "--stdio", "--http", "http://h/mcp"], "choose one of --stdio and --http"),
        (["install", "codex", "--token-file", "t"], "--token-file goes with --http"),
        (["install", "codex", "--http", "ftp://h/mcp"], "expected an http(s) URL"),
        (["install", "codex", "--http", "http://h/mcp", "--token-file", "/no/such/token"], "no such file"),
        (["install", "codex", "--project", "/no/such/dir"], "not a directory"),
        (["install", "--list", "codex"], "--list takes only"),
        (["install", "--list", "--project", "/no/such/dir"], "not a directory"),
    ],
)
def test_bad_options_get_a_clear_error_and_write_nothing(home: Path, args: list[str], message: str) -> None:
    result = mentis(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert not files_under(home)


def test_claude_code_hooks_are_added_beside_the_users_own_and_removed_alone(home: Path) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(CLAUDE_SETTINGS)

    assert mentis("install", "claude-code", "--hooks").exit_code == 0
    hooks = json.loads(settings.read_text())["hooks"]
    assert hooks["PostToolUse"][0] == {
        "matcher": "Edit|Write",
        "hooks": [{"type": "command", "command": "npx prettier --write"}],
    }
    assert hooks["PostToolUse"][1] == {
        "matcher": "Bash",
        "hooks": [{"type": "command", "command": f"{MENTIS} hook claude-code post-tool-use", "timeout": 15}],
    }
    assert hooks["SessionStart"] == [
        {"hooks": [{"type": "command", "command": f"{MENTIS} hook claude-code session-start", "timeout": 15}]}
    ]
    assert (
        hooks["UserPromptSubmit"][0]["hooks"][0]["command"] == f"{MENTIS} hook claude-code user-prompt-submit"
    )
    installed = settings.read_text()

    assert json.loads(mentis("install", "claude-code", "--hooks", "--json").stdout)["changed"] is False
    assert settings.read_text() == installed

    assert mentis("uninstall", "claude-code").exit_code == 0
    assert settings.read_text() == CLAUDE_SETTINGS
    assert "mentis" not in json.loads((home / ".claude.json").read_text()).get("mcpServers", {})


def test_a_hook_from_an_older_mentis_path_is_replaced_not_duplicated(home: Path) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    old = {"type": "command", "command": "/old/venv/bin/mentis hook claude-code session-start"}
    settings.write_text(json.dumps({"hooks": {"SessionStart": [{"hooks": [old]}]}}, indent=2))

    assert mentis("install", "claude-code", "--hooks").exit_code == 0
    starts = json.loads(settings.read_text())["hooks"]["SessionStart"]
    assert [s["hooks"][0]["command"] for s in starts] == [f"{MENTIS} hook claude-code session-start"]


def test_gemini_hooks_use_its_own_event_names_in_settings_json(home: Path) -> None:
    assert mentis("install", "gemini-cli", "--hooks").exit_code == 0
    gemini = json.loads((home / ".gemini" / "settings.json").read_text())
    assert set(gemini) == {"mcpServers", "hooks"}
    assert gemini["hooks"]["AfterTool"] == [
        {
            "matcher": "run_shell_command",
            "hooks": [
                {
                    "name": "mentis-post-tool-use",
                    "type": "command",
                    "command": f"{MENTIS} hook gemini-cli post-tool-use",
                }
            ],
        }
    ]
    assert set(gemini["hooks"]) == {"SessionStart", "BeforeAgent", "AfterTool"}


def test_codex_hooks_go_to_hooks_json_beside_config_toml_and_come_out_again(home: Path) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('model = "gpt-5-codex"\n')
    hooks_file = home / ".codex" / "hooks.json"
    original_hooks = (
        '{\n  "hooks": {\n    "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]\n'
        "  }\n}\n"
    )
    hooks_file.write_text(original_hooks)

    result = mentis("install", "codex", "--hooks", "--json")
    assert result.exit_code == 0, result.output
    assert [f["file"] for f in json.loads(result.stdout)["files"]] == [str(config), str(hooks_file)]
    hooks = json.loads(hooks_file.read_text())["hooks"]
    assert set(hooks) == {"Stop", "SessionStart", "UserPromptSubmit", "PostToolUse"}
    assert hooks["PostToolUse"] == [
        {
            "matcher": "Bash",
            "hooks": [{"type": "command", "command": f"{MENTIS} hook codex post-tool-use", "timeout": 15}],
        }
    ]
    assert mentis("uninstall", "codex").exit_code == 0
    assert config.read_text() == 'model = "gpt-5-codex"\n'
    assert hooks_file.read_text() == original_hooks


@pytest.mark.parametrize("harness", ["claude-desktop", "cursor", "vscode", "opencode", "windsurf"])
def test_hooks_on_a_harness_without_a_hook_system_say_so_and_install_the_server(
    home: Path, harness: str
) -> None:
    result = mentis("install", harness, "--hooks", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["hooks_note"] and [f["parts"] for f in report["files"]] == [["mcp"]]


def test_uninstall_without_a_config_changes_nothing(home: Path) -> None:
    result = mentis("uninstall", "vscode", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["files"] == []
    assert not files_under(home)


def test_a_config_that_cannot_be_written_is_reported_and_nothing_is_left_behind(home: Path) -> None:
    (home / ".cursor").write_text("a file where the .cursor folder should be")
    before = files_under(home)
    result = mentis("install", "cursor")
    assert result.exit_code == 10, result.output
    assert "cannot write" in result.stderr and str(home / ".cursor") in result.stderr
    assert files_under(home) == before


def test_the_documented_harness_examples_run_as_written(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (Path(__file__).parents[2] / "docs" / "harnesses.md").read_text()
    block = page.split("## Harnesses", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].split() for line in block.splitlines() if line.startswith("mentis ")]
    assert [c[1] for c in commands] == ["install", "install", "install", "install", "instructions"]
    token = home / ".local/share/mentis/admin.token"
    token.parent.mkdir(parents=True)
    token.write_text("mts_docs_token\n")
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    for words in commands:
        args = [w.replace("~", str(home), 1) if w.startswith("~") else w for w in words[1:]]
        result = mentis(*args)
        assert result.exit_code == 0, (words, result.output)
    assert (home / ".claude.json").is_file() and (workdir / ".codex" / "hooks.json").is_file()
    assert "mts_docs_token" not in (home / ".codex" / "config.toml").read_text()
    assert "record_attempt" in (workdir / "AGENTS.md").read_text()


def test_a_config_rewritten_by_its_harness_meanwhile_is_not_overwritten(home: Path) -> None:
    config = home / ".claude.json"
    config.write_text('{"numStartups": 1}')
    changes, _ = plan_install(
        get("claude-code"), Env.current(), Server((MENTIS,)), None, hooks=False, argv=[MENTIS]
    )
    config.write_text('{"numStartups": 2}')  # Claude Code saves its counters in between
    with pytest.raises(ConfigError, match="changed while Mentis was editing it"):
        apply(changes)
    assert config.read_text() == '{"numStartups": 2}'
    assert not list(home.glob(".claude.json.mentis-backup-*"))


def test_reinstalling_keeps_what_the_user_added_to_the_mentis_entry(home: Path) -> None:
    assert mentis("install", "gemini-cli").exit_code == 0
    settings = home / ".gemini" / "settings.json"
    data = json.loads(settings.read_text())
    data["mcpServers"]["mentis"]["env"]["MENTIS_DB"] = "/srv/team/mentis.db"
    data["mcpServers"]["mentis"]["trust"] = True
    data["mcpServers"]["mentis"]["command"] = "/old/venv/bin/mentis"
    settings.write_text(json.dumps(data, indent=2) + "\n")

    assert mentis("install", "gemini-cli").exit_code == 0
    entry = json.loads(settings.read_text())["mcpServers"]["mentis"]
    assert entry == {
        "command": MENTIS,
        "args": ["serve"],
        "env": {"MENTIS_AGENT_ID": "gemini-cli", "MENTIS_DB": "/srv/team/mentis.db"},
        "trust": True,
    }
    again = mentis("install", "gemini-cli", "--json")
    assert json.loads(again.stdout)["changed"] is False

    assert mentis("install", "gemini-cli", "--http", "http://127.0.0.1:9471/mcp").exit_code == 0
    entry = json.loads(settings.read_text())["mcpServers"]["mentis"]
    assert entry == {
        "httpUrl": "http://127.0.0.1:9471/mcp",
        "headers": {"Authorization": "Bearer ${MENTIS_TOKEN}"},
        "trust": True,
    }


def test_an_http_install_says_how_the_harness_gets_the_token_unless_its_entry_names_the_file(
    home: Path, tmp_path: Path
) -> None:
    url, token = "http://127.0.0.1:9471/mcp", tmp_path / "team.token"
    token.write_text("mt_0123456789ab_secret\n")
    cursor = mentis("install", "cursor", "--http", url, "--token-file", str(token))
    assert cursor.exit_code == 0, cursor.output
    note = "Cursor reads the token from $MENTIS_TOKEN: set it where Cursor starts, e.g. export"
    assert f"{note} MENTIS_TOKEN=$(cat {token})" in " ".join(cursor.output.split())
    opencode = mentis("install", "opencode", "--http", url, "--token-file", str(token))
    assert opencode.exit_code == 0, opencode.output
    assert "MENTIS_TOKEN" not in opencode.output  # its entry reads {file:…} itself
    bare = mentis("install", "opencode", "--http", url)
    assert "e.g. export MENTIS_TOKEN=<token>" in bare.output
    dry = mentis("install", "cursor", "--http", url, "--dry-run")
    assert "MENTIS_TOKEN=" not in dry.output.replace("${env:MENTIS_TOKEN}", "")
