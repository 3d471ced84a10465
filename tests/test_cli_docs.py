"""docs/cli.md is generated from the commands' own help and cannot drift from it."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from mentis.cli import app

ROOT = Path(__file__).parents[1]
REFERENCE = ROOT / "docs" / "cli.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands() -> list[list[str]]:
    root = get_command(app)
    out: list[list[str]] = []
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        if cmd.hidden:  # an older name: listed once in the header, tested in test_cli_aliases.py
            continue
        subs = getattr(cmd, "commands", None)
        out += [[name, sub] for sub in subs] if subs else [[name]]
    return sorted(out)


def test_the_cli_reference_is_what_the_generator_writes_now() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == _generator().render(), (
        "docs/cli.md has drifted from the commands' help; run: make docs"
    )


@pytest.mark.parametrize("command", _commands(), ids=" ".join)
def test_each_command_has_a_section_whose_options_its_help_lists(command: list[str]) -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    heading = f"`mentis {' '.join(command)}`"
    assert f"# {heading}" in text
    section = text.split(f"# {heading}", 1)[1].split("\n#", 1)[0]
    help_text = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"}).output
    for option in re.findall(r"\| `(-[^`]*?)(?: <[^`]*>)?` \|", section):
        for name in option.split(", "):
            assert name.split(" ")[0] in help_text, f"{name} of {heading} is not in its --help"
    first_line = section.split("```", 2)[2].strip().splitlines()[0]
    assert " ".join(first_line.split()[:4]) in " ".join(help_text.split())


def test_shell_completion_is_installable_and_documented() -> None:
    # the script a shell sources, asked for by name (``--show-completion`` alone detects the shell
    # from the process tree, which a test worker's parents do not always show)
    result = CliRunner().invoke(app, [], prog_name="mentis", env={"_MENTIS_COMPLETE": "source_bash"})
    assert result.exit_code == 0, (result.output, result.exception)
    assert "_MENTIS_COMPLETE" in result.output and "complete " in result.output
    assert "mentis --install-completion" in REFERENCE.read_text(encoding="utf-8")
