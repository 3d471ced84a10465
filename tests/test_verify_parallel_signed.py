"""The parallel verification (``sqlite_verify`` + ``sqlite_sigstitch``) on a store with signed
entries and an agent registry agrees with the reference (``mentis.ledger.signatures`` through
``verify_rows``): the same reports on the untouched store, and None (so the reference names the
entry) wherever the reference refuses. Blocks are four rowids, so streams and chains cross blocks."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mentis.api.agents import AddAgentKeyInput, RegisterAgentInput, RevokeAgentKeyInput
from mentis.api.attempts import RecordAttemptInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import InvalidInput
from mentis.ledger import signing
from mentis.ledger.canonical import canonical
from mentis.ledger.entry import KINDS, entry_hash
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.seal import Seal
from mentis.store.sqlite import ledger_scan
from mentis.store.sqlite.store import SqliteStore
from tests.test_verify_parallel import assert_agrees, parallel, small_blocks  # noqa: F401 (autouse)

A, B = "github.com/acme/shop", "github.com/acme/api"
ADMIN = Caller(agent_id="admin", admin=True)


def _record(m: Memory, agent: str, repo: str, n: int, signer: signing.Signer | None = None) -> str:
    req = RecordAttemptInput(
        repository=repo, task_id=f"task-{n % 3}", action=f"fix {n}", observation=f"observation {n} in {repo}"
    )
    seal = Seal(sign=None if signer is None else signer.sign)
    return m.record_attempt(Caller(agent_id=agent), req, seal=seal).attempt_id


def _key(m: Memory, agent: str) -> Ed25519PrivateKey:
    key = Ed25519PrivateKey.generate()
    public = signing.public_text(key.public_key())
    m.add_agent_key(ADMIN, parse(AddAgentKeyInput, {"agent_id": agent, "public_key": public}))
    return key


def build(path: Path) -> dict[str, Any]:
    """Unsigned writes by carol (no key) and by alice before her key; alice's signed writes over
    two streams and two chains; bob signing with a key that is later revoked, then a new one."""
    m = Memory.open(Settings(home=path.parent, db_path=path, embedder="hash"), HashEmbedder())
    made: dict[str, Any] = {}
    try:
        _record(m, "carol", A, 0)
        _record(m, "alice", A, 1)  # before alice has a key: stays valid
        for agent in ("alice", "bob"):
            m.register_agent(ADMIN, parse(RegisterAgentInput, {"agent_id": agent}))
        alice, bob = _key(m, "alice"), _key(m, "bob")
        made["keys"] = {"alice": alice, "bob": bob}
        first = signing.Signer(alice, "alice")
        made["alice"] = [_record(m, "alice", A if n % 2 else B, n, first) for n in range(2, 9)]
        _record(m, "carol", B, 9)
        second = signing.Signer(alice, "alice")  # a second stream
        made["alice2"] = [_record(m, "alice", A, n, second) for n in range(10, 13)]
        bob_signer = signing.Signer(bob, "bob")
        made["bob"] = [_record(m, "bob", B, n, bob_signer) for n in range(13, 16)]
        bob_id = signing.key_id_of(bob.public_key())
        m.revoke_agent_key(
            ADMIN, parse(RevokeAgentKeyInput, {"agent_id": "bob", "key_id": bob_id, "reason": "rotated"})
        )
        bob_again = signing.Signer(_key(m, "bob"), "bob")
        made["bob2"] = [_record(m, "bob", A, n, bob_again) for n in range(16, 18)]
        _record(m, "carol", A, 18)
    finally:
        m.close()
    return made


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("signed") / "mentis.db"
    return path, build(path)


@pytest.fixture
def store(template: tuple[Path, dict[str, Any]], tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    path = tmp_path / "mentis.db"
    shutil.copyfile(template[0], path)
    return path, template[1]


def _entry(path: Path, id_: str) -> tuple[Any, ...]:
    with contextlib.closing(sqlite3.connect(path)) as con:
        return tuple(
            con.execute(
                "SELECT rowid, v, chain, seq, kind, id, at, agent, prev, body_hash, key_id, sig FROM entries "
                "WHERE id=?",
                (id_,),
            ).fetchone()
        )


def _rehash_from(con: sqlite3.Connection, chain: str, seq: int, change: dict[str, Any]) -> None:
    """Apply ``change`` to entry (chain, seq), then recompute its hash, every later prev and hash of
    the chain and the chain's head: everything but a signature."""
    rows = con.execute(
        "SELECT rowid, v, chain, seq, kind, id, at, agent, prev, body_hash, key_id FROM entries "
        "WHERE chain=? AND seq>=? ORDER BY seq",
        (chain, seq),
    ).fetchall()
    prev = None
    for rowid, v, ch, s, kind, id_, at, agent, old_prev, body_hash, key_id in rows:
        link = old_prev if prev is None else prev
        doc: dict[str, Any] = {"v": v, "chain": ch, "seq": s, "kind": kind, "id": id_, "at": at,
                               "agent": agent, "prev": link, "body_hash": body_hash}  # fmt: skip
        if key_id is not None:
            doc["key_id"] = key_id
        if s == seq:
            doc.update(change)
            if doc.get("key_id", 0) is None:
                del doc["key_id"]
        prev = entry_hash(doc)
        con.execute(
            "UPDATE entries SET prev=?, body_hash=?, key_id=?, hash=? WHERE rowid=?",
            (doc["prev"], doc["body_hash"], doc.get("key_id"), prev, rowid),
        )
    con.execute("UPDATE heads SET hash=? WHERE chain=?", (prev, chain))


