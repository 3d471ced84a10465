"""Agents with keys and signed writes, on both stores: the registry, every refusal (with the ledger
unchanged), the revoked-key timeline, an attacker who rewrites a body and every hash but holds no
key, and export → import. Keys are real Ed25519 keys made in each test."""

from __future__ import annotations

import dataclasses
import io
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

from mentis.api.agents import (
    AddAgentKeyInput,
    DisableAgentInput,
    RegisterAgentInput,
    RevokeAgentKeyInput,
    ShowAgentInput,
)
from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import ConfigError, Forbidden, IntegrityError, InvalidInput
from mentis.ledger import signing
from mentis.ledger.canonical import sha256_hex
from mentis.ledger.entry import entry_hash
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.protocol import Store
from mentis.store.seal import Seal
from tests.conformance.helpers import REPOS, ledger, record

ADMIN = Caller(agent_id="admin", admin=True)
ALICE = Caller(agent_id="alice")
BOB = Caller(agent_id="bob")


def register(memory: Memory, agent: str, *aliases: str) -> None:
    memory.register_agent(ADMIN, parse(RegisterAgentInput, {"agent_id": agent, "aliases": list(aliases)}))


def add_key(memory: Memory, agent: str) -> Ed25519PrivateKey:
    key = Ed25519PrivateKey.generate()
    memory.add_agent_key(
        ADMIN,
        parse(AddAgentKeyInput, {"agent_id": agent, "public_key": signing.public_text(key.public_key())}),
    )
    return key


def signed_by(key: Ed25519PrivateKey, agent: str) -> signing.Signer:
    return signing.Signer(key, agent)


def write_key(path: Path, key: Ed25519PrivateKey) -> Path:
    return signing.write_private_key(key, path)


@pytest.fixture
def keyed(memory: Memory) -> tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey]:
    """A store where alice and bob each have one key."""
    register(memory, "alice")
    register(memory, "bob")
    return memory, add_key(memory, "alice"), add_key(memory, "bob")


def test_a_signed_write_is_stored_with_its_key_id_and_envelope_and_verifies(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey],
) -> None:
    memory, alice_key, _ = keyed
    signer = signed_by(alice_key, "alice")
    first = record(memory, ALICE, observation="one", seal=Seal(sign=signer.sign))
    second = record(memory, ALICE, observation="two", seal=Seal(sign=signer.sign))
    entries = {e.id: e for e, _ in memory.store.iter_ledger()}
    a, b = entries[first.attempt_id], entries[second.attempt_id]
    assert a.key_id == b.key_id == signer.key_id
    assert a.sig is not None and b.sig is not None
    env_a, env_b = signing.Envelope.parse(a.sig), signing.Envelope.parse(b.sig)
    assert (env_a.stream, env_a.n, env_a.prev) == (env_b.stream, 0, "")
    assert env_b.n == 1
    fields = signing.Unsigned(a.chain, a.kind, a.id, a.at, a.agent, a.body_hash)
    assert env_b.prev == signing.Statement.of(fields, signer.key_id, env_a).digest()
    assert signing.verify_envelope(fields, signer.key_id, a.sig, alice_key.public_key())
    assert memory.verify_integrity(ADMIN, signatures=True).ok
    assert memory.verify_integrity(ADMIN).ok


def test_local_signing_from_a_key_file_signs_the_agents_writes(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey], settings: Settings, tmp_path: Path
) -> None:
    memory, alice_key, _ = keyed
    path = write_key(tmp_path / "alice.pem", alice_key)
    local = Memory.open(dataclasses.replace(settings, signing_key=path), HashEmbedder())
    try:
        assert local.settings.agent_id == "alice"  # the key's agent, from the registry
        made = record(local, Caller(agent_id="alice"), observation="signed locally")
        with pytest.raises(Forbidden, match="must be signed"):
            record(local, Caller(agent_id="bob"))  # bob's writes are not this process's to sign
    finally:
        local.close()
    entry = next(e for e, _ in memory.store.iter_ledger() if e.id == made.attempt_id)
    assert entry.key_id == signing.key_id_of(alice_key.public_key()) and entry.sig


# ---------------------------------------------------------------- refusals, nothing written


