# ruff: noqa: F811  (fixtures imported from tests.security.stores are parameters here)
"""Finding 4 of security issue 24: whoever can write the store's database could add an unsigned
entry in a keyed agent's name. Verification folded the agent registry in rowid order, which no
hash covers, so an entry put at rowid −1 (before the registry's events) passed open and
``verify --signatures``.

Now the registry chain is folded in its own seq order and every other entry is placed by its
``at`` (hashed) against the registry events' ``at`` (``mentis.ledger.signatures``): these tests forge
entries with the real format and hashes, put them where the old fold would have let them through,
and check that open and both verifications refuse them, naming the forged entry. Keys are real
Ed25519 keys; both stores.
"""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mentis.api.agents import AddAgentKeyInput, DisableAgentInput, RegisterAgentInput, RevokeAgentKeyInput
from mentis.api.attempts import RecordAttemptInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import Conflict, IntegrityError
from mentis.ledger import signing
from mentis.ledger.bodies import AttemptBody
from mentis.ledger.canonical import canonical
from mentis.ledger.entry import seal
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.protocol import Store
from mentis.store.seal import Seal
from tests.security.stores import settings, state  # noqa: F401

REPO = "github.com/acme/shop"
FORGED = "github.com/acme/forged"
ADMIN = Caller(agent_id="admin", admin=True)
COLUMNS = "rowid, v, chain, seq, kind, id, at, agent, prev, body_hash, key_id, sig, hash"


@contextmanager
def raw_db(settings: Settings) -> Iterator[tuple[Any, str]]:
    """A connection straight to the store's database (autocommit) and its parameter mark."""
    if settings.uses_postgres:
        import psycopg

        assert settings.database_url is not None
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            yield conn, "%s"
        return
    con = sqlite3.connect(settings.db_path, isolation_level=None)
    try:
        yield con, "?"
    finally:
        con.close()


def forge(
    settings: Settings,
    *,
    agent: str,
    at: str,
    rowid: int,
    key: Ed25519PrivateKey | None = None,
    chain: str = FORGED,
) -> tuple[str, int]:
    """Append, straight into the database, an attempt by ``agent`` dated ``at`` at the head of
    ``chain`` (a new chain by default) with every hash right, at ``rowid``; signed with ``key``
    (a new signing stream) when given. Returns the entry's (chain, seq)."""
    attempt_id = str(uuid.uuid4())
    fields_of_body = {"attempt_id": attempt_id, "repository": chain, "task_id": "t", "action": "forged"}
    fields_of_body |= {"observation": "written by someone with the file", "files": [], "tags": []}
    body = canonical({**fields_of_body, "agent_id": agent, "created_at": at})
    with raw_db(settings) as (conn, p):
        head = conn.execute(f"SELECT seq, hash FROM heads WHERE chain={p}", (chain,)).fetchone()
        seq, prev = (0, "") if head is None else (int(head[0]) + 1, str(head[1]))
        fields = signing.Unsigned(chain, "attempt", attempt_id, at, agent, signing_hash(body))
        key_id = sig = None
        if key is not None:
            key_id, sig = signing.Signer(key, agent).sign(fields)
        e = seal(
            chain=chain,
            seq=seq,
            prev=prev,
            kind="attempt",
            id=attempt_id,
            at=at,
            agent=agent,
            body=body,
            key_id=key_id,
            sig=sig,
        )
        conn.execute(
            f"INSERT INTO entries({COLUMNS}) VALUES({', '.join([p] * 13)})",
            (
                rowid,
                e.v,
                e.chain,
                e.seq,
                e.kind,
                e.id,
                e.at,
                e.agent,
                e.prev,
                e.body_hash,
                e.key_id,
                e.sig,
                e.hash,
            ),
        )
        conn.execute(f"INSERT INTO bodies(rowid, body) VALUES({p}, {p})", (rowid, body))
        if head is None:
            conn.execute(f"INSERT INTO heads(chain, seq, hash) VALUES({p}, {p}, {p})", (chain, seq, e.hash))
        else:
            conn.execute(f"UPDATE heads SET seq={p}, hash={p} WHERE chain={p}", (seq, e.hash, chain))
    return chain, seq


def signing_hash(body: bytes) -> str:
    import hashlib

    return hashlib.sha256(body).hexdigest()