def rewrite_body(path: Path, id_: str) -> None:
    rowid, _, chain, seq, *_ = _entry(path, id_)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as con:
        (raw,) = con.execute("SELECT body FROM bodies WHERE rowid=?", (rowid,)).fetchone()
        body = orjson.loads(raw)
        body["observation"] = "the attacker's version"
        new = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        con.execute("UPDATE bodies SET body=? WHERE rowid=?", (new, rowid))
        _rehash_from(con, chain, seq, {"body_hash": hashlib.sha256(new).hexdigest()})


def test_the_untouched_signed_store_verifies_in_parallel_with_the_reference_reports(
    store: tuple[Path, dict[str, Any]],
) -> None:
    path, _ = store
    reports = assert_agrees(path, passes=True)
    assert isinstance(reports, list) and signing.AGENTS_CHAIN in {r.chain for r in reports}
    assert parallel(path) is not None


@pytest.mark.parametrize("which", [("alice", 0), ("alice", 3), ("alice", -1), ("alice2", -1), ("bob", 1)])
def test_a_signed_body_rewritten_with_its_hashes_recomputed_is_refused(
    store: tuple[Path, dict[str, Any]], which: tuple[str, int]
) -> None:
    path, made = store
    rewrite_body(path, made[which[0]][which[1]])
    assert "does not verify" in str(assert_agrees(path, passes=False))


def test_a_signature_stripped_and_the_entry_rehashed_is_an_unsigned_entry_by_a_keyed_agent(
    store: tuple[Path, dict[str, Any]],
) -> None:
    path, made = store
    _, _, chain, seq, *_ = _entry(path, made["alice"][2])
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as con:
        con.execute("UPDATE entries SET sig=NULL WHERE chain=? AND seq=?", (chain, seq))
        _rehash_from(con, chain, seq, {"key_id": None})
    assert "unsigned entry by agent 'alice'" in str(assert_agrees(path, passes=False))


def test_an_empty_key_id_hashed_as_if_absent_is_refused_by_both(store: tuple[Path, dict[str, Any]]) -> None:
    path, made = store
    rowid, *_ = _entry(path, made["alice"][4])
    # the entry's hash stays the one computed with its real key_id: any key_id change breaks it
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as con:
        con.execute("UPDATE entries SET key_id='' WHERE rowid=?", (rowid,))
    assert_agrees(path, passes=False)


