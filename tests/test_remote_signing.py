"""The proxy signs only what the caller asked for: a prepared entry (made by a real Memory's
prepare_write) passes the check, and every way a server could change it is refused before signing.
(tests/test_remote_hostile.py runs the same attacks end to end, through a hostile server.)"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import pytest
from mcp_types import CallToolResult, TextContent

from mentis.api.attempts import MarkOutdatedInput, RecordAttemptInput
from mentis.api.common import parse
from mentis.errors import InvalidInput, StatementRefused
from mentis.ledger.canonical import canonical
from mentis.mcp.remote_signing import as_tool, check, error_code
from mentis.mcp.remote_writes import READS, UNSIGNABLE, WRITES, known, unsignable
from mentis.service.memory import Caller, Memory
from mentis.service.operations import BY_NAME, OPERATIONS
from mentis.service.signed_writes import CONFIGURATION, PHASES

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
ATTEMPT = {
    "repository": REPO,
    "task_id": "cart",
    "action": "Rounded once",
    "files": ["shop/cart.py"],
    "observation": "The total matches",
}
ALICE = Caller(agent_id="alice")


@pytest.fixture
def prepared(memory: Memory) -> dict[str, Any]:
    return prepare(memory, ALICE, "append_thought", THOUGHT).model_dump()


DROP = object()


def _with_body(prepared: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The prepared entry with these body fields changed (DROP removes one), still canonical and
    with its body_hash recomputed, so only the content differs."""
    body = {**json.loads(prepared["body"]), **changes}
    text = canonical({k: v for k, v in body.items() if v is not DROP}).decode()
    return {**prepared, "body": text, "body_hash": hashlib.sha256(text.encode()).hexdigest()}


def test_the_table_names_every_operation_the_server_publishes_as_a_read_a_phase_or_a_write() -> None:
    names = {op.name for op in OPERATIONS}
    assert READS | PHASES | CONFIGURATION | set(WRITES) | set(UNSIGNABLE) == names
    assert {n for n in names if BY_NAME[n].writes} - PHASES - CONFIGURATION == set(WRITES) | set(UNSIGNABLE)
    assert not READS & set(WRITES) and not known("record_attempt_fast")


def test_the_servers_own_entry_for_the_call_passes_and_gives_the_fields_to_sign(
    prepared: dict[str, Any],
) -> None:
    fields = check("append_thought", THOUGHT, prepared)
    assert (fields.chain, fields.kind, fields.agent, fields.id) == (REPO, "thought", "alice", prepared["id"])
    assert fields.body_hash == prepared["body_hash"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"content": "Keep prices in floats"}, "content"),
        ({"importance": "0.1"}, "importance"),
        ({"tags": "pricing"}, "tags"),
        ({"tags": ["pricing", "billing"]}, "tags"),
        ({"tags": DROP}, "tags"),
        ({"agent_id": "mallory"}, "agent_id"),
        ({"session_id": "s-1"}, "session_id"),
        ({"confidence": "1"}, "confidence"),
        (
            {
                "relations": [
                    {"kind": "Supersedes", "target_id": "x", "valid_at": "2026-01-01T00:00:00.000000Z"}
                ]
            },
            "relations",
        ),
        ({"relations": [{"kind": "Invalidates", "target_id": "x"}]}, "relations"),
        ({"reasserts": [{"rejected_id": "x"}]}, "reasserts"),
        ({"pinned": True}, "pinned"),
    ],
)
def test_content_the_server_changed_or_added_is_refused_naming_the_field(
    prepared: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    with pytest.raises(StatementRefused, match="Nothing was signed") as refused:
        check("append_thought", THOUGHT, _with_body(prepared, **change))
    assert refused.value.field == field


def test_supersedes_links_to_near_duplicates_are_the_servers_to_add_once_each(
    prepared: dict[str, Any],
) -> None:
    link = {"kind": "Supersedes", "target_id": str(uuid.uuid4())}
    check("append_thought", THOUGHT, _with_body(prepared, relations=[link]))
    with pytest.raises(StatementRefused, match="relations holds"):
        check("append_thought", THOUGHT, _with_body(prepared, relations=[link, link]))
    itself = {"kind": "Supersedes", "target_id": prepared["id"]}
    with pytest.raises(StatementRefused, match="the id of a record the write names"):
        check("append_thought", THOUGHT, _with_body(prepared, relations=[itself]))


def test_a_body_that_is_not_its_hash_or_not_canonical_is_refused(prepared: dict[str, Any]) -> None:
    with pytest.raises(StatementRefused, match="does not hash to its body_hash"):
        check("append_thought", THOUGHT, {**prepared, "body_hash": "0" * 64})

    twice = prepared["body"][:-1] + ',"content":"Keep prices in floats"}'  # a repeated key: last wins here
    doctored = {**prepared, "body": twice, "body_hash": hashlib.sha256(twice.encode()).hexdigest()}
    with pytest.raises(StatementRefused, match="not one object in canonical JSON"):
        check("append_thought", THOUGHT, doctored)


def test_another_chain_kind_tool_id_or_time_is_refused(prepared: dict[str, Any]) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"chain": "github.com/evil/repo"}, "would write to chain"),
        ({"kind": "attempt"}, "its kind is 'attempt', and append_thought appends 'thought'"),
        ({"tool": "record_attempt"}, 'it prepared "record_attempt", not append_thought'),
        ({"at": "2020-01-01T00:00:00.000000Z"}, "within 300 s of this clock"),
        ({"id": prepared["id"].upper()}, "not a UUID in canonical form"),
        ({"agent": 7}, "lacks agent"),
    ]
    for change, message in cases:
        with pytest.raises(StatementRefused, match=message):
            check("append_thought", THOUGHT, {**prepared, **change})
    with pytest.raises(StatementRefused, match="lacks body"):
        check("append_thought", THOUGHT, {k: v for k, v in prepared.items() if k != "body"})


