"""The webhook operations through MCP (official client over real HTTP), REST and the CLI on a
real SQLite file: only an admin reaches them, each bad input is refused naming its field, and a
refused call writes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mentis.cli import app
from mentis.service.tokens import TokenStore
from tests.http_support import LiveServer, mcp_client

from .conftest import Receiver

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("create_webhook", {"url": "not a url", "events": ["attempt.recorded"], "token_id": "0" * 12}, "url"),
    (
        "create_webhook",
        {"url": "https://10.0.0.1/x", "events": ["attempt.recorded"], "token_id": "0" * 12},
        "url",
    ),
    (
        "create_webhook",
        {"url": "http://127.0.0.1:9/x", "events": ["nothing.happened"], "token_id": "0" * 12},
        "events",
    ),
    ("create_webhook", {"url": "http://127.0.0.1:9/x", "events": [], "token_id": "0" * 12}, "events"),
    (
        "create_webhook",
        {"url": "http://127.0.0.1:9/x", "events": ["attempt.recorded"], "token_id": "nope"},
        "token_id",
    ),
    (
        "create_webhook",
        {"url": "http://127.0.0.1:9/x", "events": ["attempt.recorded"], "token_id": "0" * 12},
        "token_id",
    ),
    (
        "create_webhook",
        {
            "url": "http://127.0.0.1:9/x",
            "events": ["attempt.recorded"],
            "token_id": "0" * 12,
            "status": "great",
        },
        "status",
    ),
    (
        "create_webhook",
        {
            "url": "http://127.0.0.1:9/x",
            "events": ["attempt.recorded"],
            "token_id": "0" * 12,
            "thought_type": "Poem",
        },
        "thought_type",
    ),
    (
        "create_webhook",
        {
            "url": "http://127.0.0.1:9/x",
            "events": ["attempt.recorded"],
            "token_id": "0" * 12,
            "secret": "mine",
        },
        "secret",
    ),
    ("list_webhooks", {"verbose": True}, "verbose"),
    ("delete_webhook", {"webhook_id": "hook-1"}, "webhook_id"),
    ("webhook_deliveries", {"state": "lost"}, "state"),
    ("webhook_deliveries", {"limit": 0}, "limit"),
    ("redeliver_webhook", {"delivery_id": "msg_a b"}, "delivery_id"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def live(db_path: Path) -> Iterator[LiveServer]:
    with LiveServer(db_path) as server:
        yield server


@pytest.mark.anyio
async def test_every_bad_input_over_rest_and_mcp_is_refused_naming_its_field_and_writes_nothing(
    live: LiveServer,
) -> None:
    admin = live.token("admin")
    async with live.client(admin) as http:
        for name, body, field in BAD:
            answer = await http.post(f"/v1/{name}", json=body)
            assert answer.status_code == 422 and field in answer.text, (name, body, answer.text)
    async with mcp_client(live, admin) as client:
        for name, body, field in BAD:
            result = await client.call_tool(name, body)
            assert result.is_error and field in result.content[0].text, (name, body, result)
    assert live.memory.store.webhook_rows() == [] and live.ledger() == []


@pytest.mark.anyio
async def test_only_an_admin_token_reaches_the_webhook_operations(
    live: LiveServer, receiver: Receiver
) -> None:
    writer, admin = live.token("write"), live.token("admin")
    _, reader = live.tokens.create(scope="read", repositories=("*",))
    body = {"url": receiver.url, "events": ["attempt.recorded"], "token_id": reader.id}
    async with live.client(writer) as http:
        refused = await http.post("/v1/create_webhook", json=body)
        listed = await http.post("/v1/list_webhooks", json={})
    assert (refused.status_code, listed.status_code) == (403, 403)
    async with mcp_client(live, writer) as client:
        hidden = await client.call_tool("create_webhook", body)
    assert hidden.is_error and hidden.content[0].text == "Unknown tool: create_webhook"
    assert live.memory.store.webhook_rows() == []
    async with mcp_client(live, admin) as client:
        made = await client.call_tool("create_webhook", body)
        assert not made.is_error, made
        secret = made.structured_content["secret"]  # type: ignore[index]
        listed_mcp = await client.call_tool("list_webhooks", {})
    assert secret.startswith("whsec_") and secret not in json.dumps(listed_mcp.structured_content)
    async with live.client(admin) as http:
        (hook,) = (await http.post("/v1/list_webhooks", json={})).json()["webhooks"]
        gone = await http.post("/v1/delete_webhook", json={"webhook_id": hook["webhook_id"]})
        again = await http.post("/v1/delete_webhook", json={"webhook_id": hook["webhook_id"]})
    assert gone.status_code == 200 and again.status_code == 404


def test_the_webhook_commands_create_list_deliver_and_refuse_bad_input(
    tmp_path: Path, receiver: Receiver
) -> None:
    db = tmp_path / "mentis.db"
    env = {"MENTIS_EMBEDDER": "hash", "MENTIS_HOME": str(tmp_path), "MENTIS_AGENT_ID": "ops"}
    runner = CliRunner()

    def cli(*args: str, code: int = 0) -> Any:
        done = runner.invoke(app, [*args, "--db", str(db), "--json"], env=env)
        assert done.exit_code == code, done.output
        return json.loads(done.stdout) if code == 0 else done.output

    tokens = TokenStore(db)
    _, reader = tokens.create(scope="read", repositories=("github.com/acme/*",))
    tokens.close()
    for args, field in [
        (("create", "--url", "ftp://x", "--event", "attempt.recorded", "--token-id", reader.id), "url"),
        (("create", "--url", receiver.url, "--event", "nope", "--token-id", reader.id), "events"),
        (("create", "--url", receiver.url, "--event", "attempt.recorded", "--token-id", "x"), "token_id"),
        (
            (
                "create",
                "--url",
                "https://169.254.169.254/",
                "--event",
                "attempt.recorded",
                "--token-id",
                reader.id,
            ),
            "url",
        ),
        (("delete", "--id", "nope"), "webhook_id"),
        (("deliveries", "--state", "lost"), "state"),
        (("deliveries", "--limit", "0"), "limit"),
        (("redeliver", "--delivery", "x y"), "delivery_id"),
    ]:
        assert field in cli("webhook", *args, code=2)
    assert cli("webhook", "list") == {"webhooks": []}
    made = cli(
        "webhook",
        "create",
        "--url",
        receiver.url,
        "--event",
        "attempt.recorded",
        "--token-id",
        reader.id,
        "--ids-only",
    )
    assert made["secret"].startswith("whsec_")
    (listed,) = cli("webhook", "list")["webhooks"]
    assert listed["webhook_id"] == made["webhook_id"] and listed["ids_only"] is True
    cli(
        "record-attempt",
        "--repo",
        "github.com/acme/shop",
        "--task",
        "t",
        "--action",
        "a",
        "--observation",
        "o",
    )
    (delivery,) = cli("webhook", "deliveries", "--id", made["webhook_id"])["deliveries"]
    assert delivery["state"] == "pending" and delivery["event"] == "attempt.recorded"
    assert cli("webhook", "redeliver", "--delivery", delivery["delivery_id"])["state"] == "pending"
    assert cli("webhook", "delete", "--id", made["webhook_id"]) == {"deleted": made["webhook_id"]}
    assert cli("webhook", "deliveries")["deliveries"] == []
