"""`mentis instructions`: the AGENTS.md / CLAUDE.md block, printed or written between markers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from mentis.cli import app
from mentis.integrations.instructions import BEGIN, END


def mentis(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_the_block_says_when_to_search_record_and_mark_outdated() -> None:
    result = mentis("instructions")
    assert result.exit_code == 0, result.output
    block = result.stdout
    assert block.startswith(BEGIN + "\n") and block.endswith(END + "\n")
    for tool in ("`search`", "`record_attempt`", "`mark_conclusion_outdated`", "`recall`"):
        assert tool in block
    assert "failed checks too" in block and "stuck" in block


def test_claude_code_names_the_tools_as_claude_code_does() -> None:
    block = mentis("instructions", "--harness", "claude-code").stdout
    assert "`mcp__mentis__record_attempt`" in block and "`record_attempt`" not in block
    as_json = json.loads(mentis("instructions", "--harness", "claude-code", "--json").stdout)
    assert as_json == {"block": block, "suggested_file": "CLAUDE.md"}


def test_write_appends_once_then_changes_nothing(tmp_path: Path) -> None:
    agents = tmp_path / "AGENTS.md"
    agents.write_text("# Shop\n\nRun `make test` before pushing.\n")
    first = mentis("instructions", "--write", str(agents), "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout) == {"file": str(agents), "changed": True}
    written = agents.read_text()
    assert written == "# Shop\n\nRun `make test` before pushing.\n\n" + mentis("instructions").stdout

    second = mentis("instructions", "--write", str(agents), "--json")
    assert json.loads(second.stdout)["changed"] is False
    assert agents.read_text() == written


def test_write_replaces_the_block_between_the_markers_and_keeps_the_rest(tmp_path: Path) -> None:
    claude = tmp_path / "CLAUDE.md"
    claude.write_text(f"# Notes\n\n{BEGIN}\nold text\n{END}\n\n## Style\nTabs.\n")
    assert mentis("instructions", "--harness", "claude-code", "--write", str(claude)).exit_code == 0
    block = mentis("instructions", "--harness", "claude-code").stdout
    assert claude.read_text() == f"# Notes\n\n{block}\n## Style\nTabs.\n"


def test_write_creates_a_missing_file(tmp_path: Path) -> None:
    target = tmp_path / "AGENTS.md"
    assert mentis("instructions", "--write", str(target)).exit_code == 0
    assert target.read_text() == mentis("instructions").stdout


def test_unmatched_markers_are_refused_and_the_file_left_alone(tmp_path: Path) -> None:
    agents = tmp_path / "AGENTS.md"
    for text in (f"{BEGIN}\nno end\n", f"{END}\n{BEGIN}\n", f"{BEGIN}\n{END}\n{BEGIN}\n{END}\n"):
        agents.write_text(text)
        result = mentis("instructions", "--write", str(agents))
        assert result.exit_code == 10
        assert str(agents) in result.stderr and "markers" in result.stderr
        assert agents.read_text() == text


def test_writing_into_a_directory_is_refused(tmp_path: Path) -> None:
    result = mentis("instructions", "--write", str(tmp_path))
    assert result.exit_code == 10
    assert "is a directory" in result.stderr
    assert not list(tmp_path.iterdir())
