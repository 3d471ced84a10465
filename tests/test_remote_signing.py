"""The proxy signs only what the caller asked for: a prepared entry (made by a real Memory's
prepare_write) passes the check, and every way a server could change it is refused before signing."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from mcp_types import CallToolResult, TextContent

from mentis.errors import InvalidInput
from mentis.memory import Caller, Memory
from mentis.remote_signing import as_tool, check_prepared, error_code, same

from .conftest import REPO
from .signing_support import prepare

THOUGHT = {
    "repository": REPO,
    "type": "Decision",
    "content": "Keep prices in integer cents",
    "importance": 0.75,
    "tags": ["pricing"],
    "relations": [],
}


@pytest.fixture
def prepared(memory: Memory) -> dict[str, Any]:
    return prepare(memory, Caller(agent_id="alice"), "append_thought", THOUGHT).model_dump()


def _with_body(prepared: dict[str, Any], **changes: Any) -> dict[str, Any]:
    body = {**json.loads(prepared["body"]), **changes}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return {**prepared, "body": text, "body_hash": hashlib.sha256(text.encode()).hexdigest()}


def test_the_servers_own_entry_for_the_call_passes_and_gives_the_fields_to_sign(
    prepared: dict[str, Any],
) -> None:
    fields, body_hash = check_prepared("append_thought", THOUGHT, prepared)
    assert (fields.chain, fields.kind, fields.agent, fields.id) == (REPO, "thought", "alice", prepared["id"])
    assert body_hash == prepared["body_hash"] == fields.body_hash


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"content": "Keep prices in floats"}, "content"),
        ({"importance": "0.1"}, "importance"),
        ({"tags": ["billing"]}, "tags"),
        ({"agent_id": "mallory"}, "agent"),
    ],
)
def test_content_the_server_changed_is_refused_naming_the_field(
    prepared: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput, match="not signing") as refused:
        check_prepared("append_thought", THOUGHT, _with_body(prepared, **change))
    assert refused.value.field == field


def test_a_body_that_does_not_hash_to_its_body_hash_is_refused(prepared: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match="does not hash to its body_hash"):
        check_prepared("append_thought", THOUGHT, {**prepared, "body_hash": "0" * 64})


def test_another_chain_tool_or_an_old_time_is_refused(prepared: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match="would write to chain"):
        check_prepared("append_thought", THOUGHT, {**prepared, "chain": "github.com/evil/repo"})
    with pytest.raises(InvalidInput, match="prepared 'append_thought', not 'record_attempt'"):
        check_prepared("record_attempt", THOUGHT, prepared)
    with pytest.raises(InvalidInput, match="from the server's clock"):
        check_prepared("append_thought", THOUGHT, {**prepared, "at": "2020-01-01T00:00:00.000000Z"})
    with pytest.raises(InvalidInput, match="lacks body"):
        check_prepared("append_thought", THOUGHT, {k: v for k, v in prepared.items() if k != "body"})


def test_values_the_server_normalises_or_derives_still_count_as_what_was_sent() -> None:
    assert same(0.75, "0.75") and same(1, "1.0") and not same(0.75, "0.7")
    assert same([{"kind": "Supports", "target_id": "a"}], [{"kind": "Supports", "target_id": "a"}, {"x": 1}])
    assert not same(["a", "b"], ["b", "a"]) and not same(["a"], [])
    assert same("9B2C6A4E-0F7E-4A53-9D55-3D1B4C0F2A11", "9b2c6a4e-0f7e-4a53-9d55-3d1b4c0f2a11")
    assert same("2026-01-02T03:04:05Z", "2026-01-02T03:04:05.000000Z")
    assert not same("2026-01-02T03:04:05Z", "2026-01-02T03:04:06.000000Z")
    assert same(None, "session-1") and same([], None) and not same("x", None)
    assert not same(True, 1) and same({"a": 1}, {"a": "1", "b": 2}) and not same({"a": 1}, [1])


def test_the_error_code_is_read_from_a_mentis_tool_error_only() -> None:
    def result(text: str, is_error: bool = True) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)

    assert (
        error_code(result("Error executing tool signed_write: [conflict] the content changed")) == "conflict"
    )
    assert error_code(result("Error executing tool x: [conflict] y", is_error=False)) is None
    assert error_code(result("something else [conflict]")) is None


def test_a_phases_error_is_given_the_callers_tool_name_and_nothing_else_changes() -> None:
    def result(text: str, is_error: bool = True) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=is_error)

    renamed = as_tool(
        result("Error executing tool prepare_write: [not_found] no attempt x"), "forget_attempt"
    )
    assert (
        renamed.content[0].model_dump()["text"]
        == "Error executing tool forget_attempt: [not_found] no attempt x"
    )
    assert renamed.is_error
    other = result("Error executing tool search: [query] prepare_write")
    assert as_tool(other, "record_attempt") is other
    fine = result("Error executing tool signed_write: [x] y", is_error=False)
    assert as_tool(fine, "record_attempt") is fine
