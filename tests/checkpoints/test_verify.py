"""Signed checkpoints against a store that was rewritten, cut short, rolled back or merely moved
on: refused naming chain, seq and checkpoint file, or held (tests/checkpoints/attacker.py is the
attacker who recomputes every hash)."""

from __future__ import annotations

import dataclasses
import io
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mentis.api.agents import RevokeAgentKeyInput
from mentis.api.attempts import ForgetInput
from mentis.config import Settings
from mentis.errors import IntegrityError, InvalidInput
from mentis.ledger import checkpoint, signing
from mentis.ledger.links import CHECKPOINTS_CHAIN
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Memory
from tests.checkpoints.attacker import rewrite_and_rehash
from tests.checkpoints.conftest import ADMIN, OTHER, REPO, record
from tests.security.stores import raw_sql


def keep(memory: Memory, key: Path, where: Path, repositories: list[str] | None = None) -> Path:
    """Make a checkpoint and keep its file at ``where`` (outside the store)."""
    made = memory.checkpoint(ADMIN, key, repositories or [])
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_bytes(made.checkpoint.text())
    return where


def open_with(settings: Settings, checkpoints: Path | None) -> Memory:
    return Memory.open(dataclasses.replace(settings, checkpoints=checkpoints), HashEmbedder())


def test_a_checkpoint_names_every_chain_head_and_is_recorded_on_the_ledger(
    memory: Memory, operator_key: Path
) -> None:
    record(memory, 2)
    record(memory, 1, OTHER)
    heads = memory.store.chain_heads()
    made = memory.checkpoint(ADMIN, operator_key)
    assert [h.to_json() for h in made.checkpoint.chains] == [
        {"chain": c, "seq": s, "hash": h} for c, (s, h) in sorted(heads.items())
    ]
    assert made.checkpoint.agent == "ops"
    assert made.checkpoint.key_id == signing.key_id_of(signing.load_private_key(operator_key).public_key())
    entries = [(e, b) for e, b in memory.store.iter_ledger() if e.chain == CHECKPOINTS_CHAIN]
    # the ledger entry is the write of whoever ran it; the operator's signature is in its body
    assert [(e.kind, e.seq, e.hash, e.agent) for e, _ in entries] == [
        ("checkpoint", 0, made.hash, ADMIN.agent_id)
    ]
    assert checkpoint.parse(entries[0][1] or b"") == made.checkpoint
    reports = {r.chain: r for r in memory.store.verify_chains(signatures=True)}
    assert reports[CHECKPOINTS_CHAIN].head_seq == 0


def test_a_store_that_is_ahead_holds_its_checkpoints_at_open_and_on_demand(
    memory: Memory, operator_key: Path, settings: Settings, tmp_path: Path
) -> None:
    record(memory, 2)
    first = keep(memory, operator_key, tmp_path / "kept" / "a.json")
    record(memory, 3, what="later")
    keep(memory, operator_key, tmp_path / "kept" / "nested" / "b.json", [REPO])
    record(memory, 1, OTHER)
    held = memory.verify_checkpoints(ADMIN, [tmp_path / "kept"])
    assert [Path(h.file).name for h in held] == ["a.json", "b.json"]
    assert memory.verify_checkpoints(ADMIN, [first])[0].chains == 2
    reopened = open_with(settings, tmp_path / "kept")
    reopened.close()


