"""Docs match the code: every CLI command and MCP tool is documented and has help, and every link resolves."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path

import anyio
import pytest
from mcp import Client
from typer.main import get_command
from typer.testing import CliRunner

import mentis
from mentis.cli import app
from mentis.integrations.harnesses import HARNESSES
from mentis.mcp.server import build_server
from mentis.service.memory import Memory
from mentis.service.profiles import parse_profile

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
CLI_REFERENCE = (DOCS / "cli.md").read_text()
COMMANDS = sorted(get_command(app).commands)  # type: ignore[attr-defined]
PAGES = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted(DOCS.glob("*.md"))]
GUIDE = [p for p in sorted(DOCS.glob("*.md")) if p.name != "cli.md"]  # cli.md is generated


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a whole line) up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    body = text.split(f"\n{heading}\n", 1)[1]
    return re.split(rf"\n#{{1,{len(level)}}} ", body, maxsplit=1)[0]


def outside_code(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in outside_code(page.read_text()):
        if heading := re.match(r"#{1,6} (.+?)#*$", line):
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return found


def links(page: Path) -> list[str]:
    text = "\n".join(re.sub(r"`[^`]*`", "", line) for line in outside_code(page.read_text()))
    return re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text)


def test_the_public_api_is_exactly_the_exported_names() -> None:
    public = {n for n in dir(mentis) if not n.startswith("_") and not inspect.ismodule(getattr(mentis, n))}
    assert sorted(public | {"__version__"}) == sorted(mentis.__all__)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_cli_command_has_help_and_is_in_the_cli_reference(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert len(result.output.strip()) > 40
    assert f"`mentis {command}" in CLI_REFERENCE
    assert "(docs/cli.md)" in README


def test_every_mcp_tool_has_a_description_and_a_row_in_the_tools_page_that_points_to_its_docs(
    memory: Memory,
) -> None:
    async def tools() -> list[tuple[str, str]]:
        async with Client(build_server(memory, parse_profile("all"))) as client:
            return [(t.name, t.description or "") for t in (await client.list_tools()).tools]

    listed = anyio.run(tools)
    assert listed
    assert [name for name, description in listed if len(description) <= 40] == []
    index: dict[str, Path] = {}
    for row in section((DOCS / "tools.md").read_text(), "## Every tool").splitlines():
        if row.startswith("| ") and "](" in row:
            _, names, where = row.strip("| ").split(" | ")
            page = re.search(r"\]\(([^)#]*)", where)
            assert page is not None, row
            index |= dict.fromkeys(re.findall(r"`(\w+)`", names), DOCS / (page.group(1) or "tools.md"))
    assert sorted(index) == sorted(name for name, _ in listed)
    undocumented = []
    for name, page in index.items():
        text = page.read_text()
        named_in_a_first_column = re.search(rf"^\| [^|]*`{name}`[^|]*\|", text, re.M)
        if not named_in_a_first_column and f"**`{name}`**" not in text:
            undocumented.append(name)
    assert undocumented == []


def test_every_harness_is_named_in_the_readme_and_has_a_row_in_the_harnesses_page() -> None:
    page = (DOCS / "harnesses.md").read_text()
    installs, hooks = section(page, "## Harnesses"), section(page, "## Hooks")
    front_door = section(README, "## Installing into a harness")
    assert [name for name in HARNESSES if f"`{name}`" not in front_door] == []
    assert [name for name in HARNESSES if f"\n| `{name}` |" not in installs] == []
    with_hooks = [name for name, harness in HARNESSES.items() if not harness.no_hooks]
    assert with_hooks and [name for name in with_hooks if f"\n| `{name}` |" not in hooks] == []


def test_readme_quick_start_holds_the_two_commands() -> None:
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    assert "make run" in quick and "make test" in quick
    makefile = (ROOT / "Makefile").read_text()
    assert "\nrun:" in makefile and "\ntest:" in makefile


def test_readme_stays_a_front_door_of_at_most_300_lines() -> None:
    assert len(README.splitlines()) <= 300


def test_the_readme_maps_every_docs_page() -> None:
    mapped = {(ROOT / target).resolve() for target in links(ROOT / "README.md") if target.startswith("docs/")}
    assert [p.name for p in DOCS.glob("*.md") if p.resolve() not in mapped] == []


@pytest.mark.parametrize("page", GUIDE, ids=lambda p: p.name)
def test_every_docs_page_opens_with_a_title_and_a_paragraph_saying_what_it_covers(page: Path) -> None:
    title, blank, first, *_ = page.read_text().splitlines()
    assert title.startswith("# ") and blank == ""
    assert first and not first.startswith(("#", "|", "-", "```", "<")), first


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page.resolve()
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in anchors(dest)):
            broken.append(target)
    assert broken == []


def test_the_architecture_page_names_every_package_of_the_source_and_the_layers_linted() -> None:
    page = (DOCS / "architecture.md").read_text()
    src = ROOT / "src" / "mentis"
    packages = sorted(p.name for p in src.iterdir() if (p / "__init__.py").exists())
    assert [p for p in packages if f"`{p}/`" not in page] == []
    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    named = [name.removeprefix("mentis.") for line in layers["layers"] for name in line.split(" | ")]
    assert [n for n in named if f"`{n}`" not in page] == []