def test_a_forged_last_signature_fails_open_and_a_forged_middle_one_only_the_full_check(
    store: tuple[Path, dict[str, Any]],
) -> None:
    path, made = store

    def forge(id_: str) -> None:
        rowid, *_, sig = _entry(path, id_)
        forged = sig[:-3] + ("AAA" if not sig.endswith("AAA") else "BBB")
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as con:
            con.execute("UPDATE entries SET sig=? WHERE rowid=?", (forged, rowid))

    forge(made["alice"][3])  # the middle of a stream: its digests still link
    assert_agrees(path, passes=True)
    store_ = SqliteStore(path, HashEmbedder().dim, verify=False)
    try:
        with pytest.raises(Exception, match="signature does not verify"):
            store_.verify(signatures=True)
    finally:
        store_.close()
    forge(made["alice"][-1])  # a stream's last statement
    assert "signature does not verify" in str(assert_agrees(path, passes=False))


def _swap_revocation_before_bobs_last_entry(path: Path, made: dict[str, Any]) -> None:
    last = _entry(path, made["bob"][-1])[0]
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as con:
        (revoke,) = con.execute(
            "SELECT e.rowid FROM entries e JOIN bodies b ON b.rowid = e.rowid WHERE e.chain=? "
            "AND CAST(b.body AS TEXT) LIKE '%key_revoke%'",
            (signing.AGENTS_CHAIN,),
        ).fetchone()
        for a, b in ((last, -1), (revoke, last), (-1, revoke)):
            con.execute("UPDATE entries SET rowid=? WHERE rowid=?", (b, a))
            con.execute("UPDATE bodies SET rowid=? WHERE rowid=?", (b, a))


def test_rows_renumbered_so_the_revocation_comes_first_still_verify_in_both_passes(
    store: tuple[Path, dict[str, Any]],
) -> None:
    """Bob's last signed entry is dated before his key's revocation: moving the revocation's row
    before it changes nothing a hash covers (issue 24, finding 4: rowids are no order)."""
    path, made = store
    _swap_revocation_before_bobs_last_entry(path, made)
    assert_agrees(path, passes=True)


def _forge(path: Path, agent: str, at: str, rowid: int, key: Ed25519PrivateKey | None = None) -> None:
    """A new chain's first entry, by ``agent`` at ``rowid``, every hash right (signed with ``key``)."""
    chain, id_ = "github.com/acme/forged", "forged-attempt"
    body = canonical(
        {"attempt_id": id_, "repository": chain, "task_id": "t", "action": "a", "observation": "o"}
    )
    body_hash = hashlib.sha256(body).hexdigest()
    key_id = sig = None
    if key is not None:
        key_id, sig = signing.Signer(key, agent).sign(
            signing.Unsigned(chain, "attempt", id_, at, agent, body_hash)
        )
    doc: dict[str, Any] = {"v": 1, "chain": chain, "seq": 0, "kind": "attempt", "id": id_, "at": at}
    doc |= {"agent": agent, "prev": "", "body_hash": body_hash}
    if key_id is not None:
        doc["key_id"] = key_id
    hash_ = entry_hash(doc)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as con:
        con.execute(
            "INSERT INTO entries(rowid, v, chain, seq, kind, id, at, agent, prev, body_hash, key_id, sig, "
            "hash) VALUES(?, 1, ?, 0, 'attempt', ?, ?, ?, '', ?, ?, ?, ?)",
            (rowid, chain, id_, at, agent, body_hash, key_id, sig, hash_),
        )
        con.execute("INSERT INTO bodies(rowid, body) VALUES(?, ?)", (rowid, body))
        con.execute("INSERT INTO heads(chain, seq, hash) VALUES(?, 0, ?)", (chain, hash_))


