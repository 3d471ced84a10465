# ruff: noqa: F811  (fixtures imported from tests.security.stores are parameters here)
"""One chain's defect never takes the other repositories down (finding 1 of the second review).

The store here is the one the old bug left behind: repository B holds a thought whose id a
forgotten thought of repository A had (written before ids were checked on write, by a store of the
schema before ``entry_ids``). Opening it refuses B alone, named: B's reads and writes raise an
IntegrityError naming the chain, the seq and what failed and pointing to ``mentis doctor``; A keeps
serving; answers across repositories leave B out and say so; ``mentis verify`` exits 6 naming B;
``mentis doctor`` says how to recover; ``mentis export --skip-damaged`` exports A, which imports into
a fresh store. A defect in the agent registry, which every signature is checked against, still
refuses the whole store. On both stores, and over MCP and REST.
"""

from __future__ import annotations

import io
import socket
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from mentis.api.attempts import RecallInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.api.stats import StatsInput
from mentis.api.thoughts import AppendThoughtInput, ForgetThoughtInput, GetThoughtInput, SearchThoughtsInput
from mentis.cli import app
from mentis.config import Settings
from mentis.errors import IntegrityError, InvalidInput
from mentis.ledger import signing
from mentis.providers.embed import HashEmbedder
from mentis.service import doctor
from mentis.service.memory import Caller, Memory
from mentis.service.migrate import migrate
from mentis.store.seal import Seal
from tests.backends import backend_settings
from tests.http_support import LiveServer
from tests.security.stores import ADMIN, raw_sql, settings  # noqa: F401
from tests.signing_support import register_key, sign_and_write
from tests.transports import Call

A, B = "team-a/app", "team-b/app"
DUPLICATE_SEQ = 2
"""B's seq of the thought that reuses the id: B holds an attempt and a thought before it."""


def _attempt(m: Memory, repository: str, action: str, observation: str, caller: Caller = ADMIN) -> str:
    data = {"repository": repository, "task_id": "cache", "action": action, "observation": observation}
    return m.record_attempt(caller, parse(RecordAttemptInput, data)).attempt_id


def _thought(m: Memory, repository: str, content: str, **fields: Any) -> str:
    data = {"repository": repository, "type": "Finding", "content": content, **fields}
    return m.append_thought(ADMIN, parse(AppendThoughtInput, data)).thought_id


def plant_duplicate(settings: Settings, before: Callable[[Memory], None] | None = None) -> str:
    """Leave the store as the old bug did; returns the id B's thought reuses.

    B's thought takes the id of A's forgotten thought while ``entry_ids`` does not hold it, then
    the table is dropped and the schema set back to the version before it, as a store written by
    the old Mentis is: opening it migrates (filling ``entry_ids`` from the ledger, first holder
    first) and verifies."""
    m = Memory.open(settings, HashEmbedder())
    try:
        if before is not None:
            before(m)
        _attempt(m, A, "warm the cache before the checkout test", "checkout test passes with a warm cache")
        _attempt(m, B, "raise the cache size", "cache evictions stop")
        _thought(m, B, "the cache evicts under load")
        taken = _thought(m, A, "the cache key includes the user id")
        m.forget_thought(ADMIN, parse(ForgetThoughtInput, {"repository": A, "thought_id": taken}))
        _thought(m, A, "the checkout cache holds the cart total")
        if _has_entry_ids(settings):  # (a Mentis before entry_ids wrote the duplicate without it)
            raw_sql(settings, "DELETE FROM entry_ids WHERE id = ?", (taken,))
        _thought(m, B, "planted over a forgotten thought's id", thought_id=taken)
        _attempt(m, B, "lower the cache ttl", "stale reads stop")
    finally:
        m.close()
    raw_sql(settings, "DROP TABLE IF EXISTS entry_ids")
    old = "8" if settings.uses_postgres else "4"
    raw_sql(settings, "UPDATE meta SET value = ? WHERE key = 'schema_version'", (old,))
    return taken


def _has_entry_ids(settings: Settings) -> bool:
    if settings.uses_postgres:
        return raw_sql(settings, "SELECT to_regclass('entry_ids') IS NOT NULL") == [(True,)]
    return bool(raw_sql(settings, "SELECT 1 FROM sqlite_master WHERE name = 'entry_ids'"))