def test_a_truncated_tail_is_refused_with_a_checkpoint_and_accepted_without(
    memory: Memory, operator_key: Path, settings: Settings, tmp_path: Path
) -> None:
    record(memory, 3)
    kept = keep(memory, operator_key, tmp_path / "kept" / "cp.json", [REPO])
    memory.close()
    # the attacker drops the chain's last entry and moves the recorded head back, then rebuilds
    (rowid, eid, prev_hash) = raw_sql(
        settings,
        "SELECT e.rowid, e.id, p.hash FROM entries e "
        "JOIN entries p ON p.chain = e.chain AND p.seq = e.seq - 1 WHERE e.chain=? AND e.seq=2",
        (REPO,),
    )[0]
    for sql, args in (
        ("DELETE FROM bodies WHERE rowid=?", (rowid,)),
        ("DELETE FROM entries WHERE rowid=?", (rowid,)),
        ("DELETE FROM entry_ids WHERE id=?", (eid,)),
        ("UPDATE heads SET seq=1, hash=? WHERE chain=?", (prev_hash, REPO)),
    ):
        raw_sql(settings, sql, args)
    rebuilt = Memory.open(settings, HashEmbedder(), check_derived=False)
    rebuilt.rebuild()
    rebuilt.close()
    plain = open_with(settings, None)  # the hash chain alone cannot tell
    assert plain.store.chain_heads()[REPO][0] == 1
    with pytest.raises(IntegrityError) as refused:
        plain.verify_checkpoints(ADMIN, [kept])
    plain.close()
    assert (refused.value.chain, refused.value.seq) == (REPO, 2)
    assert str(kept) in refused.value.message and "ends at seq 1" in refused.value.message
    with pytest.raises(IntegrityError) as at_open:
        open_with(settings, kept.parent)
    assert (at_open.value.chain, at_open.value.seq) == (REPO, 2)


def test_a_forget_after_a_checkpoint_keeps_it_held(
    memory: Memory, operator_key: Path, settings: Settings, tmp_path: Path
) -> None:
    ids = record(memory, 2)
    kept = keep(memory, operator_key, tmp_path / "kept" / "cp.json")
    # the checkpointed head itself is forgotten: its body goes, its entry hash stays
    memory.forget_attempt(ADMIN, ForgetInput(repository=REPO, attempt_id=ids[1], reason="secret"))
    assert memory.verify_checkpoints(ADMIN, [kept])[0].chains == 2  # the registry and the repository
    open_with(settings, kept.parent).close()


def test_a_checkpoint_signed_with_a_revoked_key_holds_only_when_dated_before_the_revocation(
    memory: Memory, operator_key: Path, tmp_path: Path
) -> None:
    record(memory, 1)
    before = keep(memory, operator_key, tmp_path / "before.json")
    key = signing.load_private_key(operator_key)
    memory.revoke_agent_key(
        ADMIN,
        RevokeAgentKeyInput(agent_id="ops", key_id=signing.key_id_of(key.public_key()), reason="leaked"),
    )
    assert memory.verify_checkpoints(ADMIN, [before])[0].agent == "ops"
    # whoever holds the revoked key signs a checkpoint now: refused
    heads = memory.store.chain_heads()
    late = checkpoint.sign(key, "ops", signing.now_iso(), [checkpoint.Head(c, *h) for c, h in heads.items()])
    after = tmp_path / "after.json"
    after.write_bytes(late.text())
    with pytest.raises(InvalidInput) as refused:
        memory.verify_checkpoints(ADMIN, [after])
    assert (
        refused.value.field == "key_id"
        and "revoked" in refused.value.message
        and str(after) in refused.value.message
    )
    with pytest.raises(InvalidInput, match="revoked"):
        memory.checkpoint(ADMIN, operator_key)  # nor can it make one


def test_a_checkpoint_by_a_key_the_registry_never_had_is_refused(memory: Memory, tmp_path: Path) -> None:
    record(memory, 1)
    heads = memory.store.chain_heads()
    forged = checkpoint.sign(
        Ed25519PrivateKey.generate(),
        "ops",
        signing.now_iso(),
        [checkpoint.Head(c, *h) for c, h in heads.items()],
    )
    path = tmp_path / "forged.json"
    path.write_bytes(forged.text())
    with pytest.raises(InvalidInput, match="not in the agent registry") as refused:
        memory.verify_checkpoints(ADMIN, [path])
    assert refused.value.field == "key_id"


def test_checkpoints_travel_with_an_export_and_hold_in_the_imported_store(
    memory: Memory,
    operator_key: Path,
    open_memory: Callable[[], Memory],
    other_settings: Settings,
    tmp_path: Path,
) -> None:
    record(memory, 2)
    kept = keep(memory, operator_key, tmp_path / "cp.json")
    out = io.BytesIO()
    memory.export(ADMIN, out)
    lines = out.getvalue().splitlines()
    assert any(orjson.loads(line)["entry"]["kind"] == "checkpoint" for line in lines[1:])
    target = Memory.open(other_settings, HashEmbedder())
    try:
        target.import_(ADMIN, lines)
        assert target.store.chain_heads()[CHECKPOINTS_CHAIN] == memory.store.chain_heads()[CHECKPOINTS_CHAIN]
        assert target.verify_checkpoints(ADMIN, [kept])[0].chains == 2
    finally:
        target.close()


