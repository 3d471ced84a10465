"""End to end over real stdio: the official MCP client drives `mentis serve` with the real model.

One task lives its whole life here — three attempts (passed, failed, unverified) among unrelated
tasks, found again from a paraphrase, corrected twice, read back as history and through SQL,
one attempt forgotten — and the ledger still verifies at the end.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from mentis.service.operations import OPERATIONS

from .conftest import REPO

OTHER_REPO = "github.com/acme/infra"
TASK = "checkout-vat-coupon"
AGENT = "e2e-agent"
SHA1 = "1111111111111111111111111111111111111111"
SHA2 = "2222222222222222222222222222222222222222"
TOOLS = {op.name for op in OPERATIONS}

TITLE = "Checkout total is wrong when a coupon and VAT both apply"
ATTEMPTS = [
    {  # passed
        "action": "Applied the coupon discount before adding VAT in compute_total()",
        "observation": "German carts with a voucher now match the invoice to the cent",
        "inference": "VAT must be computed on the discounted net price",
        "files": ["shop/pricing.py", "tests/test_pricing.py"],
        "check": {"command": "pytest tests/test_pricing.py", "status": "passed", "exit_code": 0},
        "code_context": {"commit": SHA1, "branch": "fix/vat", "dirty": False},
    },
    {  # failed
        "action": "Rounded every line item to two decimals before summing the cart",
        "observation": "Discounted carts still differ from the invoice by one or two cents",
        "inference": "Rounding per line is not the cause",
        "files": ["shop/pricing.py"],
        "check": {
            "command": "pytest tests/test_pricing.py",
            "status": "failed",
            "exit_code": 1,
            "output": "AssertionError: 119.01 != 119.00",
        },
    },
    {  # no check: unverified
        "action": "Read the invoice service to see how it rounds VAT",
        "observation": "The invoice service rounds once, on the grand total",
        "files": ["invoice/service.py"],
    },
]
UNRELATED = [
    (
        OTHER_REPO,
        "docker-build-slow",
        "Docker image build takes twenty minutes on CI",
        "Reordered the Dockerfile so dependencies install before the sources are copied",
        "The layer cache is reused and the build now takes two minutes",
    ),
    (
        OTHER_REPO,
        "websocket-flaky",
        "Websocket reconnect test is flaky",
        "Replaced the fixed sleep with waiting for the reconnected event",
        "The test passed 200 runs in a row",
    ),
    (
        REPO,
        "search-emoji-crash",
        "Search page crashes on product names with emoji",
        "Normalised product names to NFC before indexing",
        "The crash came from a surrogate pair split by a byte-based slice",
    ),
    (
        REPO,
        "pg16-migration",
        "Database migration fails on PostgreSQL 16",
        "Added the enum value in its own transaction",
        "ALTER TYPE ADD VALUE cannot run inside a transaction block",
    ),
]
PARAPHRASE = "customers are charged an incorrect amount when a promo code is combined with sales tax"
REASON_1 = "B2B carts now take the discount after tax, so this no longer holds for them"
REASON_2 = "compute_total() was replaced by the pricing service; the fix does not apply any more"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def model_env(db_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(MENTIS_DB=str(db_path), MENTIS_EMBEDDER="local", MENTIS_AGENT_ID=AGENT)
    return env


def _ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text if result.content else result
    assert result.structured_content is not None
    return result.structured_content


def _error(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return str(result.content[0].text)


_WORDS = re.compile(r"[a-z0-9_]+")
_STOP = {"a", "an", "and", "are", "is", "the", "when", "with", "to", "of", "on", "in", "by", "so"}


def _content_words(text: str) -> set[str]:
    return set(_WORDS.findall(text.lower())) - _STOP


# --------------------------------------------------------------------------- schemas


def _object_levels(node: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every JSON-schema object node, wherever it sits ($defs, anyOf, items, values…)."""
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            yield path, node
        for key, value in node.items():
            yield from _object_levels(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _object_levels(value, f"{path}[{i}]")


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def assert_closed_schema(name: str, schema: dict[str, Any]) -> None:
    """Records have ``additionalProperties: false``; maps bound their values with a schema."""
    assert schema.get("type") == "object", name
    levels = list(_object_levels(schema))
    assert levels[0][0] == "$"
    for path, node in levels:
        where = f"{name} {path}"
        assert "additionalProperties" in node, f"{where}: additionalProperties missing"
        if "properties" in node:
            assert node["additionalProperties"] is False, f"{where}: a record must be closed"
        else:  # a map (file_hashes, params): every value must match a schema
            assert isinstance(node["additionalProperties"], dict), f"{where}: open map"
            assert "propertyNames" in node or "maxProperties" in node, f"{where}: unbounded map"
    for ref in _refs(schema):
        assert ref.startswith("#/$defs/"), f"{name}: external $ref {ref}"
        assert ref.removeprefix("#/$defs/") in schema.get("$defs", {}), f"{name}: dangling {ref}"


def test_the_schema_check_rejects_an_open_nested_object() -> None:
    closed = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"x": {"$ref": "#/$defs/X"}},
        "$defs": {"X": {"type": "object", "additionalProperties": False, "properties": {}}},
    }
    assert_closed_schema("closed", closed)
    opened = json.loads(json.dumps(closed))
    del opened["$defs"]["X"]["additionalProperties"]
    with pytest.raises(AssertionError, match=r"\$defs\.X: additionalProperties missing"):
        assert_closed_schema("opened", opened)
    dangling = json.loads(json.dumps(closed))
    dangling["properties"]["x"]["$ref"] = "#/$defs/Y"
    with pytest.raises(AssertionError, match="dangling"):
        assert_closed_schema("dangling", dangling)