@pytest.fixture
def planted(settings: Settings) -> str:
    return plant_duplicate(settings)


@pytest.fixture
def memory(planted: str, open_memory: Callable[[], Memory]) -> Memory:
    return open_memory()


def _refusal(exc: IntegrityError, chain: str = B) -> None:
    assert (exc.chain, exc.seq) == (chain, DUPLICATE_SEQ), exc.message
    assert f"chain {chain!r} seq {DUPLICATE_SEQ}" in exc.message
    assert "record id" in exc.message and "mentis doctor" in exc.message


# ---------------------------------------------------------------- open


def test_opening_refuses_the_chain_holding_the_duplicate_and_serves_the_other(
    memory: Memory, planted: str, settings: Settings
) -> None:
    assert set(memory.store.damaged) == {B}
    cause = memory.store.damaged[B]
    assert (cause.chain, cause.seq) == (B, DUPLICATE_SEQ)
    assert cause.what is not None and f"record id {planted!r}" in cause.what
    # the upgrade kept the first holder of the id: A's forgotten thought
    assert raw_sql(settings, "SELECT chain FROM entry_ids WHERE id = ?", (planted,)) == [(A,)]
    with pytest.raises(IntegrityError) as strict:
        memory.store.verify()
    assert strict.value.chain == B


def test_reads_and_writes_of_the_damaged_repository_raise_naming_it(memory: Memory, planted: str) -> None:
    calls: list[Callable[[], object]] = [
        lambda: memory.search(ADMIN, SearchInput(query="cache", repository=B)),
        lambda: memory.recall(ADMIN, RecallInput(repository=B, task_id="cache")),
        lambda: memory.search_thoughts(
            ADMIN, parse(SearchThoughtsInput, {"query": "cache", "repository": B})
        ),
        lambda: memory.get_thought(ADMIN, GetThoughtInput(thought_id=planted)),
        lambda: memory.stats(ADMIN, StatsInput(repository=B)),
        lambda: memory.task_page(ADMIN, B),
        lambda: _attempt(memory, B, "one more", "refused"),
        lambda: _thought(memory, B, "refused too"),
    ]
    ledger = [e.hash for e, _ in memory.store.iter_ledger()]
    for call in calls:
        with pytest.raises(IntegrityError) as refused:
            call()
        _refusal(refused.value)
    assert [e.hash for e, _ in memory.store.iter_ledger()] == ledger
    # the store refuses an append to B by itself too, inside the write transaction
    with pytest.raises(IntegrityError) as refused:
        memory.store.forget_thought(B, planted, None, "operator", Seal())
    _refusal(refused.value)
    assert [e.hash for e, _ in memory.store.iter_ledger()] == ledger


def test_answers_across_repositories_leave_the_damaged_one_out_and_say_so(memory: Memory) -> None:
    found = memory.search(ADMIN, SearchInput(query="cache"))
    assert {t.repository for t in found.tasks} == {A}
    assert B in found.ranking and "mentis doctor" in found.ranking
    thoughts = memory.search_thoughts(ADMIN, parse(SearchThoughtsInput, {"query": "cache"}))
    assert thoughts.thoughts and {s.thought.repository for s in thoughts.thoughts} == {A}
    assert B in thoughts.ranking
    listed = memory.search_thoughts(ADMIN, parse(SearchThoughtsInput, {}))
    assert {s.thought.repository for s in listed.thoughts} == {A}
    rows = memory.recall(ADMIN, RecallInput(sql="SELECT DISTINCT repository FROM attempts")).rows
    assert rows == [[A]]
    stats = memory.stats(ADMIN, StatsInput())
    assert stats.refused == [B] and [r.repository for r in stats.by_repository] == [A]
    assert [r.repository for r in memory.repository_overview(ADMIN)] == [A]
    # A is written to and read as before
    _attempt(memory, A, "pin the cache version", "no more misses")
    assert memory.verify_integrity(ADMIN, A).chains[0].chain == A