def test_an_unsigned_entry_by_a_keyed_agent_at_rowid_minus_one_is_refused_by_both(
    store: tuple[Path, dict[str, Any]],
) -> None:
    path, _ = store
    _forge(path, "alice", signing.now_iso(), -1)
    assert "unsigned entry by agent 'alice'" in str(assert_agrees(path, passes=False))


def test_an_entry_signed_with_a_revoked_key_after_the_revocation_is_refused_wherever_its_row_is(
    store: tuple[Path, dict[str, Any]],
) -> None:
    path, made = store
    late = (datetime.now(UTC) + timedelta(minutes=11)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    _forge(path, "bob", late, -1, key=made["keys"]["bob"])
    assert "after its revocation" in str(assert_agrees(path, passes=False))


# ---------------------------------------------------------------- the worker's renderings


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.tuples(*[_text] * 6), st.integers(0, 2**53 - 1), st.sampled_from(["", "a" * 64]))
def test_the_worker_renders_a_statement_as_canonical_does(values: tuple[str, ...], n: int, prev: str) -> None:
    agent, at, body_hash, chain, id_, kind = values
    stmt = signing.Statement(chain, kind, id_, at, agent, body_hash, "ed25519:" + "0" * 32, "f" * 32, n, prev)
    assert (
        ledger_scan.render_statement(
            agent, at, body_hash, chain, id_, stmt.key_id, kind, n, prev, stmt.stream
        )
        == stmt.canonical()
    )


_part = st.one_of(
    st.text("0123456789abcdef", max_size=66),
    st.text("0123456789", min_size=1, max_size=18),
    st.text(min_size=0, max_size=90),
    st.just("-"),
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", min_size=85, max_size=87),
)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(["s1", "s2", ""]), _part, _part, _part, _part)
def test_the_worker_accepts_an_envelope_only_when_the_reference_does(
    head: str, stream: str, n: str, prev: str, signature: str
) -> None:
    text = ".".join((head, stream, n, prev, signature))
    mine = ledger_scan.parse_envelope(text)
    try:
        ref = signing.Envelope.parse(text)
    except InvalidInput:
        assert mine is None
        return
    if mine is not None:
        assert mine == (ref.stream, ref.n, ref.prev, ref.signature)


@settings(max_examples=300, deadline=None)
@given(st.tuples(*[_text] * 4), st.integers(0, 2**53 - 1), st.integers(0, 2**40), st.binary(max_size=40))
def test_the_signed_scan_hashes_what_canonical_hashes(
    values: tuple[str, ...], seq: int, n: int, data: bytes
) -> None:
    """An entry and statement sealed with ``canonical`` pass the scan of signed rows whatever their
    strings (escaped or plain templates), and a wrong entry hash or broken stream link fails it."""
    agent, at, chain, id_ = values
    assume(not chain.startswith("__"))
    body = canonical({"repository": chain, "attempt_id": id_, "data": data.hex()})
    body_hash, key_id, stream = hashlib.sha256(body).hexdigest(), "ed25519:" + "ab" * 16, "c" * 32
    prev_digest = "" if n == 0 else "d" * 64
    stmt = signing.Statement(chain, "attempt", id_, at, agent, body_hash, key_id, stream, n, prev_digest)
    sig = signing.Envelope(stream, n, prev_digest, "A" * 86).text()
    doc = {"v": 1, "chain": chain, "seq": seq, "kind": "attempt", "id": id_, "at": at, "agent": agent,
           "prev": "", "body_hash": body_hash, "key_id": key_id}  # fmt: skip
    row = (agent, at, body_hash, chain, id_, "attempt", "", seq, entry_hash(doc), body, key_id, sig, 5)
    scan = ledger_scan._Scan(KINDS, 1)
    assert scan.with_signed([row]) is True
    assert scan.streams[stream][5:9] == [n, stmt.digest(), 5, stmt.canonical()]
    assert ledger_scan._Scan(KINDS, 1).with_signed([(*row[:8], "0" * 64, *row[9:])]) is False
