"""The entry `mentis install` writes really starts Mentis: the official MCP client launches it over
real stdio, and a write through it is attributed to the harness named in MENTIS_AGENT_ID."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from mentis.cli import app


def installed_entry(harness: str, project: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["install", harness, "--project", str(project), "--json"])
    assert result.exit_code == 0, result.output
    path = Path(json.loads(result.stdout)["file"])
    if path.suffix == ".toml":
        entry: dict[str, Any] = tomllib.loads(path.read_text())["mcp_servers"]["mentis"]
    else:
        entry = json.loads(path.read_text())["mcpServers"]["mentis"]
    return entry


async def record_and_read_agent(entry: dict[str, Any], store: Path) -> str:
    env = {**entry["env"], "MENTIS_HOME": str(store), "MENTIS_EMBEDDER": "hash", "PATH": os.environ["PATH"]}
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env)
    with anyio.fail_after(120):
        async with Client(params) as client:
            recorded = await client.call_tool(
                "record_attempt",
                {
                    "repository": "github.com/acme/shop",
                    "task_id": "install-smoke",
                    "action": "Ran the suite after installing Mentis",
                    "files": ["README.md"],
                    "observation": "All green",
                    "check": {"command": "pytest", "status": "passed", "exit_code": 0},
                },
            )
            assert not recorded.is_error, recorded
            rows = await client.call_tool("recall", {"sql": "select agent_id from attempts"})
            assert not rows.is_error, rows
            data = rows.structured_content or json.loads(rows.content[0].text)  # type: ignore[union-attr]
            assert data["rows"] and len(data["rows"]) == 1
            return str(data["rows"][0][0])


@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_the_installed_stdio_entry_serves_mcp_and_attributes_writes_to_the_harness(
    tmp_path: Path, harness: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    entry = installed_entry(harness, project)
    assert (
        Path(entry["command"]).is_absolute() and Path(entry["command"]).parent == Path(sys.executable).parent
    )
    agent = anyio.run(record_and_read_agent, entry, tmp_path / "store")
    assert agent == harness