def later(minutes: float) -> str:
    return (datetime.now(UTC) + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def move_row(settings: Settings, old: int, new: int) -> None:
    """Renumber one entry (and its body): what the file's writer may do, since no hash covers it."""
    with raw_db(settings) as (conn, p):
        conn.execute(f"UPDATE entries SET rowid={p} WHERE rowid={p}", (new, old))
        conn.execute(f"UPDATE bodies SET rowid={p} WHERE rowid={p}", (new, old))


def rowid_of(settings: Settings, chain: str, seq: int) -> int:
    with raw_db(settings) as (conn, p):
        row = conn.execute(f"SELECT rowid FROM entries WHERE chain={p} AND seq={p}", (chain, seq)).fetchone()
    return int(row[0])


def last_rowid(settings: Settings) -> int:
    with raw_db(settings) as (conn, _):
        return int(conn.execute("SELECT max(rowid) FROM entries").fetchone()[0])


def _store(settings: Settings) -> Store:
    if settings.uses_postgres:
        from mentis.store.postgres.store import PostgresStore

        assert settings.database_url is not None
        return PostgresStore(settings.database_url, HashEmbedder().dim, verify=False)
    from mentis.store.sqlite.store import SqliteStore

    return SqliteStore(settings.db_path, HashEmbedder().dim, verify=False)


def assert_refused(settings: Settings, where: tuple[str, int], message: str) -> None:
    """Open refuses the forged entry's chain alone, naming the entry (the others serve), and
    verify (last signatures, and every signature) names it."""
    memory = Memory.open(settings, HashEmbedder())
    try:
        refused = memory.store.damaged.get(where[0])
        assert refused is not None, memory.store.damaged
        assert (refused.chain, refused.seq) == where and re.search(message, str(refused)), str(refused)
    finally:
        memory.close()
    store = _store(settings)
    try:
        for every in (False, True):
            with pytest.raises(IntegrityError, match=message) as verified:
                store.verify(signatures=every)
            assert (verified.value.chain, verified.value.seq) == where
    finally:
        store.close()


def _record(memory: Memory, caller: Caller, text: str, seal: Seal | None = None) -> str:
    req = RecordAttemptInput(repository=REPO, task_id="t", action=text, observation=text)
    return memory.record_attempt(caller, req, seal=seal).attempt_id


def _keyed(settings: Settings, agent: str = "alice") -> Ed25519PrivateKey:
    """A store where ``agent`` wrote unsigned, then got a key and wrote signed."""
    memory = Memory.open(settings, HashEmbedder())
    try:
        _record(memory, Caller(agent_id=agent), "before the key")
        memory.register_agent(ADMIN, parse(RegisterAgentInput, {"agent_id": agent}))
        key = Ed25519PrivateKey.generate()
        public = signing.public_text(key.public_key())
        memory.add_agent_key(ADMIN, parse(AddAgentKeyInput, {"agent_id": agent, "public_key": public}))
        _record(memory, Caller(agent_id=agent), "signed", Seal(sign=signing.Signer(key, agent).sign))
    finally:
        memory.close()
    return key


def test_an_unsigned_entry_in_a_keyed_agents_name_put_before_the_registry_fails_open_and_verify(
    settings: Settings,
) -> None:
    _keyed(settings)
    where = forge(settings, agent="alice", at=signing.now_iso(), rowid=-1)
    assert_refused(settings, where, "unsigned entry by agent 'alice', whose writes must be signed")


def test_an_unsigned_entry_put_after_the_registry_fails_the_same_way(settings: Settings) -> None:
    _keyed(settings)
    where = forge(settings, agent="alice", at=signing.now_iso(), rowid=last_rowid(settings) + 1)
    assert_refused(settings, where, "unsigned entry by agent 'alice', whose writes must be signed")


def test_an_entry_signed_with_a_revoked_key_and_the_revocation_moved_last_fails(settings: Settings) -> None:
    """The key's holder (a stolen key) signs after the revocation; the writer of the file moves the
    revocation's row after the forged one, where the old fold still held the key active."""
    key = _keyed(settings)
    memory = Memory.open(settings, HashEmbedder())
    try:
        key_id = signing.key_id_of(key.public_key())
        memory.revoke_agent_key(
            ADMIN, parse(RevokeAgentKeyInput, {"agent_id": "alice", "key_id": key_id, "reason": "stolen"})
        )
    finally:
        memory.close()
    revocation = _heads(settings)[signing.AGENTS_CHAIN][0]
    revoked_row = rowid_of(settings, signing.AGENTS_CHAIN, revocation)
    where = forge(settings, agent="alice", at=later(11), rowid=last_rowid(settings) + 1, key=key)
    move_row(settings, revoked_row, last_rowid(settings) + 1)
    assert_refused(settings, where, "after its revocation")


def test_an_entry_by_a_disabled_agent_put_before_the_disabling_fails(settings: Settings) -> None:
    memory = Memory.open(settings, HashEmbedder())
    try:
        _record(memory, Caller(agent_id="mallory"), "before")
        memory.register_agent(ADMIN, parse(RegisterAgentInput, {"agent_id": "mallory"}))
        memory.disable_agent(ADMIN, parse(DisableAgentInput, {"agent_id": "mallory", "reason": "left"}))
    finally:
        memory.close()
    where = forge(settings, agent="mallory", at=later(60), rowid=-1)
    assert_refused(settings, where, "agent 'mallory' wrote after it was disabled")


def test_an_unsigned_entry_after_a_signed_one_in_its_chain_fails_even_dated_before_the_key(
    settings: Settings,
) -> None:
    """Seq order is hash-covered: dating a forged entry before the key does not let it follow the
    agent's signed entry in the same chain."""
    _keyed(settings)
    where = forge(settings, agent="alice", at="2020-01-01T00:00:00.000000Z", rowid=-1, chain=REPO)
    move_row(settings, -1, last_rowid(settings) + 1)  # seq order of its chain, for the one pass
    assert_refused(settings, where, "after its signed entry at seq 1 of this chain")


def test_an_unsigned_entry_dated_before_the_agents_first_key_verifies(settings: Settings) -> None:
    """The rule's limit, as README states it: a key vouches only from its own start, so an unsigned
    entry dated before it proves nothing about who wrote it, and nothing rules it out."""
    _keyed(settings)
    forge(settings, agent="alice", at="2020-01-01T00:00:00.000000Z", rowid=-1)
    memory = Memory.open(settings, HashEmbedder())
    try:
        assert memory.verify_integrity(ADMIN, signatures=True).ok
    finally:
        memory.close()


def test_rows_renumbered_without_changing_what_they_say_still_verify(settings: Settings) -> None:
    """The revocation's row moved before the last entry signed with the key (dated before it):
    no hash covers rowids, so nothing that verifies depends on them across chains."""
    key = _keyed(settings)
    memory = Memory.open(settings, HashEmbedder())
    try:
        key_id = signing.key_id_of(key.public_key())
        memory.revoke_agent_key(
            ADMIN, parse(RevokeAgentKeyInput, {"agent_id": "alice", "key_id": key_id, "reason": "rotated"})
        )
    finally:
        memory.close()
    heads = {c: s for c, (s, _) in _heads(settings).items()}
    last_signed, revocation = (
        rowid_of(settings, REPO, heads[REPO]),
        rowid_of(settings, signing.AGENTS_CHAIN, heads[signing.AGENTS_CHAIN]),
    )
    for old, new in ((last_signed, -5), (revocation, last_signed), (-5, revocation)):
        move_row(settings, old, new)
    memory = Memory.open(settings, HashEmbedder())
    try:
        assert memory.verify_integrity(ADMIN, signatures=True).ok
    finally:
        memory.close()


def _heads(settings: Settings) -> dict[str, tuple[int, str]]:
    with raw_db(settings) as (conn, _):
        return {str(c): (int(s), str(h)) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}


def test_a_first_key_dated_before_an_unsigned_entry_of_its_agent_is_refused_and_writes_nothing(
    settings: Settings,
) -> None:
    """An unsigned entry dated after the key would make the ledger fail verification: the store
    refuses the key (a write that raced it, or a clock behind) instead."""
    memory = Memory.open(settings, HashEmbedder())
    try:
        at = later(5)
        body = AttemptBody(
            attempt_id="a1",
            repository=REPO,
            task_id="t",
            agent_id="alice",
            created_at=at,
            action="x",
            observation="y",
            files=[],
            tags=[],
        )
        memory.store.append_attempt(body, HashEmbedder().embed(["x"])[0], Seal())
        memory.register_agent(ADMIN, parse(RegisterAgentInput, {"agent_id": "alice"}))
        before = state(memory)
        public = signing.public_text(Ed25519PrivateKey.generate().public_key())
        with pytest.raises(Conflict, match="unsigned entry dated"):
            memory.add_agent_key(ADMIN, parse(AddAgentKeyInput, {"agent_id": "alice", "public_key": public}))
        assert state(memory) == before
    finally:
        memory.close()


def test_a_registry_event_is_dated_when_the_store_holds_its_lock(settings: Settings) -> None:
    memory = Memory.open(settings, HashEmbedder())
    try:
        started = signing.now_iso()
        memory.register_agent(ADMIN, parse(RegisterAgentInput, {"agent_id": "alice"}))
        (entry, body) = [(e, b) for e, b in memory.store.iter_ledger() if e.chain == signing.AGENTS_CHAIN][-1]
        assert body is not None and orjson.loads(body)["at"] == entry.at >= started
    finally:
        memory.close()
