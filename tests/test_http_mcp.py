"""The official MCP client over real streamable HTTP (that REST and the CLI answer alike is
``tests/test_transport_parity.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mentis.service.operations import OPERATIONS

from .conftest import REPO
from .http_support import LiveServer, mcp_client

SHA = "89abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def live(db_path: Path) -> Iterator[LiveServer]:
    with LiveServer(db_path) as server:
        yield server


async def ok_tool(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, (tool, result.content)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def attempt(task: str, action: str, status: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "repository": REPO,
        "task_id": task,
        "task_title": "Cart total is off by a cent",
        "action": action,
        "files": ["shop/cart.py"],
        "observation": f"after {action} the cart total was still rounded wrong",
        "inference": "rounding happens per line, not on the total",
        "code_context": {"commit": SHA, "branch": "main", "file_hashes": {"shop/cart.py": SHA}},
    }
    if status is not None:
        data["check"] = {"command": "pytest tests/test_cart.py", "status": status, "exit_code": 0}
    return data


@pytest.mark.anyio
async def test_the_official_client_runs_a_tasks_whole_life_over_http_as_the_tokens_agent(
    live: LiveServer,
) -> None:
    token = live.token("write", ("github.com/acme/*",), agent="claude-over-http")
    with anyio.fail_after(30):
        async with mcp_client(live, token) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert listed == {op.name for op in OPERATIONS if not op.admin}  # a write token's

            passed = await ok_tool(client, "record_attempt", attempt("cart", "round the total", "passed"))
            failed = await ok_tool(client, "record_attempt", attempt("cart", "round each line", "failed"))
            unverified = await ok_tool(client, "record_attempt", attempt("cart", "use Decimal"))
            assert [passed["status"], failed["status"], unverified["status"]] == [
                "passed",
                "failed",
                "unverified",
            ]
            assert [r["ledger"]["seq"] for r in (passed, failed, unverified)] == [0, 1, 2]

            found = await ok_tool(client, "search", {"query": "cart total rounded wrong"})
            assert [(t["task_id"], t["attempt_count"]) for t in found["tasks"]] == [("cart", 3)]

            first = await ok_tool(
                client,
                "mark_conclusion_outdated",
                {"repository": REPO, "attempt_id": passed["attempt_id"], "reason": "cart.py was rewritten"},
            )
            second = await ok_tool(
                client,
                "mark_conclusion_outdated",
                {
                    "repository": REPO,
                    "attempt_id": passed["attempt_id"],
                    "reason": "and again",
                    "latest_commit": SHA,
                },
            )
            assert (first["corrections_count"], second["corrections_count"]) == (1, 2)
            assert second["correction"]["agent_id"] == "claude-over-http"

            history = await ok_tool(client, "recall", {"repository": REPO, "task_id": "cart"})
            rows = [dict(zip(history["columns"], row, strict=True)) for row in history["rows"]]
            assert [r["status"] for r in rows] == ["passed", "failed", "unverified"]
            assert [c["reason"] for c in rows[0]["corrections"]] == ["cart.py was rewritten", "and again"]

            sql = await ok_tool(
                client,
                "recall",
                {"sql": "select agent_id, status, outdated from attempts order by created_at"},
            )
            assert sql["rows"] == [
                ["claude-over-http", "passed", 1],
                ["claude-over-http", "failed", 0],
                ["claude-over-http", "unverified", 0],
            ]

            gone = await ok_tool(
                client,
                "forget_attempt",
                {"repository": REPO, "attempt_id": unverified["attempt_id"], "reason": "held a secret"},
            )
            assert gone["forgotten"] is True
            count = await ok_tool(client, "recall", {"sql": "select count(*) from attempts"})
            assert count["rows"] == [[2]]

            verified = await ok_tool(client, "verify_integrity", {})
            assert verified["ok"] is True
            assert [(c["chain"], c["entries"], c["bodies_erased"]) for c in verified["chains"]] == [
                (REPO, 6, 1)
            ]