def _other_content(key: Ed25519PrivateKey) -> signing.Sign:
    signer = signing.Signer(key, "alice")
    return lambda f: signer.sign(f._replace(body_hash="0" * 64))


def _short_signature(key: Ed25519PrivateKey) -> signing.Sign:
    signer = signing.Signer(key, "alice")

    def sign(f: signing.Unsigned) -> tuple[str, str]:
        key_id, env = signer.sign(f)
        return key_id, env[:-4]

    return sign


REFUSALS: dict[str, tuple[type[Exception], str, Callable[[Ed25519PrivateKey, Ed25519PrivateKey], Any]]] = {
    "unsigned by a keyed agent": (Forbidden, "must be signed", lambda a, b: None),
    "an unregistered key": (
        InvalidInput,
        "not in the agent registry",
        lambda a, b: signing.Signer(Ed25519PrivateKey.generate(), "alice").sign,
    ),
    "the key of another agent": (
        Forbidden,
        "belongs to agent 'bob'",
        lambda a, b: signing.Signer(b, "alice").sign,
    ),
    "a signature over other content": (InvalidInput, "does not verify", lambda a, b: _other_content(a)),
    "a malformed sig": (
        InvalidInput,
        "sig must be s1",
        lambda a, b: lambda f: (signing.key_id_of(a.public_key()), "s1.not-an-envelope"),
    ),
    "a signature of the wrong length": (InvalidInput, "86 base64url", lambda a, b: _short_signature(a)),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_each_bad_signature_is_refused_and_writes_nothing(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey], case: str
) -> None:
    memory, alice_key, bob_key = keyed
    error, message, make = REFUSALS[case]
    before = ledger(memory)
    with pytest.raises(error, match=message):
        record(memory, ALICE, seal=Seal(sign=make(alice_key, bob_key)))
    assert ledger(memory) == before
    assert memory.verify_integrity(ADMIN, signatures=True).ok


def test_a_replayed_envelope_is_refused_and_writes_nothing(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey],
) -> None:
    memory, alice_key, _ = keyed
    captured: list[tuple[str, str]] = []
    signer = signing.Signer(alice_key, "alice")

    def keep(fields: signing.Unsigned) -> tuple[str, str]:
        captured.append(signer.sign(fields))
        return captured[-1]

    at, planned = signing.now_iso(), "11111111-1111-4111-8111-111111111111"
    record(memory, ALICE, observation="the same content", seal=Seal(id=planned, at=at, sign=keep))
    before = ledger(memory)
    # the very same write again (same id, time, content and envelope), into another repository's chain
    # would have another statement; into the same one, the store sees statement 0 of a known stream
    replayed = Seal(id=planned, at=at, sign=lambda fields: captured[0])
    with pytest.raises(InvalidInput, match="already used"):
        record(memory, ALICE, observation="the same content", seal=replayed)
    assert ledger(memory) == before


def test_a_signed_write_dated_outside_the_clock_skew_is_refused_and_writes_nothing(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey],
) -> None:
    memory, alice_key, _ = keyed
    before = ledger(memory)
    stale = "2020-01-01T00:00:00.000000Z"
    with pytest.raises(InvalidInput, match="from the server's clock") as refused:
        record(memory, ALICE, seal=Seal(at=stale, sign=signing.Signer(alice_key, "alice").sign))
    assert refused.value.field == "at"
    assert ledger(memory) == before


def test_a_disabled_agent_and_a_revoked_key_are_refused_and_write_nothing(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey],
) -> None:
    memory, alice_key, bob_key = keyed
    alice_id = signing.key_id_of(alice_key.public_key())
    memory.revoke_agent_key(
        ADMIN, parse(RevokeAgentKeyInput, {"agent_id": "alice", "key_id": alice_id, "reason": "laptop lost"})
    )
    memory.disable_agent(ADMIN, parse(DisableAgentInput, {"agent_id": "bob", "reason": "left the team"}))
    before = ledger(memory)
    with pytest.raises(Forbidden, match="revoked"):
        record(memory, ALICE, seal=Seal(sign=signing.Signer(alice_key, "alice").sign))
    with pytest.raises(Forbidden, match="must be signed"):
        record(memory, ALICE)  # revoking every key does not let unsigned writes back in
    with pytest.raises(Forbidden, match="disabled"):
        record(memory, BOB, seal=Seal(sign=signing.Signer(bob_key, "bob").sign))
    assert ledger(memory) == before