def test_an_id_this_proxy_signed_before_or_one_the_call_names_is_refused(memory: Memory) -> None:
    attempt = memory.record_attempt(ALICE, RecordAttemptInput.model_validate(ATTEMPT)).attempt_id
    call = {"repository": REPO, "attempt_id": attempt, "reason": "stale"}
    fresh = prepare(memory, ALICE, "mark_conclusion_outdated", call).model_dump()
    check("mark_conclusion_outdated", call, fresh)
    with pytest.raises(StatementRefused, match="one this proxy signed before"):
        check("mark_conclusion_outdated", call, fresh, {fresh["id"]})
    with pytest.raises(StatementRefused, match="the id of a record the write names"):
        check("mark_conclusion_outdated", call, {**fresh, "id": attempt})
    chosen = {**THOUGHT, "thought_id": str(uuid.uuid4())}
    mine = prepare(memory, ALICE, "append_thought", chosen).model_dump()
    check("append_thought", chosen, mine)
    with pytest.raises(StatementRefused, match=r"not the .* the call chose"):
        check("append_thought", {**chosen, "thought_id": str(uuid.uuid4())}, mine)


def test_a_forget_of_another_record_is_refused_though_kind_and_chain_match(memory: Memory) -> None:
    first = memory.record_attempt(ALICE, RecordAttemptInput.model_validate(ATTEMPT)).attempt_id
    other = memory.record_attempt(ALICE, RecordAttemptInput.model_validate(ATTEMPT)).attempt_id
    forget = prepare(memory, ALICE, "forget_attempt", {"repository": REPO, "attempt_id": other}).model_dump()
    with pytest.raises(StatementRefused, match="attempt_id holds") as refused:
        check("forget_attempt", {"repository": REPO, "attempt_id": first}, forget)
    assert refused.value.field == "attempt_id"
    for erased in ([], [-1], [0, 0], "0"):
        with pytest.raises(StatementRefused, match="erased holds"):
            check(
                "forget_attempt", {"repository": REPO, "attempt_id": other}, _with_body(forget, erased=erased)
            )
    thought = memory.append_thought(ALICE, _thought_input()).thought_id
    with pytest.raises(StatementRefused, match="attempt_id, task_id, which the call does not give"):
        check(
            "forget_thought",
            {"repository": REPO, "thought_id": thought},
            {**forget, "tool": "forget_thought"},
        )


