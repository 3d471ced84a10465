# ruff: noqa: F811  (fixtures imported from tests.security.stores are parameters here)
"""Findings 1 and 2 of the second security review: a record id is unique across the ledger.

Before the fix, ``append_thought`` accepted the ``thought_id`` of a forgotten thought or attempt
(the id check read only live index rows) and ``signed_write`` let the client choose any record id,
a live thought's included: the ledger then held one id twice and every later open, verify, search
and export of the whole store refused. Each attack here must now be refused with a Conflict that
writes nothing, and the store must open and verify after it, on both stores.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput
from mentis.api.common import parse
from mentis.api.signed import SignedWriteInput
from mentis.api.skills import DeleteSkillInput, UploadSkillInput
from mentis.api.thoughts import AppendThoughtInput, ForgetThoughtInput
from mentis.config import Settings
from mentis.errors import Conflict, InvalidInput
from mentis.ledger import signing
from mentis.ledger.bodies import AttemptBody, ThoughtBody
from mentis.ledger.canonical import canonical
from mentis.providers.embed import HashEmbedder
from mentis.service.context import open_store
from mentis.service.memory import Caller, Memory
from mentis.service.operations import signed_write
from mentis.store.postgres import schema as postgres_schema
from mentis.store.protocol import AttemptRow
from mentis.store.seal import Seal
from mentis.store.sqlite import store as sqlite
from tests.http_support import LiveServer
from tests.security.stores import ADMIN, export_lines, raw_sql, reseal, scratch, settings, state  # noqa: F401
from tests.signing_support import prepare, register_key
from tests.transports import AGENT, Call

VICTIM, ATTACKER = "team-a/app", "team-b/app"
ALICE = Caller(agent_id="alice")


@pytest.fixture
def memory(open_memory: Callable[[], Memory]) -> Memory:
    return open_memory()


def _attempt(m: Memory, repository: str = VICTIM, caller: Caller = ADMIN) -> str:
    data = {"repository": repository, "task_id": "t", "action": "tried the fix", "observation": "it held"}
    return m.record_attempt(caller, parse(RecordAttemptInput, data)).attempt_id


def _thought(m: Memory, repository: str = VICTIM, caller: Caller = ADMIN, **fields: Any) -> str:
    data = {"repository": repository, "type": "Finding", "content": "the cache is warm", **fields}
    return m.append_thought(caller, parse(AppendThoughtInput, data)).thought_id


def _skill_version(m: Memory, repository: str = VICTIM) -> str:
    content = "---\nname: run-tests\ndescription: How to run the tests\n---\nRun pytest.\n"
    m.upload_skill(ADMIN, parse(UploadSkillInput, {"repository": repository, "content": content}))
    (entry, _), *_ = m.store.skill_history(repository, "run-tests")
    return entry.id


def _entry_ids(m: Memory, kind: str) -> list[str]:
    return [e.id for e, _ in m.store.iter_ledger() if e.kind == kind]


def _reopens_whole(open_memory: Callable[[], Memory]) -> None:
    """A new open verifies every chain and leaves none damaged."""
    again = open_memory()
    assert again.store.damaged == {}
    assert {r.chain for r in again.store.verify()} >= set(again.store.repositories())


# ---------------------------------------------------------------- finding 1: append_thought's thought_id


def _forgotten_thought(m: Memory) -> str:
    tid = _thought(m)
    m.forget_thought(ADMIN, parse(ForgetThoughtInput, {"repository": VICTIM, "thought_id": tid}))
    return tid


def _forgotten_attempt(m: Memory) -> str:
    aid = _attempt(m)
    m.forget_attempt(ADMIN, ForgetInput(repository=VICTIM, attempt_id=aid))
    return aid


def _deleted_skill_version(m: Memory) -> str:
    vid = _skill_version(m)
    m.delete_skill(ADMIN, parse(DeleteSkillInput, {"repository": VICTIM, "skill_id": "run-tests"}))
    return vid


def _correction(m: Memory) -> str:
    m.mark_conclusion_outdated(
        ADMIN, MarkOutdatedInput(repository=VICTIM, attempt_id=_attempt(m), reason="stale")
    )
    return _entry_ids(m, "correction")[0]


def _tombstone(m: Memory) -> str:
    _forgotten_thought(m)
    return _entry_ids(m, "forget")[0]


TAKEN: dict[str, Callable[[Memory], str]] = {
    "forgotten-thought": _forgotten_thought,
    "forgotten-attempt": _forgotten_attempt,
    "live-skill-version": _skill_version,
    "deleted-skill-version": _deleted_skill_version,
    "correction": _correction,
    "forget-tombstone": _tombstone,
}


@pytest.mark.parametrize("taken", list(TAKEN))
@pytest.mark.parametrize("repository", [VICTIM, ATTACKER])
def test_append_thought_refuses_an_id_any_ledger_entry_already_has(
    memory: Memory, open_memory: Callable[[], Memory], taken: str, repository: str
) -> None:
    used = TAKEN[taken](memory)
    before = state(memory)
    with pytest.raises(Conflict) as refused:
        _thought(memory, repository, thought_id=used)
    assert used in refused.value.message and "thought_id" in refused.value.message
    assert VICTIM not in refused.value.message or repository == VICTIM  # names no other repository
    assert state(memory) == before
    _reopens_whole(open_memory)


# ---------------------------------------------------------------- finding 2: signed_write's planned id


def _forged_signed_write(m: Memory, tool: str, arguments: dict[str, Any], chosen: str) -> None:
    """A client that prepares a write, swaps in an id of its choosing and signs the result: the
    body is what the server builds with that id, so the signature verifies."""
    key = register_key(m.store, "alice")
    signer = signing.Signer(key, "alice")
    p = prepare(m, ALICE, tool, arguments)
    body = orjson.loads(p.body)
    for field in ("attempt_id", "thought_id"):
        if body.get(field) == p.id:
            body[field] = chosen
    body_hash = hashlib.sha256(canonical(body)).hexdigest()
    key_id, sig = signer.sign(signing.Unsigned(p.chain, p.kind, chosen, p.at, p.agent, body_hash))
    fields = {"id": chosen, "at": p.at, "key_id": key_id, "sig": sig, "body_hash": body_hash}
    signed_write(m, ALICE, parse(SignedWriteInput, {"tool": tool, "arguments": arguments, **fields}))


RECORD = {"repository": ATTACKER, "task_id": "t", "action": "a", "observation": "o"}
THOUGHT = {"repository": ATTACKER, "type": "Finding", "content": "planted"}


@pytest.mark.parametrize(
    ("tool", "arguments", "taken"),
    [
        ("record_attempt", RECORD, "live-thought"),
        ("record_attempt", RECORD, "live-attempt"),
        ("append_thought", THOUGHT, "live-thought"),
        ("append_thought", THOUGHT, "forgotten-thought"),
        ("append_thought", THOUGHT, "forgotten-attempt"),
        ("record_attempt", RECORD, "live-skill-version"),
    ],
)
def test_signed_write_refuses_a_client_chosen_id_that_is_taken(
    memory: Memory, open_memory: Callable[[], Memory], tool: str, arguments: dict[str, Any], taken: str
) -> None:
    makers: dict[str, Callable[[Memory], str]] = {
        "live-thought": _thought,
        "live-attempt": _attempt,
        **TAKEN,
    }
    used = makers[taken](memory)
    before = state(memory)
    with pytest.raises(Conflict) as refused:
        _forged_signed_write(memory, tool, arguments, used)
    assert used in refused.value.message
    after = state(memory)
    # the registry events register_key made are the only new entries
    assert [s for s in after if s[0] != signing.AGENTS_CHAIN] == [
        s for s in before if s[0] != signing.AGENTS_CHAIN
    ]
    _reopens_whole(open_memory)


def test_signed_write_refuses_an_id_that_is_not_a_uuid(memory: Memory) -> None:
    before = [s for s in state(memory) if s[0] != signing.AGENTS_CHAIN]
    with pytest.raises(InvalidInput) as refused:
        _forged_signed_write(memory, "record_attempt", RECORD, "not-a-uuid")
    assert refused.value.field == "id"
    assert [s for s in state(memory) if s[0] != signing.AGENTS_CHAIN] == before


def test_signed_write_with_the_prepared_id_still_writes(memory: Memory) -> None:
    chosen = str(uuid.uuid4())
    _forged_signed_write(memory, "append_thought", THOUGHT, chosen)
    assert chosen in _entry_ids(memory, "thought")


# ---------------------------------------------------------------- through a transport, with a scoped token


@pytest.mark.parametrize("transport", ["mcp", "rest"])
def test_a_write_token_for_one_repository_cannot_reuse_an_id_over_a_transport(
    settings: Settings, open_memory: Callable[[], Memory], transport: str
) -> None:
    """The attack as reported: a token scoped to the attacker's repository appends a thought with
    the id of another repository's forgotten thought (and, signing, an attempt with the id of a
    live one). Both are refused, nothing is written, and every repository still opens."""
    with LiveServer(settings.db_path, settings=settings) as live:
        forgotten, live_thought = _forgotten_thought(live.memory), _thought(live.memory)
        before = live.ledger()
        attacker = Call(transport, live, {}, (ATTACKER,))
        code, message = attacker("append_thought", {**THOUGHT, "thought_id": forgotten})
        assert (code, forgotten in message) == ("conflict", True), message
        assert live.ledger() == before
        signer = signing.Signer(register_key(live.memory.store, AGENT), AGENT)
        before = live.ledger()
        # a signed write whose id the client chose: the proxy's two phases, with the id swapped
        code, prepared = attacker("prepare_write", {"tool": "record_attempt", "arguments": RECORD})
        assert code == "ok", prepared
        body = orjson.loads(prepared["body"])
        body["attempt_id"] = live_thought
        body_hash = hashlib.sha256(canonical(body)).hexdigest()
        at = prepared["at"]
        key_id, sig = signer.sign(signing.Unsigned(ATTACKER, "attempt", live_thought, at, AGENT, body_hash))
        signed = {"id": live_thought, "at": at, "key_id": key_id, "sig": sig, "body_hash": body_hash}
        code, message = attacker("signed_write", {"tool": "record_attempt", "arguments": RECORD, **signed})
        assert (code, live_thought in message) == ("conflict", True), message
        assert live.ledger() == before
    _reopens_whole(open_memory)


# ---------------------------------------------------------------- inside the write transaction


WRITERS = 6


def _thought_body(thought_id: str, repository: str) -> ThoughtBody:
    return ThoughtBody(
        thought_id=thought_id,
        repository=repository,
        type="Finding",
        role="Memory",
        content="raced",
        importance="0.5",
        agent_id="w",
        created_at=signing.now_iso(),
        tags=[],
        concepts=[],
        refs=[],
        relations=[],
    )


def test_concurrent_writers_on_other_chains_cannot_both_take_one_id(settings: Settings) -> None:
    """Writers on their own connections (SQLite: one per writer, as processes have; PostgreSQL: a
    pool each, on chains whose locks never meet) append one id at once: exactly one is stored."""
    dim = HashEmbedder().dim
    stores = [open_store(settings, dim) for _ in range(WRITERS)]
    the_id = str(uuid.uuid4())
    start = threading.Barrier(WRITERS)

    def write(i: int) -> str:
        chain, vector = f"team-{i}/app", HashEmbedder().embed(["raced"])[0]
        start.wait(timeout=30)
        try:
            stores[i].append_thought(_thought_body(the_id, chain), vector, Seal())
        except Conflict:
            return "refused"
        return "stored"

    try:
        with ThreadPoolExecutor(WRITERS) as pool:
            outcomes = list(pool.map(write, range(WRITERS)))
    finally:
        for store in stores:
            store.close()
    assert sorted(outcomes) == ["refused"] * (WRITERS - 1) + ["stored"]
    check = open_store(settings, dim)
    try:
        assert check.damaged == {} and len(check.verify()) == 1
        assert [e.id for e, _ in check.iter_ledger()] == [the_id]
    finally:
        check.close()


def test_a_bulk_append_that_repeats_an_id_or_takes_a_used_one_writes_nothing(memory: Memory) -> None:
    used = _forgotten_thought(memory)
    before = state(memory)
    vector = HashEmbedder().embed(["x"])[0]

    def row(attempt_id: str) -> AttemptRow:
        body = AttemptBody(
            attempt_id=attempt_id,
            repository=ATTACKER,
            task_id="t",
            agent_id="w",
            created_at=signing.now_iso(),
            action="a",
            observation="o",
            files=[],
            tags=[],
        )
        return AttemptRow(body, vector)

    twice = str(uuid.uuid4())
    for rows in ([row(str(uuid.uuid4())), row(twice), row(twice)], [row(str(uuid.uuid4())), row(used)]):
        with pytest.raises(Conflict):
            memory.store.append_attempts(rows, Seal())
        assert state(memory) == before


def _scratch_export(scratch: Memory) -> list[dict[str, Any]]:
    """An export of one repository holding an attempt, its correction and a thought."""
    aid = _attempt(scratch, ATTACKER)
    scratch.mark_conclusion_outdated(
        ADMIN, MarkOutdatedInput(repository=ATTACKER, attempt_id=aid, reason="old")
    )
    _thought(scratch, ATTACKER)
    return export_lines(scratch)


def _entry(lines: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(line["entry"] for line in lines[1:] if line["entry"]["kind"] == kind)


def test_an_import_whose_entry_takes_an_id_of_this_store_is_refused_naming_it(
    memory: Memory, scratch: Memory
) -> None:
    used = _forgotten_thought(memory)
    lines = _scratch_export(scratch)
    _entry(lines, "correction")["id"] = used  # a correction's id: no link names it, the id is still taken
    before = state(memory)
    with pytest.raises(Conflict) as refused:
        memory.import_(ADMIN, reseal(lines))
    assert used in refused.value.message and "nothing was imported" in refused.value.message
    assert state(memory) == before


def test_an_import_that_holds_one_id_twice_is_refused_naming_it(memory: Memory, scratch: Memory) -> None:
    lines = _scratch_export(scratch)
    twice = _entry(lines, "thought")["id"]
    _entry(lines, "correction")["id"] = twice
    before = state(memory)
    with pytest.raises(Conflict) as refused:
        memory.import_(ADMIN, reseal(lines))
    assert f"holds id {twice} twice" in refused.value.message
    assert state(memory) == before


def test_a_store_of_the_schema_before_entry_ids_is_upgraded_and_then_refuses_a_used_id(
    settings: Settings, open_memory: Callable[[], Memory]
) -> None:
    m = open_memory()
    used = _forgotten_thought(m)
    m.close()
    raw_sql(settings, "DROP TABLE entry_ids")
    raw_sql(
        settings,
        "UPDATE meta SET value = ? WHERE key = 'schema_version'",
        ("8" if settings.uses_postgres else "4",),
    )
    upgraded = open_memory()
    newest = postgres_schema.SCHEMA_VERSION if settings.uses_postgres else sqlite.SCHEMA_VERSION
    assert raw_sql(settings, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(newest),)]
    assert raw_sql(settings, "SELECT count(*) FROM entry_ids") == [(len(state(upgraded)),)]
    with pytest.raises(Conflict):
        _thought(upgraded, ATTACKER, thought_id=used)
