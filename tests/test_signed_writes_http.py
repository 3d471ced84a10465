"""The two phases over REST: prepare_write is a write as far as scope goes (a read token or a
token for another repository is refused, 403), and answers the entry without writing it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from .conftest import REPO
from .http_support import LiveServer

ATTEMPT = {
    "repository": REPO,
    "task_id": "vat",
    "action": "Applied the coupon before VAT",
    "observation": "Totals match the invoice",
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def live(db_path: Path) -> Iterator[LiveServer]:
    with LiveServer(db_path) as server:
        yield server


@pytest.mark.anyio
async def test_prepare_write_over_rest_needs_write_scope_on_the_repository_and_writes_nothing(
    live: LiveServer,
) -> None:
    body = {"tool": "record_attempt", "arguments": ATTEMPT}
    with anyio.fail_after(30):
        async with live.client(live.token("read")) as reader:
            refused = await reader.post("/v1/prepare_write", json=body)
        async with live.client(live.token("write", ("github.com/other/*",))) as elsewhere:
            outside = await elsewhere.post("/v1/prepare_write", json=body)
        async with live.client(live.token("write", (REPO,), agent="rest-agent")) as writer:
            prepared = await writer.post("/v1/prepare_write", json=body)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
    assert (outside.status_code, outside.json()["error"]["code"]) == (403, "forbidden")
    assert prepared.status_code == 200, prepared.text
    answer = prepared.json()
    assert (answer["tool"], answer["chain"], answer["kind"], answer["agent"]) == (
        "record_attempt",
        REPO,
        "attempt",
        "rest-agent",
    )
    assert hashlib.sha256(answer["body"].encode()).hexdigest() == answer["body_hash"]
    assert live.ledger() == []
