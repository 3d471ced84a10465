"""Remote signing's two phases on both stores, with real Ed25519 keys in the agent registry:
prepare_write writes nothing and shows the entry to sign; signed_write stores exactly that entry
with the client's signature, and refuses a stale time, changed content, a signature over other
content, a replay and another agent's statement, each writing nothing."""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

from mentis.api.signed import SignedWriteInput
from mentis.config import Settings
from mentis.errors import Conflict, Forbidden, InvalidInput
from mentis.ledger import signing
from mentis.ledger.links import ENTITY_TYPES_CHAIN
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.service.operations import signed_write
from tests.signing_support import fields_of, ledger, prepare, register_key, sign_and_write

REPO = "github.com/acme/shop"
ALICE = Caller(agent_id="alice")
ATTEMPT = {
    "repository": REPO,
    "task_id": "vat",
    "action": "Applied the coupon before VAT",
    "observation": "Totals match the invoice",
    "files": ["shop/pricing.py"],
    "check": {"command": "pytest", "status": "passed", "exit_code": 0},
}


def _attempt_id(memory: Memory, caller: Caller) -> str:
    from mentis.api.attempts import RecordAttemptInput
    from mentis.api.common import parse

    return memory.record_attempt(caller, parse(RecordAttemptInput, ATTEMPT)).attempt_id


def _thought_id(memory: Memory, caller: Caller) -> str:
    from mentis.api.common import parse
    from mentis.api.thoughts import AppendThoughtInput

    args = {"repository": REPO, "type": "Decision", "content": "Keep prices in integer cents"}
    return memory.append_thought(caller, parse(AppendThoughtInput, args)).thought_id


def _writes(memory: Memory) -> dict[str, dict[str, Any]]:
    """A call of every single-append write operation, on records made by an unsigned agent."""
    bob = Caller(agent_id="bob")
    attempt, thought = _attempt_id(memory, bob), _thought_id(memory, bob)
    return {
        "record_attempt": ATTEMPT,
        "mark_conclusion_outdated": {
            "repository": REPO,
            "attempt_id": attempt,
            "reason": "VAT rules changed",
        },
        "forget_attempt": {"repository": REPO, "attempt_id": attempt, "reason": "holds a secret"},
        "append_thought": {"repository": REPO, "type": "Finding", "content": "Coupons apply before VAT"},
        "forget_thought": {"repository": REPO, "thought_id": thought, "reason": "wrong"},
        "upsert_entity_type": {"name": "queue", "description": "a message queue"},
    }


def test_prepare_write_shows_each_writes_entry_and_body_and_writes_nothing(memory: Memory) -> None:
    calls = _writes(memory)
    before = ledger(memory)
    for tool, arguments in calls.items():
        p = prepare(memory, ALICE, tool, arguments)
        chain = ENTITY_TYPES_CHAIN if tool == "upsert_entity_type" else REPO
        assert (p.tool, p.chain, p.agent) == (tool, chain, "alice")
        assert hashlib.sha256(p.body.encode()).hexdigest() == p.body_hash
        assert p.body.encode() == orjson.dumps(orjson.loads(p.body), option=orjson.OPT_SORT_KEYS)
        signing.check_skew(p.at)
        assert ledger(memory) == before, f"prepare_write of {tool} wrote"
        if tool == "record_attempt":
            assert memory.store.find_attempt(p.id) is None


@pytest.mark.parametrize(
    ("tool", "field", "message"),
    [
        ("import_memory_md", "tool", "one signature covers one entry"),
        ("search", "tool", "writes nothing to sign"),
        ("signed_write", "tool", "writes nothing to sign"),
        ("no_such_tool", "tool", "no operation named"),
    ],
)
def test_prepare_write_refuses_a_tool_one_signature_cannot_cover(
    memory: Memory, tool: str, field: str, message: str
) -> None:
    before = ledger(memory)
    with pytest.raises(InvalidInput, match=message) as refused:
        prepare(memory, ALICE, tool, {"repository": REPO, "markdown": "## Decision\n- a\n- b\n"})
    assert refused.value.field == field
    assert ledger(memory) == before


def test_prepare_write_refuses_bad_arguments_of_the_tool_naming_the_field(memory: Memory) -> None:
    with pytest.raises(InvalidInput, match="observation: is required"):
        prepare(memory, ALICE, "record_attempt", {k: v for k, v in ATTEMPT.items() if k != "observation"})
    assert ledger(memory) == []


def test_every_write_signed_in_two_phases_is_stored_as_prepared_with_the_clients_signature(
    memory: Memory,
) -> None:
    calls = _writes(memory)
    key = register_key(memory.store, "alice")
    signer = signing.Signer(key, "alice")
    for tool, arguments in calls.items():
        p = prepare(memory, ALICE, tool, arguments)
        key_id, sig = signer.sign(fields_of(p))
        done = signed_write(
            memory,
            ALICE,
            SignedWriteInput(tool=tool, arguments=arguments, id=p.id, at=p.at, key_id=key_id, sig=sig),
        )
        assert done.tool == tool
        entry, body = list(memory.store.iter_ledger())[-1]
        assert (entry.chain, entry.kind, entry.id, entry.at, entry.agent, entry.body_hash) == tuple(
            fields_of(p)
        )
        assert body == p.body.encode(), tool
        assert (entry.key_id, entry.sig) == (key_id, sig)
        assert signing.verify_envelope(fields_of(p), key_id, sig, key.public_key())
        if tool == "record_attempt":
            assert done.result["attempt_id"] == p.id
    memory.store.verify()