@pytest.fixture
def other_settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    from tests.backends import backend_settings

    return backend_settings(backend, tmp_path / "other", request)


# ---------------------------------------------------------------- SQLite files: the attacker's own


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_rewrite_with_every_hash_recomputed_is_refused_with_a_checkpoint_and_accepted_without(
    memory: Memory, operator_key: Path, settings: Settings, tmp_path: Path
) -> None:
    ids = record(memory, 4)
    kept = keep(memory, operator_key, tmp_path / "kept" / "cp.json", [REPO])
    memory.close()
    rewrite_and_rehash(settings.db_path, REPO, 1, "observation", "it all passed, ship it")
    plain = open_with(settings, None)  # without a checkpoint the rewrite loads and is read
    try:
        history = plain.store.task_history(REPO, "t1")
        assert [a.body.observation for a in history] == ["it all passed, ship it"]
        assert history[0].body.attempt_id == ids[1]
        with pytest.raises(IntegrityError) as refused:
            plain.verify_checkpoints(ADMIN, [kept])
    finally:
        plain.close()
    assert (refused.value.chain, refused.value.seq) == (REPO, 3)
    assert "rewritten" in refused.value.message and str(kept) in refused.value.message
    with pytest.raises(IntegrityError) as at_open:
        open_with(settings, kept.parent)
    assert (at_open.value.chain, at_open.value.seq) == (REPO, 3)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_checkpoint_holds_a_branch_chain_s_head_and_refuses_a_rewrite_of_the_branch_before_it(
    memory: Memory, operator_key: Path, settings: Settings, tmp_path: Path
) -> None:
    from mentis.api.attempts import RecordAttemptInput
    from mentis.api.branches import BranchFromInput

    record(memory, 2)
    info = memory.branch_from(ADMIN, BranchFromInput(repository=REPO, branch="feature/x", parent=None))
    for i in range(3):
        memory.record_attempt(
            ADMIN,
            RecordAttemptInput(
                repository=REPO, branch="feature/x", task_id="b", action=f"a {i}", observation="ok"
            ),
        )
    made = memory.checkpoint(ADMIN, operator_key, [])
    assert {h.chain: (h.seq, h.hash) for h in made.checkpoint.chains}[
        info.chain
    ] == memory.store.chain_heads()[info.chain]
    kept = keep(memory, operator_key, tmp_path / "kept" / "cp.json")
    memory.close()
    rewrite_and_rehash(settings.db_path, info.chain, 1, "observation", "it all passed, ship it")
    plain = open_with(settings, None)  # the branch's chain verifies on its own: the fork entry is untouched
    try:
        assert plain.store.damaged == {}
        with pytest.raises(IntegrityError) as refused:
            plain.verify_checkpoints(ADMIN, [kept])
    finally:
        plain.close()
    assert (refused.value.chain, refused.value.seq) == (info.chain, 3)
    with pytest.raises(IntegrityError) as at_open:
        open_with(settings, kept.parent)
    assert (at_open.value.chain, at_open.value.seq) == (info.chain, 3)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_database_rolled_back_to_an_older_copy_is_refused(
    memory: Memory, operator_key: Path, settings: Settings, tmp_path: Path
) -> None:
    record(memory, 2)
    copy = tmp_path / "older.db"
    with closing(sqlite3.connect(settings.db_path)) as live, closing(sqlite3.connect(copy)) as old:
        live.backup(old)  # a consistent copy of the file as it is now
    record(memory, 2, what="after the copy")
    kept = keep(memory, operator_key, tmp_path / "kept" / "cp.json")
    memory.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{settings.db_path}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(copy, settings.db_path)  # the attacker puts the older copy back
    plain = open_with(settings, None)
    assert plain.store.chain_heads()[REPO][0] == 1  # it loads: every chain of it verifies
    plain.close()
    with pytest.raises(IntegrityError) as at_open:
        open_with(settings, kept.parent)
    assert at_open.value.seq is not None and str(kept) in at_open.value.message
    assert at_open.value.chain in (REPO, CHECKPOINTS_CHAIN, "__agents__")
