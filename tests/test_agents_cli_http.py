"""The agent registry through its transports: over real HTTP only an admin token changes it (REST
and MCP), anyone may read it; the `mentis agent` commands on a real SQLite file (CliRunner),
checked with the library."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from mentis.cli import app
from mentis.config import Settings
from mentis.ledger import signing
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Memory

from .http_support import LiveServer, mcp_client


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def live(db_path: Path) -> Iterator[LiveServer]:
    with LiveServer(db_path) as server:
        yield server


@pytest.mark.anyio
async def test_only_an_admin_token_changes_the_registry_and_any_token_reads_it(live: LiveServer) -> None:
    writer, admin = live.token("write"), live.token("admin", agent="ops")
    before = live.ledger()
    async with live.client(writer) as http:
        refused = await http.post("/v1/register_agent", json={"agent_id": "alice"})
    assert refused.status_code == 403 and "admin" in refused.text
    async with mcp_client(live, writer) as client:
        result = await client.call_tool("register_agent", {"agent_id": "alice"})
    # over MCP a non-admin token is not offered the admin tools at all: an unknown tool
    assert result.is_error and result.content[0].text == "Unknown tool: register_agent"
    assert live.ledger() == before

    public = signing.public_text(Ed25519PrivateKey.generate().public_key())
    async with live.client(admin) as http:
        made = await http.post("/v1/register_agent", json={"agent_id": "alice", "aliases": ["alice@ci"]})
        assert made.status_code == 200, made.text
        keyed = await http.post("/v1/add_agent_key", json={"agent_id": "alice", "public_key": public})
        assert keyed.status_code == 200, keyed.text
    async with live.client(writer) as http:
        shown = (await http.post("/v1/show_agent", json={"agent_id": "alice@ci"})).json()
    assert shown["agent_id"] == "alice" and shown["must_sign"] is True
    assert [k["public_key"] for k in shown["keys"]] == [public]
    assert shown["keys"][0]["added_by"] == "ops"
    alice_token = live.token("write", agent="alice")  # alice has a key: unsigned writes are refused
    async with live.client(alice_token) as http:
        unsigned = await http.post(
            "/v1/record_attempt",
            json={"repository": "github.com/acme/shop", "task_id": "t", "action": "a", "observation": "o"},
        )
    assert unsigned.status_code == 403 and "must be signed" in unsigned.text


def test_the_agent_commands_register_list_show_revoke_and_disable(tmp_path: Path) -> None:
    db = tmp_path / "mentis.db"
    env = {"MENTIS_EMBEDDER": "hash", "MENTIS_HOME": str(tmp_path)}
    runner = CliRunner()

    def cli(*args: str) -> dict[str, object]:
        done = runner.invoke(app, [*args, "--db", str(db), "--json"], env=env)
        assert done.exit_code == 0, done.output
        return dict(json.loads(done.stdout))

    made = cli("agent", "keygen", "--agent", "alice", "--out", str(tmp_path / "alice.pem"))
    key_id = str(made["key_id"])
    cli("agent", "register", "--agent", "bob", "--display-name", "Bob", "--alias", "bob@ci")
    listed = cli("agent", "list")
    assert [a["agent_id"] for a in listed["agents"]] == ["alice", "bob"]  # type: ignore[index, union-attr]
    revoked = cli("agent", "revoke-key", "--agent", "alice", "--key-id", key_id, "--reason", "rotated")
    assert revoked["agent"]["keys"][0]["reason"] == "rotated"  # type: ignore[index]
    disabled = cli("agent", "disable", "--agent", "bob", "--reason", "left")
    assert disabled["agent"]["disabled_reason"] == "left"  # type: ignore[index]
    shown = cli("agent", "show", "--agent", "bob@ci")
    assert shown["agent_id"] == "bob" and shown["display_name"] == "Bob"

    again = runner.invoke(
        app, ["agent", "disable", "--agent", "bob", "--reason", "x", "--db", str(db)], env=env
    )
    assert again.exit_code == 4 and "is disabled" in again.output  # Conflict
    bad = runner.invoke(
        app, ["agent", "add-key", "--agent", "alice", "--public-key", "short", "--db", str(db)], env=env
    )
    assert bad.exit_code == 2 and "public_key" in bad.output

    memory = Memory.open(Settings(home=tmp_path, db_path=db, embedder="hash"), HashEmbedder())
    try:
        registry = memory.store.agent_registry()
        assert registry.keys[key_id].revoked_at is not None
        assert registry.agents["bob"].disabled_at is not None
        assert memory.store.repositories() == []
    finally:
        memory.close()


def test_keygen_over_an_existing_file_writes_and_registers_nothing(tmp_path: Path) -> None:
    db, out = tmp_path / "mentis.db", tmp_path / "taken.pem"
    out.write_text("mine")
    done = CliRunner().invoke(
        app,
        ["agent", "keygen", "--agent", "alice", "--out", str(out), "--db", str(db)],
        env={"MENTIS_EMBEDDER": "hash", "MENTIS_HOME": str(tmp_path)},
    )
    assert done.exit_code == 2 and "already exists" in done.output
    assert out.read_text() == "mine"
    memory = Memory.open(Settings(home=tmp_path, db_path=db, embedder="hash"), HashEmbedder())
    try:
        assert memory.store.agent_registry().agents == {}
    finally:
        memory.close()


def test_a_failed_registration_leaves_no_key_file(tmp_path: Path) -> None:
    db, out = tmp_path / "mentis.db", tmp_path / "alice.pem"
    env = {"MENTIS_EMBEDDER": "hash", "MENTIS_HOME": str(tmp_path)}
    runner = CliRunner()
    runner.invoke(app, ["agent", "register", "--agent", "alice", "--db", str(db)], env=env)
    runner.invoke(app, ["agent", "disable", "--agent", "alice", "--reason", "gone", "--db", str(db)], env=env)
    done = runner.invoke(
        app, ["agent", "keygen", "--agent", "alice", "--out", str(out), "--db", str(db)], env=env
    )
    assert done.exit_code == 4 and "disabled" in done.output
    assert not out.exists()