def _thought_input() -> Any:
    from mentis.api.thoughts import AppendThoughtInput

    return AppendThoughtInput.model_validate(THOUGHT)


def test_a_call_the_proxy_cannot_check_is_named_before_anything_is_sent() -> None:
    assert unsignable("import_memory_md", {}) == UNSIGNABLE["import_memory_md"]
    diff = {"repository": REPO, "skill_id": "run-tests", "diff": "--- a\n+++ b\n"}
    assert (unsignable("upload_skill", diff) or "").startswith("diff: the signing proxy signs only")
    assert (
        unsignable("upload_skill", {"repository": REPO, "content": "---\nname: x\ndescription: y\n---\nz\n"})
        is None
    )
    with pytest.raises(InvalidInput, match="colour: is not a known field"):
        unsignable("record_attempt", {**ATTEMPT, "colour": "blue"})


def test_a_correction_keeps_the_commit_as_the_server_normalises_it(memory: Memory) -> None:
    attempt = memory.record_attempt(ALICE, RecordAttemptInput.model_validate(ATTEMPT)).attempt_id
    call = {"repository": REPO, "attempt_id": attempt, "reason": "stale", "latest_commit": "ABCDEF12"}
    p = prepare(memory, ALICE, "mark_conclusion_outdated", call).model_dump()
    assert json.loads(p["body"])["latest_commit"] == MarkOutdatedInput.model_validate(call).latest_commit
    check("mark_conclusion_outdated", call, p)
    with pytest.raises(StatementRefused, match="latest_commit holds"):
        check("mark_conclusion_outdated", call, _with_body(p, latest_commit="ABCDEF12"))


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


def test_a_thoughts_provenance_is_the_calls_and_an_entity_type_upsert_is_checked_like_any_write(
    memory: Memory,
) -> None:
    """Issue 27: the proxy signs a thought's entity_type and source_episode only as the call gave
    them, and an upsert of the entity-type registry only with the call's name and description."""
    episode = {"transcript": "s.jsonl", "session_id": "s-1", "from_line": 2, "to_line": 5}
    call = {**THOUGHT, "entity_type": "service", "source_episode": episode}
    p = prepare(memory, ALICE, "append_thought", call).model_dump()
    check("append_thought", call, p)
    for change, field in (
        ({"entity_type": "library"}, "entity_type"),
        ({"source_episode": {**episode, "to_line": 9}}, "source_episode"),
        ({"source_episode": DROP}, "source_episode"),
    ):
        with pytest.raises(StatementRefused, match=field):
            check("append_thought", call, _with_body(p, **change))
    upsert = {"name": "queue", "description": "a message queue"}
    u = prepare(memory, ALICE, "upsert_entity_type", upsert).model_dump()
    fields = check("upsert_entity_type", upsert, u)
    assert (fields.chain, fields.kind, fields.agent) == ("__entity_types__", "entity_type", "alice")
    with pytest.raises(StatementRefused, match="description"):
        check("upsert_entity_type", upsert, _with_body(u, description="a message stream"))


def test_a_write_to_a_branch_is_checked_against_the_branch_s_chain_and_branch_tools_are_refused(
    memory: Memory,
) -> None:
    from mentis.api.branches import BranchFromInput

    memory.record_attempt(ALICE, parse(RecordAttemptInput, ATTEMPT))
    memory.branch_from(ALICE, BranchFromInput(repository=REPO, branch="feature/x", parent=None))
    on_branch = {**THOUGHT, "branch": "feature/x"}
    fields = check(
        "append_thought", on_branch, prepare(memory, ALICE, "append_thought", on_branch).model_dump()
    )
    assert (fields.chain, fields.kind) == (f"{REPO}:feature/x", "thought")
    with pytest.raises(StatementRefused):  # the main line's entry is not the branch's
        check("append_thought", on_branch, prepare(memory, ALICE, "append_thought", THOUGHT).model_dump())
    assert unsignable("branch_from", {"repository": REPO, "branch": "y"}) is not None
    assert unsignable("merge_branch", {"repository": REPO, "branch": "feature/x"}) is not None
