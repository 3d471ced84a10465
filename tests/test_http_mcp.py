"""The official MCP client over real streamable HTTP, and REST giving the same answers as MCP."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mentis.operations import OPERATIONS

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


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
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
            assert listed == {op.name for op in OPERATIONS}

            passed = await call(client, "record_attempt", attempt("cart", "round the total", "passed"))
            failed = await call(client, "record_attempt", attempt("cart", "round each line", "failed"))
            unverified = await call(client, "record_attempt", attempt("cart", "use Decimal"))
            assert [passed["status"], failed["status"], unverified["status"]] == [
                "passed",
                "failed",
                "unverified",
            ]
            assert [r["ledger"]["seq"] for r in (passed, failed, unverified)] == [0, 1, 2]

            found = await call(client, "search", {"query": "cart total rounded wrong"})
            assert [(t["task_id"], t["attempt_count"]) for t in found["tasks"]] == [("cart", 3)]

            first = await call(
                client,
                "mark_conclusion_outdated",
                {"repository": REPO, "attempt_id": passed["attempt_id"], "reason": "cart.py was rewritten"},
            )
            second = await call(
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

            history = await call(client, "recall", {"repository": REPO, "task_id": "cart"})
            rows = [dict(zip(history["columns"], row, strict=True)) for row in history["rows"]]
            assert [r["status"] for r in rows] == ["passed", "failed", "unverified"]
            assert [c["reason"] for c in rows[0]["corrections"]] == ["cart.py was rewritten", "and again"]

            sql = await call(
                client,
                "recall",
                {"sql": "select agent_id, status, outdated from attempts order by created_at"},
            )
            assert sql["rows"] == [
                ["claude-over-http", "passed", 1],
                ["claude-over-http", "failed", 0],
                ["claude-over-http", "unverified", 0],
            ]

            gone = await call(
                client,
                "forget_attempt",
                {"repository": REPO, "attempt_id": unverified["attempt_id"], "reason": "held a secret"},
            )
            assert gone["forgotten"] is True
            count = await call(client, "recall", {"sql": "select count(*) from attempts"})
            assert count["rows"] == [[2]]

            verified = await call(client, "verify_integrity", {})
            assert verified["ok"] is True
            assert [(c["chain"], c["entries"], c["bodies_erased"]) for c in verified["chains"]] == [
                (REPO, 6, 1)
            ]


def _mcp_answer(result: Any) -> tuple[str, Any]:
    """("ok", structured result) or (error code, message) from an MCP tool result."""
    if not result.is_error:
        return "ok", result.structured_content
    text = result.content[0].text
    found = re.match(r"^Error executing tool \w+: \[(\w+)\] (.*)$", text, re.DOTALL)
    assert found, text
    return found.group(1), found.group(2)


def _rest_answer(response: Any) -> tuple[str, Any]:
    body = response.json()
    if response.status_code == 200:
        return "ok", body
    return body["error"]["code"], body["error"]["message"]


@pytest.mark.anyio
async def test_rest_and_mcp_give_the_same_answers_and_the_same_errors_for_the_same_calls(
    live: LiveServer,
) -> None:
    token = live.token("write", ("github.com/acme/*",), agent="parity")
    with anyio.fail_after(30):
        async with mcp_client(live, token) as client, live.client(token) as rest:
            seeded = await call(client, "record_attempt", attempt("cart", "round the total", "passed"))
            done = await rest.post("/v1/record_attempt", json=attempt("cart", "round each line", "failed"))
            assert done.status_code == 200, done.text
            aid = seeded["attempt_id"]
            calls: list[tuple[str, dict[str, Any]]] = [
                (
                    "search",
                    {"query": "cart total rounded", "current_file_hashes": {"shop/cart.py": "ab" * 20}},
                ),
                ("search", {"query": "cart", "repository": "github.com/other/repo"}),
                ("search", {"query": " "}),
                ("recall", {"repository": REPO, "task_id": "cart"}),
                ("recall", {"sql": "select attempt_id, status, outdated from attempts order by created_at"}),
                ("recall", {"sql": "select * from entries"}),
                ("recall", {}),
                ("verify_integrity", {}),
                ("verify_integrity", {"repository": "github.com/acme/none"}),
                ("mark_conclusion_outdated", {"repository": REPO, "attempt_id": "nope", "reason": "r"}),
                (
                    "record_attempt",
                    {"repository": REPO, "task_id": "t", "action": "a", "observation": "o", "bogus": 1},
                ),
                ("forget_attempt", {"repository": "github.com/other/repo", "attempt_id": aid}),
            ]
            for tool, arguments in calls:
                over_mcp = _mcp_answer(await client.call_tool(tool, arguments))
                over_rest = _rest_answer(await rest.post(f"/v1/{tool}", json=arguments))
                assert over_rest == over_mcp, tool
            # writes answer alike too, up to their new ids, hashes and times
            r1 = await call(
                client, "mark_conclusion_outdated", {"repository": REPO, "attempt_id": aid, "reason": "x"}
            )
            r2 = (
                await rest.post(
                    "/v1/mark_conclusion_outdated",
                    json={"repository": REPO, "attempt_id": aid, "reason": "x"},
                )
            ).json()
            for r in (r1, r2):
                del r["ledger"], r["correction"]["at"]
            assert r2 == {**r1, "corrections_count": 2}