# --------------------------------------------------------------------------- the whole life


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_task_lives_its_whole_life_over_stdio_with_the_real_model(
    model_env: dict[str, str],
) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mentis", "serve", "--tools", "all"], env=model_env
    )
    with anyio.fail_after(240):
        async with Client(params) as c:
            # ---- the published tools: exactly six, every input schema closed at every level
            listed = await c.list_tools()
            assert {t.name for t in listed.tools} == TOOLS
            assert len(listed.tools) == len(TOOLS)
            for tool in listed.tools:
                assert_closed_schema(tool.name, tool.input_schema)

            # ---- three attempts on one task, plus unrelated tasks in other topics
            ids: list[str] = []
            for i, attempt in enumerate(ATTEMPTS):
                args = {"repository": REPO, "task_id": TASK, **attempt}
                if i == 0:
                    args["task_title"] = TITLE
                done = _ok(await c.call_tool("record_attempt", args))
                ids.append(done["attempt_id"])
                assert done["ledger"]["seq"] == i
            assert len(set(ids)) == 3
            a_passed, a_failed, a_unverified = ids
            for repo, task_id, title, action, observation in UNRELATED:
                _ok(
                    await c.call_tool(
                        "record_attempt",
                        {
                            "repository": repo,
                            "task_id": task_id,
                            "task_title": title,
                            "action": action,
                            "observation": observation,
                        },
                    )
                )

            # ---- a paraphrase sharing (almost) no words finds the task first
            stored = " ".join([TITLE, *(a["action"] + " " + a["observation"] for a in ATTEMPTS)])
            assert len(_content_words(PARAPHRASE) & _content_words(stored)) <= 1
            found = _ok(await c.call_tool("search", {"query": PARAPHRASE, "limit": 5}))
            top = found["tasks"][0]
            assert (top["repository"], top["task_id"]) == (REPO, TASK), found["tasks"]
            assert top["title"] == TITLE
            assert top["attempt_count"] == 3
            assert top["attempt"]["attempt_id"] in ids
            assert set(top["matched_attempt_ids"]) <= set(ids)
            statuses = {a_passed: "passed", a_failed: "failed", a_unverified: "unverified"}
            assert top["attempt"]["status"] == statuses[top["attempt"]["attempt_id"]]
            assert top["attempt"]["correction"] is None
            assert [t["task_id"] for t in found["tasks"]].count(TASK) == 1
            elsewhere = _ok(await c.call_tool("search", {"query": PARAPHRASE, "repository": OTHER_REPO}))
            assert all(t["repository"] == OTHER_REPO for t in elsewhere["tasks"])

            # ---- the passed conclusion is marked outdated twice; both corrections are kept
            first = _ok(
                await c.call_tool(
                    "mark_conclusion_outdated",
                    {"repository": REPO, "attempt_id": a_passed, "reason": REASON_1, "latest_commit": SHA1},
                )
            )
            assert first["corrections_count"] == 1
            assert first["correction"]["reason"] == REASON_1
            second = _ok(
                await c.call_tool(
                    "mark_conclusion_outdated",
                    {"repository": REPO, "attempt_id": a_passed, "reason": REASON_2, "latest_commit": SHA2},
                )
            )
            assert second["corrections_count"] == 2
            assert second["correction"] == {
                "reason": REASON_2,
                "latest_commit": SHA2,
                "at": second["correction"]["at"],
                "agent_id": AGENT,
            }
            assert second["correction"]["at"] >= first["correction"]["at"]

            # search shows the newest correction with the attempt
            again = _ok(await c.call_tool("search", {"query": ATTEMPTS[0]["action"]}))
            hit = next(t for t in again["tasks"] if t["task_id"] == TASK)
            assert hit["attempt"]["attempt_id"] == a_passed
            assert hit["attempt"]["status"] == "passed"  # the attempt itself never changes
            assert hit["attempt"]["correction"]["reason"] == REASON_2
            assert hit["attempt"]["correction"]["latest_commit"] == SHA2
            assert hit["attempt"]["corrections_count"] == 2

            # recall: the task's full history, every correction in order
            history = _ok(await c.call_tool("recall", {"repository": REPO, "task_id": TASK}))
            cols = history["columns"]
            assert not history["truncated"]
            rows = {r[cols.index("attempt_id")]: dict(zip(cols, r, strict=True)) for r in history["rows"]}
            assert set(rows) == set(ids)
            assert {i: rows[i]["status"] for i in ids} == statuses
            assert [c["reason"] for c in rows[a_passed]["corrections"]] == [REASON_1, REASON_2]
            assert rows[a_failed]["corrections"] == rows[a_unverified]["corrections"] == []
            assert rows[a_passed]["observation"] == ATTEMPTS[0]["observation"]
            assert rows[a_passed]["inference"] == ATTEMPTS[0]["inference"]
            assert rows[a_passed]["commit"] == SHA1
            assert rows[a_failed]["check_output"] == ATTEMPTS[1]["check"]["output"]
            assert all(r["agent_id"] == AGENT for r in rows.values())

            # recall: SQL over the views
            async def sql(query: str, **bind: Any) -> list[list[Any]]:
                out = _ok(await c.call_tool("recall", {"sql": query, "params": bind or None}))
                assert not out["truncated"]
                return list(out["rows"])

            every = _ok(await c.call_tool("recall", {"sql": "select * from corrections"}))
            documented = ["attempt_id", "repository", "reason", "latest_commit", "at", "agent_id"]
            assert set(documented) <= set(every["columns"])  # more columns may be added
            got = [dict(zip(every["columns"], r, strict=True)) for r in every["rows"]]
            assert sorted(([d[k] for k in documented] for d in got), key=lambda r: r[4]) == [
                [a_passed, REPO, REASON_1, SHA1, first["correction"]["at"], AGENT],
                [a_passed, REPO, REASON_2, SHA2, second["correction"]["at"], AGENT],
            ]
            assert await sql(
                "select reason, latest_commit from corrections where attempt_id = :a order by at",
                a=a_passed,
            ) == [[REASON_1, SHA1], [REASON_2, SHA2]]
            assert await sql(
                "select attempt_id, status, outdated, check_command, check_exit_code, files "
                "from attempts where repository = :r and task_id = :t order by created_at",
                r=REPO,
                t=TASK,
            ) == [
                [
                    a_passed,
                    "passed",
                    1,
                    "pytest tests/test_pricing.py",
                    0,
                    json.dumps(ATTEMPTS[0]["files"], separators=(",", ":")),
                ],
                [a_failed, "failed", 0, "pytest tests/test_pricing.py", 1, '["shop/pricing.py"]'],
                [a_unverified, "unverified", 0, None, None, '["invoice/service.py"]'],
            ]
            assert await sql(
                "select task_id, title, attempt_count from tasks where repository = :r order by task_id",
                r=REPO,
            ) == [
                [TASK, TITLE, 3],
                ["pg16-migration", UNRELATED[3][2], 1],
                ["search-emoji-crash", UNRELATED[2][2], 1],
            ]
            assert await sql(
                "select repository, count(*) from attempts group by repository order by repository"
            ) == [[OTHER_REPO, 2], [REPO, 5]]

            # ---- forget the corrected attempt: gone from search, history and SQL
            forgot = _ok(
                await c.call_tool(
                    "forget_attempt",
                    {"repository": REPO, "attempt_id": a_passed, "reason": "pasted a customer's address"},
                )
            )
            assert forgot["forgotten"] is True
            for query in (ATTEMPTS[0]["action"], PARAPHRASE, ATTEMPTS[0]["observation"]):
                result = _ok(await c.call_tool("search", {"query": query, "limit": 50}))
                for t in result["tasks"]:
                    assert t["attempt"]["attempt_id"] != a_passed
                    assert a_passed not in t["matched_attempt_ids"]
            after = _ok(await c.call_tool("search", {"query": PARAPHRASE, "limit": 5}))
            assert (after["tasks"][0]["task_id"], after["tasks"][0]["attempt_count"]) == (TASK, 2)
            history = _ok(await c.call_tool("recall", {"repository": REPO, "task_id": TASK}))
            kept = {r[history["columns"].index("attempt_id")] for r in history["rows"]}
            assert kept == {a_failed, a_unverified}
            assert await sql("select * from attempts where attempt_id = :a", a=a_passed) == []
            assert await sql("select * from corrections where attempt_id = :a", a=a_passed) == []
            assert await sql("select count(*) from corrections") == [[0]]
            assert await sql(
                "select count(*) from attempts where observation like '%invoice to the cent%' "
                "or inference like '%discounted net price%'"
            ) == [[0]]
            assert await sql("select attempt_count from tasks where task_id = :t", t=TASK) == [[2]]
            assert "attempt" in _error(
                await c.call_tool("forget_attempt", {"repository": REPO, "attempt_id": a_passed})
            )
            assert "attempt" in _error(
                await c.call_tool(
                    "mark_conclusion_outdated",
                    {"repository": REPO, "attempt_id": a_passed, "reason": "again"},
                )
            )

            # ---- the ledger still verifies, tombstone and all
            verified = _ok(await c.call_tool("verify_integrity", {}))
            assert verified["ok"] is True
            chains = {ch["chain"]: ch for ch in verified["chains"]}
            assert set(chains) == {REPO, OTHER_REPO}
            assert all(ch["ok"] for ch in chains.values())
            # REPO: 5 attempts + 2 corrections + 1 tombstone; nothing is ever removed from the chain
            assert (chains[REPO]["entries"], chains[REPO]["head_seq"]) == (8, 7)
            assert chains[REPO]["bodies_erased"] >= 1
            assert (chains[OTHER_REPO]["entries"], chains[OTHER_REPO]["bodies_erased"]) == (2, 0)
            one = _ok(await c.call_tool("verify_integrity", {"repository": OTHER_REPO}))
            assert [ch["chain"] for ch in one["chains"]] == [OTHER_REPO]

    # ---- and the store reopens (verifying every chain) in a fresh process
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [sys.executable, "-m", "mentis", "verify", "--json"], env=model_env, check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["ok"] is True and len(report["chains"]) == 2