def test_a_time_outside_the_skew_is_refused_and_nothing_is_written(memory: Memory) -> None:
    key = register_key(memory.store, "alice")
    p = prepare(memory, ALICE, "record_attempt", ATTEMPT)
    old = (datetime.now(UTC) - timedelta(seconds=signing.SKEW_S + 60)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    key_id, sig = signing.Signer(key, "alice").sign(fields_of(p)._replace(at=old))
    before = ledger(memory)
    with pytest.raises(InvalidInput, match="from the server's clock") as refused:
        signed_write(
            memory,
            ALICE,
            SignedWriteInput(
                tool="record_attempt", arguments=ATTEMPT, id=p.id, at=old, key_id=key_id, sig=sig
            ),
        )
    assert refused.value.field == "at"
    assert ledger(memory) == before


def test_content_that_changed_between_the_phases_is_a_conflict_and_writes_nothing(memory: Memory) -> None:
    key = register_key(memory.store, "alice")
    thought = {"repository": REPO, "type": "Decision", "content": "Round the cart total once, at the end"}
    p = prepare(memory, ALICE, "append_thought", thought)
    from mentis.api.common import parse
    from mentis.api.thoughts import AppendThoughtInput

    memory.append_thought(
        Caller(agent_id="bob"), parse(AppendThoughtInput, thought)
    )  # a near-duplicate lands
    key_id, sig = signing.Signer(key, "alice").sign(fields_of(p))
    before = ledger(memory)
    with pytest.raises(Conflict, match="changed since prepare_write"):
        signed_write(
            memory,
            ALICE,
            SignedWriteInput(
                tool="append_thought",
                arguments=thought,
                id=p.id,
                at=p.at,
                key_id=key_id,
                sig=sig,
                body_hash=p.body_hash,
            ),
        )
    assert ledger(memory) == before
    again = sign_and_write(memory, ALICE, signing.Signer(key, "alice"), "append_thought", thought)
    assert again.result["superseded"]  # prepared again: the new entry links the near-duplicate


def test_a_signature_over_other_content_is_refused_by_the_store_and_writes_nothing(memory: Memory) -> None:
    key = register_key(memory.store, "alice")
    p = prepare(memory, ALICE, "record_attempt", ATTEMPT)
    other = fields_of(p)._replace(body_hash="0" * 64)
    key_id, sig = signing.Signer(key, "alice").sign(other)
    before = ledger(memory)
    with pytest.raises(InvalidInput, match="does not verify") as refused:
        signed_write(
            memory,
            ALICE,
            SignedWriteInput(
                tool="record_attempt", arguments=ATTEMPT, id=p.id, at=p.at, key_id=key_id, sig=sig
            ),
        )
    assert refused.value.field == "sig"
    assert ledger(memory) == before


def test_a_replayed_signed_write_is_refused_and_writes_nothing(memory: Memory) -> None:
    key = register_key(memory.store, "alice")
    p = prepare(memory, ALICE, "append_thought", {"repository": REPO, "type": "Finding", "content": "x"})
    key_id, sig = signing.Signer(key, "alice").sign(fields_of(p))
    request = SignedWriteInput(
        tool="append_thought",
        arguments={"repository": REPO, "type": "Finding", "content": "x"},
        id=p.id,
        at=p.at,
        key_id=key_id,
        sig=sig,
    )
    signed_write(memory, ALICE, request)
    before = ledger(memory)
    with pytest.raises((InvalidInput, Conflict)):
        signed_write(memory, ALICE, request)
    assert ledger(memory) == before


def test_another_agents_call_cannot_carry_alices_signature(memory: Memory) -> None:
    key = register_key(memory.store, "alice")
    register_key(memory.store, "mallory")
    p = prepare(memory, ALICE, "record_attempt", ATTEMPT)
    key_id, sig = signing.Signer(key, "alice").sign(fields_of(p))
    before = ledger(memory)
    with pytest.raises((Forbidden, InvalidInput)):
        signed_write(
            memory,
            Caller(agent_id="mallory"),
            SignedWriteInput(
                tool="record_attempt", arguments=ATTEMPT, id=p.id, at=p.at, key_id=key_id, sig=sig
            ),
        )
    assert ledger(memory) == before


def test_a_malformed_envelope_is_refused_naming_sig_before_anything_runs(memory: Memory) -> None:
    with pytest.raises(InvalidInput, match="the signature must be 86 base64url characters") as refused:
        signed_write(
            memory,
            ALICE,
            SignedWriteInput(
                tool="record_attempt",
                arguments=ATTEMPT,
                id="9b2c6a4e-0f7e-4a53-9d55-3d1b4c0f2a11",
                at=signing.now_iso(),
                key_id="ed25519:" + "0" * 32,
                sig="s1." + "a" * 32 + ".0.-." + "A" * 40,
            ),
        )
    assert refused.value.field == "sig"
    assert ledger(memory) == []


def test_a_server_signing_its_own_writes_leaves_both_remote_phases_to_the_client(
    memory: Memory, settings: Settings, tmp_path: Path
) -> None:
    key = register_key(memory.store, "alice")
    path = signing.write_private_key(key, tmp_path / "alice.pem")
    local = Memory.open(dataclasses.replace(settings, signing_key=path), HashEmbedder())
    try:
        before = ledger(local)
        prepare(local, ALICE, "record_attempt", ATTEMPT)
        assert ledger(local) == before  # the server's own signer did not write it
        client = signing.Signer(key, "alice")
        sign_and_write(local, ALICE, client, "record_attempt", ATTEMPT)
        entry, _ = list(local.store.iter_ledger())[-1]
        assert entry.kind == "attempt" and entry.agent == "alice"
        assert entry.sig is not None and signing.Envelope.parse(entry.sig).stream == client.stream
    finally:
        local.close()