def test_the_revoked_key_timeline_keeps_earlier_signatures_valid(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey], open_memory: Callable[[], Memory]
) -> None:
    memory, alice_key, _ = keyed
    old = signing.Signer(alice_key, "alice")
    before_revocation = [
        record(memory, ALICE, observation=f"before {i}", seal=Seal(sign=old.sign)).attempt_id
        for i in range(3)
    ]
    memory.revoke_agent_key(
        ADMIN, parse(RevokeAgentKeyInput, {"agent_id": "alice", "key_id": old.key_id, "reason": "rotated"})
    )
    new_key = add_key(memory, "alice")
    with pytest.raises(Forbidden, match="revoked"):
        record(memory, ALICE, observation="after, old key", seal=Seal(sign=old.sign))
    new = Seal(sign=signing.Signer(new_key, "alice").sign)
    after = record(memory, ALICE, observation="after, new key", seal=new).attempt_id
    reopened = open_memory()  # open verifies every chain and each stream's last signature
    assert reopened.verify_integrity(ADMIN, signatures=True).ok
    keys = {e.id: e.key_id for e, _ in reopened.store.iter_ledger()}
    assert {keys[i] for i in before_revocation} == {old.key_id}
    assert keys[after] == signing.key_id_of(new_key.public_key())
    shown = reopened.show_agent(ALICE, parse(ShowAgentInput, {"agent_id": "alice"}))
    assert [(k.key_id, k.reason) for k in shown.keys] == [(old.key_id, "rotated"), (keys[after], None)]


# ---------------------------------------------------------------- the registry chain


def test_the_registry_chain_is_no_repository_and_ordinary_writes_may_not_use_it(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey],
) -> None:
    memory, _, _ = keyed
    record(memory, Caller(agent_id="carol"))
    assert signing.AGENTS_CHAIN in {c for c, _, _ in ledger(memory)}
    assert signing.AGENTS_CHAIN not in memory.store.repositories()
    assert [r.repository for r in memory.store.repository_rows()] == [REPOS[0]]
    assert [s[0] for s in memory.store.ledger_summary()] == [REPOS[0]]
    with pytest.raises(Forbidden, match="reserved"):
        record(memory, ADMIN, repository=signing.AGENTS_CHAIN)
    with pytest.raises(Forbidden, match="admin"):
        memory.register_agent(ALICE, parse(RegisterAgentInput, {"agent_id": "mallory"}))


def test_a_key_whose_id_or_agent_is_wrong_is_refused_by_the_registry(memory: Memory) -> None:
    register(memory, "alice", "alice@laptop")
    before = ledger(memory)
    with pytest.raises(InvalidInput, match="public_key"):
        memory.add_agent_key(ADMIN, parse(AddAgentKeyInput, {"agent_id": "alice", "public_key": "AAAA"}))
    with pytest.raises(Exception, match="no agent 'nobody'"):
        add_key(memory, "nobody")
    with pytest.raises(Exception, match="already"):
        register(memory, "alice@laptop")  # an alias of alice
    assert ledger(memory) == before


# ---------------------------------------------------------------- bad key files


