"""MCP, REST and the CLI are thin: through each, the same call gives the service's own answer or error.

The ``call`` fixture runs once per transport; each case is compared with ``call.direct``, the service's
answer on the same store, so every transport agrees with every other.
"""

from __future__ import annotations

from typing import Any

import pytest

from mentis.api.attempts import RecordAttemptInput
from mentis.service.memory import Caller

from .conformance.test_stats import ONE, _fill
from .conftest import REPO
from .transports import AGENT, Call

SHA = "89abcdef0123456789abcdef0123456789abcdef"
OWNER = Caller(agent_id=AGENT)


def attempt(task: str, action: str, status: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "repository": REPO,
        "task_id": task,
        "task_title": "Cart total is off by a cent",
        "action": action,
        "files": ["shop/cart.py"],
        "observation": f"after {action} the cart total was still rounded wrong",
        "inference": "rounding happens per line, not on the total",
        "code_context": {"commit": SHA},
    }
    if status is not None:
        data["check"] = {"command": "pytest tests/test_cart.py", "status": status, "exit_code": 0}
    return data


def seed(call: Call) -> str:
    """Two attempts on one task, the first with file hashes; returns the first one's id."""
    first = attempt("cart", "round the total", "passed")
    first["code_context"] |= {"branch": "main", "file_hashes": {"shop/cart.py": SHA}}
    memory = call.live.memory
    aid = memory.record_attempt(OWNER, RecordAttemptInput.model_validate(first)).attempt_id
    memory.record_attempt(
        OWNER, RecordAttemptInput.model_validate(attempt("cart", "round each line", "failed"))
    )
    return aid


EVERY_TRANSPORT: list[tuple[str, dict[str, Any]]] = [
    ("search", {"query": "cart total rounded"}),
    ("search", {"query": "cart", "repository": "github.com/other/repo"}),
    ("search", {"query": " "}),
    ("recall", {"repository": REPO, "task_id": "cart"}),
    ("recall", {"sql": "select attempt_id, status, outdated from attempts order by created_at"}),
    ("recall", {"sql": "select task_id from attempts where task_id = :t", "params": {"t": "cart"}}),
    ("recall", {"sql": "select * from entries"}),
    ("recall", {}),
    ("verify_integrity", {}),
    ("verify_integrity", {"repository": "github.com/acme/none"}),
    ("stats", {"repository": REPO}),
    ("mark_conclusion_outdated", {"repository": REPO, "attempt_id": "nope", "reason": "r"}),
    ("forget_attempt", {"repository": "github.com/other/repo", "attempt_id": "{aid}"}),
]


def _with(arguments: dict[str, Any], aid: str) -> dict[str, Any]:
    return {k: aid if v == "{aid}" else v for k, v in arguments.items()}


def test_every_transport_answers_and_refuses_as_the_service_does(call: Call) -> None:
    aid = seed(call)
    for name, arguments in EVERY_TRANSPORT:
        arguments = _with(arguments, aid)
        assert call(name, arguments) == call.direct(name, arguments), (name, arguments)


@pytest.mark.parametrize("call", ["mcp", "rest"], indirect=True)
def test_inputs_the_cli_has_no_option_for_answer_alike_over_mcp_and_rest(call: Call) -> None:
    seed(call)
    cases: list[tuple[str, dict[str, Any]]] = [
        ("search", {"query": "cart total rounded", "current_file_hashes": {"shop/cart.py": "ab" * 20}}),
        (
            "record_attempt",
            {"repository": REPO, "task_id": "t", "action": "a", "observation": "o", "bogus": 1},
        ),
    ]
    for name, arguments in cases:
        assert call(name, arguments) == call.direct(name, arguments), name


@pytest.mark.parametrize("call", ["mcp", "rest"], indirect=True)
def test_a_scoped_token_is_refused_as_the_service_refuses_its_caller(call: Call) -> None:
    aid = seed(call)
    scoped = call.scoped("github.com/acme/*")
    for name, arguments in EVERY_TRANSPORT:
        arguments = _with(arguments, aid)
        assert scoped(name, arguments) == scoped.direct(name, arguments), (name, arguments)
    assert scoped("search", {"query": "cart", "repository": "github.com/other/repo"})[0] == "forbidden"


def test_writes_through_every_transport_answer_as_the_service_does_up_to_ids_hashes_and_times(
    call: Call,
) -> None:
    memory = call.live.memory
    status, recorded = call("record_attempt", attempt("cart", "use Decimal", "passed"))
    assert status == "ok", recorded
    _, again = call.direct("record_attempt", attempt("cart", "use Decimal", "passed"))
    assert again["ledger"]["seq"] == recorded["ledger"]["seq"] + 1
    for r in (recorded, again):
        del r["attempt_id"], r["ledger"]
    assert recorded == again

    (aid,) = memory.recall(OWNER, _sql("select attempt_id from attempts order by created_at limit 1")).rows[0]
    outdated = {"repository": REPO, "attempt_id": aid, "reason": "x"}
    status, first = call("mark_conclusion_outdated", outdated)
    assert status == "ok", first
    _, second = call.direct("mark_conclusion_outdated", outdated)
    for r in (first, second):
        del r["ledger"], r["correction"]["at"]
    assert second == {**first, "corrections_count": 2}
    assert first["correction"]["agent_id"] == AGENT

    assert call("forget_attempt", {"repository": REPO, "attempt_id": aid})[1]["forgotten"] is True
    assert call("forget_attempt", {"repository": REPO, "attempt_id": aid})[0] == "conflict"
    agents = memory.recall(OWNER, _sql("select agent_id from attempts")).rows
    assert agents == [[AGENT]]


def test_stats_through_every_transport_are_what_the_service_counts(call: Call) -> None:
    _fill(call.live.memory, OWNER)
    for arguments in ({"repository": ONE}, {}):
        status, counted = call("stats", arguments)
        assert (status, counted) == call.direct("stats", arguments)
        assert counted["attempts"] == (3 if arguments else 4)


def _sql(text: str) -> Any:
    from mentis.api.attempts import RecallInput

    return RecallInput(sql=text)


def test_the_entity_type_registry_through_every_transport_answers_as_the_service_does(call: Call) -> None:
    status, upserted = call("upsert_entity_type", {"name": "queue", "description": "a message queue"})
    assert status == "ok", upserted
    assert upserted["entity_type"]["updated_by"] == AGENT and upserted["ledger"]["seq"] == 0
    assert call("list_entity_types", {}) == call.direct("list_entity_types", {})
    refused = call("upsert_entity_type", {"name": "Queue", "description": "x"})
    assert refused == call.direct("upsert_entity_type", {"name": "Queue", "description": "x"})
    assert refused[0] == "invalid_input"
    thought = {"repository": REPO, "type": "Finding", "content": "lag at night", "entity_type": "queue"}
    assert call("append_thought", thought)[0] == "ok"
    listed = call("search_thoughts", {"repository": REPO, "filters": {"entity_types": ["queue"]}})
    assert [t["thought"]["entity_type"] for t in listed[1]["thoughts"]] == ["queue"]
