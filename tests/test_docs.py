"""Docs match the code: every CLI command and MCP tool is documented and has help."""

from __future__ import annotations

import inspect
from pathlib import Path

import anyio
import pytest
from mcp import Client
from typer.main import get_command
from typer.testing import CliRunner

import mentis
from mentis.cli import app
from mentis.mcp_server import build_server
from mentis.memory import Memory

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
CLI_REFERENCE = (ROOT / "docs" / "cli.md").read_text()
GUIDE = "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "cli.md")
COMMANDS = sorted(get_command(app).commands)  # type: ignore[attr-defined]


def test_the_public_api_is_exactly_the_exported_names() -> None:
    public = {n for n in dir(mentis) if not n.startswith("_") and not inspect.ismodule(getattr(mentis, n))}
    assert sorted(public | {"__version__"}) == sorted(mentis.__all__)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_cli_command_has_help_and_is_in_the_cli_reference(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert len(result.output.strip()) > 40
    assert f"`mentis {command}" in CLI_REFERENCE
    assert "docs/cli.md" in README


def test_every_mcp_tool_has_a_description_and_is_in_the_guide(memory: Memory) -> None:
    async def tools() -> list[tuple[str, str]]:
        async with Client(build_server(memory)) as client:
            return [(t.name, t.description or "") for t in (await client.list_tools()).tools]

    listed = anyio.run(tools)
    assert listed
    for name, description in listed:
        assert len(description) > 40, name
        assert f"`{name}`" in GUIDE, name


def test_readme_quick_start_holds_the_two_commands() -> None:
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    assert "make run" in quick and "make test" in quick
    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    assert "\nrun:" in makefile and "\ntest:" in makefile