def test_a_malformed_or_rsa_signing_key_is_a_config_error_at_startup(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey], settings: Settings, tmp_path: Path
) -> None:
    memory, _, _ = keyed
    before = ledger(memory)
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    rsa = tmp_path / "rsa.pem"
    rsa.write_bytes(
        generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    unknown = write_key(tmp_path / "unknown.pem", Ed25519PrivateKey.generate())
    for path, message in (
        (garbage, "not a PEM private key"),
        (rsa, "RSA key"),
        (unknown, "not in the agent registry"),
    ):
        with pytest.raises(ConfigError, match=message):
            Memory.open(dataclasses.replace(settings, signing_key=path), HashEmbedder())
    assert ledger(memory) == before


# ---------------------------------------------------------------- an attacker without the key


@contextmanager
def raw_db(settings: Settings) -> Iterator[tuple[Any, str]]:
    """A connection straight to the store's database and its parameter mark."""
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


def rewrite_body(settings: Settings, chain: str, seq: int, body: dict[str, Any]) -> None:
    """Replace one body and recompute its body_hash, its entry's hash, every later prev and hash
    of the chain and the chain's head: everything but a signature."""
    with raw_db(settings) as (conn, p):
        rows = conn.execute(
            f"SELECT rowid, v, chain, seq, kind, id, at, agent, prev, body_hash, key_id FROM entries "
            f"WHERE chain={p} AND seq>={p} ORDER BY seq",
            (chain, seq),
        ).fetchall()
        raw = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        conn.execute(f"UPDATE bodies SET body={p} WHERE rowid={p}", (raw, rows[0][0]))
        prev = None
        for rowid, v, ch, s, kind, id_, at, agent, old_prev, body_hash, key_id in rows:
            new_hash = sha256_hex(raw) if s == seq else body_hash
            doc = {"v": v, "chain": ch, "seq": s, "kind": kind, "id": id_, "at": at, "agent": agent,
                   "prev": old_prev if prev is None else prev, "body_hash": new_hash}  # fmt: skip
            if key_id is not None:
                doc["key_id"] = key_id
            prev = entry_hash(doc)
            conn.execute(
                f"UPDATE entries SET prev={p}, body_hash={p}, hash={p} WHERE rowid={p}",
                (doc["prev"], doc["body_hash"], prev, rowid),
            )
        conn.execute(f"UPDATE heads SET hash={p} WHERE chain={p}", (prev, chain))


@pytest.mark.parametrize("which", ["middle", "last"])
def test_a_body_rewritten_with_every_hash_recomputed_but_no_key_fails_its_chain_at_open_and_verify(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey], settings: Settings, which: str
) -> None:
    memory, alice_key, _ = keyed
    signer = signing.Signer(alice_key, "alice")
    ids = [
        record(memory, ALICE, observation=f"signed {i}", seal=Seal(sign=signer.sign)).attempt_id
        for i in range(3)
    ]
    memory.close()
    target = ids[1] if which == "middle" else ids[2]
    entry, raw = next((e, b) for e, b in _ledger_of(settings) if e.id == target)
    assert raw is not None
    body = orjson.loads(raw)
    body["observation"] = "the attacker's version"
    rewrite_body(settings, entry.chain, entry.seq, body)
    opened = Memory.open(settings, HashEmbedder())  # its chain is refused, naming the entry
    try:
        cause = opened.store.damaged[entry.chain]
        assert (cause.chain, cause.seq) == (entry.chain, entry.seq)
    finally:
        opened.close()
    store = _store(settings, verify=False)
    try:
        for every in (False, True):
            with pytest.raises(IntegrityError) as verified:
                store.verify(signatures=every)
            assert (verified.value.chain, verified.value.seq) == (entry.chain, entry.seq)
    finally:
        store.close()


def test_an_unsigned_entry_forged_for_a_keyed_agent_refuses_its_chain_at_open(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey], settings: Settings
) -> None:
    memory, alice_key, _ = keyed
    signed = Seal(sign=signing.Signer(alice_key, "alice").sign)
    made = record(memory, ALICE, observation="signed", seal=signed).attempt_id
    memory.close()
    entry = next(e for e, _ in _ledger_of(settings) if e.id == made)
    with raw_db(settings) as (conn, p):  # strip the signature and re-hash the entry without key_id
        doc = entry.document()
        del doc["key_id"]
        conn.execute(f"UPDATE entries SET key_id=NULL, sig=NULL, hash={p} WHERE chain={p} AND seq={p}",
                     (entry_hash(doc), entry.chain, entry.seq))  # fmt: skip
        conn.execute(f"UPDATE heads SET hash={p} WHERE chain={p}", (entry_hash(doc), entry.chain))
    opened = Memory.open(settings, HashEmbedder())  # its chain is refused, naming the entry
    try:
        cause = opened.store.damaged[entry.chain]
        assert (cause.chain, cause.seq) == (entry.chain, entry.seq)
        assert "unsigned entry by agent 'alice'" in str(cause)
    finally:
        opened.close()


def _store(settings: Settings, *, verify: bool) -> Store:
    if settings.uses_postgres:
        from mentis.store.postgres.store import PostgresStore

        assert settings.database_url is not None
        return PostgresStore(settings.database_url, HashEmbedder().dim, verify=verify)
    from mentis.store.sqlite.store import SqliteStore

    return SqliteStore(settings.db_path, HashEmbedder().dim, verify=verify)