def test_verify_integrity_raises_naming_the_damaged_chain_for_a_caller_who_may_read_it(
    memory: Memory,
) -> None:
    with pytest.raises(IntegrityError) as refused:
        memory.verify_integrity(ADMIN)
    assert (refused.value.chain, refused.value.seq) == (B, DUPLICATE_SEQ)
    assert "the other 1 chain(s) verify" in refused.value.message
    team_a = Caller(agent_id="a", repositories=("team-a/*",))
    assert [c.chain for c in memory.verify_integrity(team_a).chains] == [A]
    assert memory.stats(team_a, StatsInput()).refused == []
    team_b = Caller(agent_id="b", repositories=("team-b/*",))
    assert memory.search(team_b, SearchInput(query="cache")).tasks == []
    with pytest.raises(IntegrityError):
        memory.verify_integrity(team_b)


def test_rebuild_derives_nothing_of_the_damaged_chain_and_keeps_the_others_answers(memory: Memory) -> None:
    before = memory.search(ADMIN, SearchInput(query="cache checkout")).model_dump()
    memory.rebuild()
    assert memory.search(ADMIN, SearchInput(query="cache checkout")).model_dump() == before
    assert memory.store.verify_chains() and set(memory.store.damaged) == {B}


# ---------------------------------------------------------------- export, import, doctor


@pytest.fixture
def fresh(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Memory]:
    m = Memory.open(backend_settings(backend, tmp_path / "fresh", request), HashEmbedder())
    yield m
    m.close()


def test_export_refuses_the_damaged_chain_and_skip_damaged_exports_the_rest(
    memory: Memory, fresh: Memory
) -> None:
    with pytest.raises(IntegrityError) as refused:
        memory.export(ADMIN, io.BytesIO())
    assert refused.value.chain == B and "--skip-damaged" in refused.value.message
    with pytest.raises(IntegrityError):
        memory.export(ADMIN, io.BytesIO(), B, skip_damaged=True)  # asked for by name: refused
    only_a = io.BytesIO()
    memory.export(ADMIN, only_a, A)  # a selection without the damaged chain needs no flag
    assert set(orjson.loads(only_a.getvalue().splitlines()[0])["heads"]) == {A}
    out = io.BytesIO()
    count = memory.export(ADMIN, out, skip_damaged=True)
    lines = out.getvalue().splitlines()
    assert count == len(lines) - 1 and set(orjson.loads(lines[0])["heads"]) == {A}
    assert fresh.import_(ADMIN, lines) == count
    assert fresh.store.damaged == {} and [r.chain for r in fresh.store.verify()] == [A]
    found = fresh.search(ADMIN, SearchInput(query="checkout cache"))
    assert [t.repository for t in found.tasks] == [A]


def test_migrate_refuses_a_source_with_a_damaged_chain_and_names_the_way_out(
    planted: str, settings: Settings, tmp_path: Path
) -> None:
    target = Settings(home=tmp_path / "target", db_path=tmp_path / "target" / "m.db", embedder="hash")
    with pytest.raises(IntegrityError) as refused:
        migrate(settings, target, HashEmbedder())
    assert refused.value.chain == B and "--skip-damaged" in refused.value.message
    fresh = Memory.open(target, HashEmbedder())
    try:
        assert fresh.store.repositories() == []
    finally:
        fresh.close()


def test_cli_verify_exits_6_naming_the_chain_and_export_skip_damaged_writes_the_rest(
    planted: str, settings: Settings, tmp_path: Path
) -> None:
    env = {"MENTIS_HOME": str(settings.home), "MENTIS_DB": str(settings.db_path), "MENTIS_EMBEDDER": "hash"}
    if settings.database_url:
        env["MENTIS_DATABASE_URL"] = settings.database_url
    runner = CliRunner()
    verify = runner.invoke(app, ["verify", "--json"], env=env)
    assert verify.exit_code == IntegrityError.exit_code == 6
    assert f"chain {B!r} seq {DUPLICATE_SEQ}" in verify.stderr and verify.stdout == ""
    assert runner.invoke(app, ["verify", "--json", "--repo", A], env=env).exit_code == 0
    refused = runner.invoke(app, ["export", str(tmp_path / "all.jsonl")], env=env)
    assert refused.exit_code == 6 and "--skip-damaged" in refused.stderr
    done = runner.invoke(app, ["export", "--skip-damaged", str(tmp_path / "healthy.jsonl")], env=env)
    assert done.exit_code == 0, done.stderr
    heads = orjson.loads((tmp_path / "healthy.jsonl").read_bytes().splitlines()[0])["heads"]
    assert set(heads) == {A}


