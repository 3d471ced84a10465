"""Tool profiles: ``mentis serve --tools`` (and ``MENTIS_TOOLS``) chooses what tools/list offers;
a tool outside the profile is an unknown tool; admin tools need an explicit profile on stdio and an
admin token over HTTP; the signing phases are a profile of their own and run only the profile's
own tools."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest
from mcp import Client
from typer.testing import CliRunner

from mentis.api.agents import ListAgentsInput
from mentis.cli import app
from mentis.errors import ConfigError
from mentis.mcp.server import build_server
from mentis.service.memory import Caller, Memory
from mentis.service.operations import OPERATIONS
from mentis.service.profiles import DEFAULT, GROUPS, PROFILES, parse_profile

from .conftest import MENTIS, REPO
from .http_support import LiveServer, mcp_client
from .remote_support import http_server, keygen, make_token, proxy_params

ADMIN = {op.name for op in OPERATIONS if op.admin}
EVERY = {op.name for op in OPERATIONS}
CORE = {"search", "recall", "record_attempt", "mark_conclusion_outdated", "forget_attempt"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_every_operation_is_in_exactly_one_group_and_all_offers_every_one() -> None:
    grouped = [name for names in GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(EVERY)
    assert set(PROFILES["all"]) == EVERY
    assert set(parse_profile("all").names) == EVERY


def test_the_admin_operations_are_the_registry_writes_and_the_webhook_tools_and_no_default_holds_one() -> (
    None
):
    registry = {"register_agent", "add_agent_key", "revoke_agent_key", "disable_agent"}
    assert registry | set(GROUPS["webhooks"]) == ADMIN
    assert set(GROUPS["agents"]) >= registry
    assert not ADMIN & set(DEFAULT)
    assert not ADMIN & set(parse_profile(None).names)
    assert not set(GROUPS["signing"]) & set(parse_profile(None).names)


def test_profiles_combine_in_the_registry_order_and_blank_is_the_default() -> None:
    both = parse_profile("skills, core")
    assert set(both.names) == CORE | set(GROUPS["skills"])
    assert list(both.names) == [op.name for op in OPERATIONS if op.name in both.names]
    assert parse_profile("").names == parse_profile(None).names == parse_profile("default").names
    assert set(parse_profile("default").names) == CORE


def test_an_unknown_profile_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_profile("core,everything")
    assert "'everything'" in str(raised.value) and "core" in str(raised.value)
    assert "thoughts" in str(raised.value) and "all" in str(raised.value)


@pytest.mark.parametrize("how", ["option", "env"])
def test_serve_with_an_unknown_profile_exits_with_the_config_code_before_opening_a_store(
    tmp_path: Path, how: str
) -> None:
    db = tmp_path / "mentis.db"
    argv = ["serve", "--db", str(db)] + (["--tools", "nope"] if how == "option" else [])
    env = {"MENTIS_TOOLS": "nope"} if how == "env" else {}
    done = CliRunner().invoke(app, argv, env=env)
    assert done.exit_code == ConfigError.exit_code, done.output
    assert "unknown tool profile 'nope'" in done.stderr
    assert not db.exists()


async def _listed(memory: Memory, spec: str | None) -> set[str]:
    async with Client(build_server(memory, parse_profile(spec))) as client:
        return {t.name for t in (await client.list_tools()).tools}


@pytest.mark.anyio
async def test_stdio_lists_the_profile_and_a_tool_outside_it_is_an_unknown_tool(memory: Memory) -> None:
    assert await _listed(memory, None) == CORE
    assert await _listed(memory, "agents") == set(GROUPS["agents"])
    assert await _listed(memory, "all") == EVERY
    async with Client(build_server(memory)) as client:
        refused = await client.call_tool("register_agent", {"agent_id": "mallory"})
        thought = await client.call_tool("append_thought", {"repository": REPO, "type": "Finding"})
    for result, name in ((refused, "register_agent"), (thought, "append_thought")):
        assert result.is_error
        assert result.content[0].text == f"Unknown tool: {name}"  # type: ignore[union-attr]
    assert memory.list_agents(Caller(agent_id="owner", admin=True), ListAgentsInput()).agents == []


async def _http_tools(live: LiveServer, token: str) -> set[str]:
    async with mcp_client(live, token) as client:
        return {t.name for t in (await client.list_tools()).tools}


@pytest.mark.anyio
async def test_over_http_only_an_admin_token_sees_admin_tools_and_only_when_the_profile_has_them(
    db_path: Path,
) -> None:
    with LiveServer(db_path, tools="all") as live:
        write, admin = live.token("write"), live.token("admin")
        assert await _http_tools(live, admin) == EVERY
        assert await _http_tools(live, write) == EVERY - ADMIN
        async with mcp_client(live, write) as client:
            refused = await client.call_tool("disable_agent", {"agent_id": "bob", "reason": "r"})
            assert refused.is_error and refused.content[0].text == "Unknown tool: disable_agent"  # type: ignore[union-attr]
            prepared = await client.call_tool(
                "prepare_write", {"tool": "register_agent", "arguments": {"agent_id": "mallory"}}
            )
            assert prepared.is_error
            assert (
                prepared.content[0].text == "Error executing tool prepare_write: Unknown tool: register_agent"
            )  # type: ignore[union-attr]
    with LiveServer(db_path, tools="default") as live:
        assert await _http_tools(live, live.token("admin")) == CORE
        assert await _http_tools(live, live.token("write")) == CORE


@pytest.mark.anyio
async def test_over_http_the_signing_phases_run_only_the_profiles_tools(db_path: Path) -> None:
    with LiveServer(db_path, tools="core,signing") as live:
        async with mcp_client(live, live.token("write")) as client:
            outside = await client.call_tool(
                "prepare_write",
                {
                    "tool": "append_thought",
                    "arguments": {"repository": REPO, "type": "Finding", "content": "x"},
                },
            )
            inside = await client.call_tool(
                "prepare_write",
                {
                    "tool": "record_attempt",
                    "arguments": {"repository": REPO, "task_id": "t", "action": "a", "observation": "o"},
                },
            )
        assert outside.is_error
        assert outside.content[0].text == "Error executing tool prepare_write: Unknown tool: append_thought"  # type: ignore[union-attr]
        assert not inside.is_error and inside.structured_content["kind"] == "attempt"  # type: ignore[index]


def test_install_writes_the_profile_into_the_stdio_entry_and_refuses_it_for_http(tmp_path: Path) -> None:
    import json

    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config")}
    done = CliRunner().invoke(app, ["install", "claude-code", "--tools", "core,skills", "--json"], env=env)
    assert done.exit_code == 0, done.output
    entry = json.loads((tmp_path / ".claude.json").read_text())["mcpServers"]["mentis"]
    assert entry["env"] == {"MENTIS_AGENT_ID": "claude-code", "MENTIS_TOOLS": "core,skills"}
    refused = CliRunner().invoke(
        app, ["install", "cursor", "--http", "http://127.0.0.1:9471/mcp", "--tools", "core"], env=env
    )
    assert refused.exit_code == 2 and "--tools goes with --stdio" in refused.stderr
    unknown = CliRunner().invoke(app, ["install", "cursor", "--tools", "nope"], env=env)
    assert unknown.exit_code == ConfigError.exit_code and "unknown tool profile" in unknown.stderr
    assert not (tmp_path / ".cursor").exists()


def _proxy_env(mentis_env: dict[str, str], token: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in mentis_env.items() if k not in ("MENTIS_DB", "MENTIS_AGENT_ID")}
    return {**env, "MENTIS_TOKEN": token, "MENTIS_HOME": str(home)}


@pytest.mark.anyio
async def test_the_remote_proxy_publishes_and_forwards_only_its_profiles_tools(
    mentis_env: dict[str, str], db_path: Path, tmp_path: Path
) -> None:
    env = _proxy_env(mentis_env, make_token(db_path, "proxied"), tmp_path / "proxy")
    with anyio.fail_after(90):
        async with http_server(mentis_env) as url, Client(proxy_params(url, env, "--tools", "core")) as proxy:
            assert {t.name for t in (await proxy.list_tools()).tools} == CORE
            refused = await proxy.call_tool("append_thought", {"repository": REPO, "type": "Finding"})
            found = await proxy.call_tool("search", {"query": "anything"})
    assert refused.is_error and refused.content[0].text == "Unknown tool: append_thought"  # type: ignore[union-attr]
    assert not found.is_error


@pytest.mark.anyio
async def test_a_signing_proxy_refuses_at_start_a_server_without_the_signing_phases(
    mentis_env: dict[str, str], db_path: Path, tmp_path: Path
) -> None:
    keygen(mentis_env, "alice", tmp_path / "alice.pem")
    env = {
        **_proxy_env(mentis_env, make_token(db_path, "alice"), tmp_path / "proxy"),
        "MENTIS_SIGNING_KEY": str(tmp_path / "alice.pem"),
    }
    with anyio.fail_after(90):
        async with http_server(mentis_env, "127.0.0.1:0", "--tools", "default") as url:
            done = await anyio.run_process(
                [*MENTIS, "serve", "--remote", url], env=env, check=False, stdin=subprocess.DEVNULL
            )
    assert done.returncode == ConfigError.exit_code, done.stderr
    assert b"does not offer prepare_write and signed_write" in done.stderr
    assert b"--tools default,signing" in done.stderr