def _ledger_of(settings: Settings) -> list[Any]:
    store = _store(settings, verify=False)
    try:
        return list(store.iter_ledger())
    finally:
        store.close()


# ---------------------------------------------------------------- export, import, rebuild


def test_an_export_with_signed_entries_imports_into_a_fresh_store_and_verifies(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey], other_settings: Settings
) -> None:
    memory, alice_key, _ = keyed
    signer = signing.Signer(alice_key, "alice")
    for i, repo in enumerate(REPOS * 2):
        record(memory, ALICE, repo, observation=f"signed {i}", seal=Seal(sign=signer.sign))
    with pytest.raises(InvalidInput, match="verifies only whole"):
        memory.export(ADMIN, io.BytesIO(), repository=REPOS[0])  # the stream signed REPOS[1] too
    out = io.BytesIO()
    memory.export(ADMIN, out)  # the registry goes with it
    other = Memory.open(other_settings, HashEmbedder())
    try:
        other.import_(ADMIN, out.getvalue().splitlines())
        assert other.verify_integrity(ADMIN, signatures=True).ok
        assert other.store.agent_key(signer.key_id) is not None
        # the stream goes on in the new store
        record(other, ALICE, REPOS[0], observation="after the import", seal=Seal(sign=signer.sign))
        assert other.verify_integrity(ADMIN, signatures=True).ok
    finally:
        other.close()


def test_a_tampered_signature_in_an_export_is_refused_by_import(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey], other_settings: Settings
) -> None:
    memory, alice_key, _ = keyed
    record(memory, ALICE, observation="signed", seal=Seal(sign=signing.Signer(alice_key, "alice").sign))
    out = io.BytesIO()
    memory.export(ADMIN, out)
    lines = out.getvalue().splitlines()
    forged = []
    for line in lines:
        doc = orjson.loads(line)
        if isinstance(doc.get("entry"), dict) and doc["entry"].get("sig"):
            sig = doc["entry"]["sig"]
            doc["entry"]["sig"] = sig[:-2] + ("AA" if sig[-2:] != "AA" else "BA")
        forged.append(orjson.dumps(doc))
    other = Memory.open(other_settings, HashEmbedder())
    try:
        with pytest.raises(IntegrityError, match="does not verify"):
            other.import_(ADMIN, forged)
        assert list(other.store.iter_ledger()) == []
    finally:
        other.close()


def test_rebuild_keeps_each_stream_where_it_was(
    keyed: tuple[Memory, Ed25519PrivateKey, Ed25519PrivateKey],
) -> None:
    memory, alice_key, _ = keyed
    signer = signing.Signer(alice_key, "alice")
    record(memory, ALICE, observation="before the rebuild", seal=Seal(sign=signer.sign))
    memory.rebuild()
    record(memory, ALICE, observation="after the rebuild", seal=Seal(sign=signer.sign))
    assert memory.verify_integrity(ADMIN, signatures=True).ok


def test_a_key_added_while_its_agent_writes_unsigned_never_commits_around_the_write(
    memory: Memory, open_memory: Callable[[], Memory]
) -> None:
    """Each round races a key add against an unsigned write by the same agent: either the write
    commits first (and stays valid) or it is refused; open then verifies the ledger in commit order."""
    import threading

    outcomes = []
    for round_ in range(8):
        agent = f"racer-{round_}"
        register(memory, agent)
        start = threading.Barrier(2)
        refused: list[Exception] = []

        def write(
            agent: str = agent, start: threading.Barrier = start, refused: list[Exception] = refused
        ) -> None:
            start.wait(timeout=10)
            try:
                record(memory, Caller(agent_id=agent), observation=f"unsigned by {agent}")
            except Forbidden as exc:
                refused.append(exc)

        def key(agent: str = agent, start: threading.Barrier = start) -> None:
            start.wait(timeout=10)
            add_key(memory, agent)

        threads = [threading.Thread(target=write), threading.Thread(target=key)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        outcomes.append("refused" if refused else "written first")
    reopened = open_memory()  # verifies every unsigned entry against the registry in ledger order
    assert reopened.verify_integrity(ADMIN).ok
    assert set(outcomes) <= {"refused", "written first"}