def test_doctor_names_the_damaged_chain_and_how_to_recover(planted: str, settings: Settings) -> None:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        address = ("127.0.0.1", int(sock.getsockname()[1]))
    findings = doctor.run(settings, address)
    (ledger,) = [f for f in findings if f.check == "ledger"]
    assert ledger.status == "fail" and "1 chain(s) do not verify" in ledger.detail
    (chain,) = [f for f in findings if f.check == f"chain {B}"]
    assert chain.status == "fail" and f"seq {DUPLICATE_SEQ}" in chain.detail and "refused" in chain.detail
    assert "mentis export --skip-damaged" in chain.fix and "mentis import" in chain.fix
    assert "reuses an id" in chain.fix
    assert [f.status for f in findings if f.check == f"chain {A}"] == ["ok"]


# ---------------------------------------------------------------- transports


@pytest.mark.parametrize("transport", ["mcp", "rest"])
def test_over_a_transport_the_damaged_repository_is_refused_and_the_other_served(
    planted: str, settings: Settings, transport: str
) -> None:
    with LiveServer(settings.db_path, settings=settings) as live:
        on_b = Call(transport, live, {}, (B,))
        code, message = on_b(
            "record_attempt", {"repository": B, "task_id": "t", "action": "a", "observation": "o"}
        )
        assert code == "integrity" and B in message and "mentis doctor" in message
        code, message = on_b("search", {"query": "cache", "repository": B})
        assert code == "integrity"
        on_a = Call(transport, live, {}, (A,))
        code, found = on_a("search", {"query": "checkout cache"})
        assert code == "ok" and [t["repository"] for t in found["tasks"]] == [A]
        code, _ = on_a("record_attempt", {"repository": A, "task_id": "t", "action": "a", "observation": "o"})
        assert code == "ok"
        everyone = Call(transport, live, {}, ("*",))
        code, found = everyone("search", {"query": "cache"})
        assert code == "ok" and {t["repository"] for t in found["tasks"]} == {A} and B in found["ranking"]


# ---------------------------------------------------------------- what still refuses everything


def test_a_damaged_agent_registry_still_refuses_the_whole_store(
    settings: Settings, open_memory: Callable[[], Memory]
) -> None:
    m = open_memory()
    register_key(m.store, "alice")
    _attempt(m, A, "a", "o")
    m.close()
    raw_sql(
        settings,
        "UPDATE bodies SET body = ? WHERE rowid = (SELECT min(rowid) FROM entries WHERE chain = ?)",
        (b'{"op":"register"}', signing.AGENTS_CHAIN),
    )
    with pytest.raises(IntegrityError) as refused:
        open_memory()
    assert refused.value.chain == signing.AGENTS_CHAIN


def test_a_signing_stream_shared_with_the_damaged_chain_keeps_the_others_verified(
    settings: Settings, open_memory: Callable[[], Memory]
) -> None:
    """alice's one signing stream wrote to A, then B, then A: leaving B out of verification must not
    break A's statements of that stream."""
    alice = Caller(agent_id="alice")

    def signed(m: Memory) -> None:
        signer = signing.Signer(register_key(m.store, "alice"), "alice")
        for repository in (A, B, A):
            args = {"repository": repository, "type": "Finding", "content": f"signed note in {repository}"}
            sign_and_write(m, alice, signer, "append_thought", args)

    plant_duplicate(settings, before=signed)
    m = open_memory()
    assert set(m.store.damaged) == {B}
    assert m.store.damaged[B].seq == DUPLICATE_SEQ + 1  # B's signed note came first
    assert {r.chain for r in m.store.verify_chains()} == {A, signing.AGENTS_CHAIN}
    assert m.verify_integrity(ADMIN, A).ok
    with pytest.raises(InvalidInput) as split:
        m.export(ADMIN, io.BytesIO(), skip_damaged=True)
    assert "signing stream" in split.value.message and f"{B} stays refused" in split.value.message
