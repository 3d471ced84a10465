"""``rebuild`` regenerates the derived tables with the same answers; ``export`` / ``import``
round-trip the ledger and refuse anything altered, writing nothing; ``migrate`` copies a store to the
other backend and back with every hash (DESIGN §3). On both stores; the CLI round trip on SQLite."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecallInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import Conflict, IntegrityError, InvalidInput
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.service.migrate import migrate

from .conftest import run_sql
from .helpers import fill, ledger, search, sql

A = "github.com/acme/shop"
B = "github.com/acme/api"
CALLER = Caller(agent_id="test-agent")
MENTIS = [sys.executable, "-m", "mentis"]
QUERIES = (
    "flaky checkout test fails on CI",
    "login is throttled by the rate limiter",
    "pagination cursor breaks after deletes",
    "cache invalidation",
    "the",  # only stopwords: vector ranking alone
)
SQL = (
    "SELECT * FROM attempts ORDER BY attempt_id",
    "SELECT * FROM tasks ORDER BY repository, task_id",
    "SELECT * FROM corrections ORDER BY attempt_id, at",
)


def settings_for(path: Path) -> Settings:
    return Settings(home=path.parent, db_path=path, embedder="hash")


def open_sqlite(path: Path) -> Memory:
    return Memory.open(settings_for(path), HashEmbedder())


def record(memory: Memory, **fields: Any) -> str:
    return memory.record_attempt(CALLER, parse(RecordAttemptInput, fields)).attempt_id


def populate(m: Memory) -> dict[str, str]:
    """Two repositories, titles, checks, files, tags, commits, corrections and a forget."""
    ids = {}
    ids["c1"] = record(
        m,
        repository=A,
        task_id="checkout",
        task_title="Flaky checkout test",
        action="rerun the checkout test with a fixed seed",
        observation="checkout test passes with seed 42 but fails on CI",
        inference="the test depends on ordering",
        files=["tests/test_checkout.py"],
        tags=["flaky", "ci"],
        check={"command": "pytest tests/test_checkout.py", "status": "passed", "exit_code": 0},
        code_context={
            "commit": "a1b2c3d4",
            "branch": "main",
            "file_hashes": {"tests/test_checkout.py": "abcd1234"},
        },
    )
    ids["p1"] = record(
        m,
        repository=B,
        task_id="pagination",
        task_title="Cursor pagination",
        action="add cursor pagination to the list endpoint",
        observation="cursor breaks after deletes",
        check={"command": "pytest -k page", "status": "failed", "exit_code": 1, "output": "KeyError"},
    )
    ids["c2"] = record(
        m,
        repository=A,
        task_id="checkout",
        action="pin the payment sandbox",
        observation="checkout still flaky on CI",
    )
    ids["l1"] = record(
        m,
        repository=A,
        task_id="login",
        task_title="Login throttled",
        action="raise the rate limiter burst",
        observation="login still throttled at ten per second",
    )
    ids["p2"] = record(
        m,
        repository=B,
        task_id="pagination",
        action="switch to keyset pagination",
        observation="keyset pagination survives deletes",
        tags=["api"],
    )
    ids["k1"] = record(
        m,
        repository=B,
        task_id="cache",
        action="invalidate the cache on write",
        observation="stale reads vanish after cache invalidation",
    )
    ids["c3"] = record(
        m,
        repository=A,
        task_id="checkout",
        task_title="Checkout test flaky on CI",
        action="isolate the database per test",
        observation="checkout test green on CI ten runs in a row",
    )
    m.mark_conclusion_outdated(
        CALLER, MarkOutdatedInput(repository=A, attempt_id=ids["c1"], reason="seed fix regressed")
    )
    m.mark_conclusion_outdated(
        CALLER,
        MarkOutdatedInput(
            repository=B, attempt_id=ids["p1"], reason="endpoint rewritten", latest_commit="beef"
        ),
    )
    m.mark_conclusion_outdated(CALLER, MarkOutdatedInput(repository=A, attempt_id=ids["c2"], reason="moot"))
    m.forget_attempt(CALLER, ForgetInput(repository=A, attempt_id=ids["c2"], reason="secret in output"))
    ids["l2"] = record(
        m,
        repository=A,
        task_id="login",
        action="cache the session lookup",
        observation="login latency halves and throttling stops",
    )
    m.forget_attempt(CALLER, ForgetInput(repository=A, attempt_id=ids["c3"]))
    return ids


def answers(m: Memory) -> dict[str, Any]:
    """Everything the read operations say about the store."""
    out: dict[str, Any] = {}
    for q in QUERIES:
        out[f"search:{q}"] = m.search(CALLER, SearchInput(query=q)).model_dump()
        out[f"search:{q}:{A}"] = m.search(CALLER, SearchInput(query=q, repository=A)).model_dump()
    for repo, task in ((A, "checkout"), (A, "login"), (B, "pagination"), (B, "cache")):
        out[f"recall:{repo}:{task}"] = m.recall(
            CALLER, RecallInput(repository=repo, task_id=task)
        ).model_dump()
    for text in SQL:
        out[f"sql:{text}"] = m.recall(CALLER, RecallInput(sql=text)).model_dump()
    return out


def ranking(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(t["repository"], t["task_id"], t["attempt"]["attempt_id"]) for t in result["tasks"]]


def derived(settings: Settings) -> dict[str, list[tuple[Any, ...]]]:
    return {
        t: run_sql(settings, f"SELECT * FROM {t} ORDER BY 1, 2")
        for t in ("attempt_idx", "correction_idx", "task_idx", "forgotten", "vectors")
    }


def entry_count(settings: Settings) -> int:
    (row,) = run_sql(settings, "SELECT (SELECT count(*) FROM entries) + (SELECT count(*) FROM bodies)")
    return int(row[0])  # type: ignore[call-overload]


@pytest.fixture
def source(memory: Memory) -> Memory:
    populate(memory)
    return memory


@pytest.fixture
def target(other_settings: Settings) -> Iterator[Memory]:
    m = Memory.open(other_settings, HashEmbedder())
    yield m
    m.close()


@pytest.fixture
def sqlite_source(tmp_path: Path) -> Iterator[Memory]:
    m = open_sqlite(tmp_path / "source.db")
    populate(m)
    yield m
    m.close()


def export_bytes(m: Memory, repository: str | None = None) -> bytes:
    out = io.BytesIO()
    m.export(CALLER, out, repository)
    return out.getvalue()


# ---------------------------------------------------------------- rebuild


def test_the_baseline_answers_are_not_empty(source: Memory) -> None:
    before = answers(source)
    assert ranking(before[f"search:{QUERIES[0]}"])[0][:2] == (A, "checkout")
    assert ranking(before[f"search:{QUERIES[2]}"])[0][:2] == (B, "pagination")
    assert all(before[f"search:{q}"]["tasks"] for q in QUERIES)


def test_rebuild_gives_the_same_search_and_recall_answers(
    source: Memory, settings: Settings, open_memory: Callable[[], Memory]
) -> None:
    before, tables = answers(source), derived(settings)
    entries = list(source.store.iter_ledger())

    assert source.rebuild() == len(entries)
    assert derived(settings) == tables
    assert list(source.store.iter_ledger()) == entries
    after = answers(source)
    for key in before:
        assert after[key] == before[key], key

    reopened = open_memory()  # a fresh vector index over the rebuilt tables
    assert answers(reopened) == before


def test_rebuild_reports_progress_for_every_attempt_it_embeds(source: Memory) -> None:
    seen: list[int] = []
    source.rebuild(seen.append)
    live = source.recall(CALLER, RecallInput(sql="SELECT count(*) FROM attempts")).rows[0][0]
    assert sum(seen) == live == 6


def test_rebuild_seen_by_a_second_memory_on_the_same_store_keeps_its_answers(
    source: Memory, open_memory: Callable[[], Memory]
) -> None:
    other = open_memory()
    before = answers(other)
    source.rebuild()
    assert answers(other) == before


# ---------------------------------------------------------------- export and import


def test_export_then_import_into_a_fresh_store_round_trips_entries_hashes_and_answers(
    source: Memory, target: Memory
) -> None:
    data = export_bytes(source)
    lines = data.splitlines()
    header = json.loads(lines[0])
    ledger = list(source.store.iter_ledger())
    last: dict[str, list[Any]] = {}
    for e, _ in ledger:
        last[e.chain] = [e.seq, e.hash]
    assert header["heads"] == last
    assert set(last) == {A, B}
    assert len(lines) == 1 + len(ledger)

    assert target.import_(CALLER, lines) == len(ledger)
    assert list(target.store.iter_ledger()) == ledger
    assert target.verify_integrity(CALLER) == source.verify_integrity(CALLER)
    expected, got = answers(source), answers(target)
    for key in expected:
        assert got[key] == expected[key], key
    with pytest.raises(Conflict):  # the same export again
        target.import_(CALLER, lines)


def test_import_keeps_the_order_of_equally_scored_tasks_from_two_repositories(
    memory: Memory, target: Memory
) -> None:
    """The same attempt text recorded in two repositories scores the same in both (the rank
    order between them is a tie-break); it must survive export/import like the rest."""
    for repo in (A, B):  # A first: A's attempt is older
        record(memory, repository=repo, task_id="deps", action="bump the lockfile", observation="ci green")
    query = SearchInput(query="bump the lockfile ci green")
    before = memory.search(CALLER, query)
    first, second = (t.score_parts for t in before.tasks)
    assert (first.lexical, first.vector) == (second.lexical, second.vector)  # a tie
    target.import_(CALLER, export_bytes(memory).splitlines())
    after = target.search(CALLER, query)
    assert ranking(after.model_dump()) == ranking(before.model_dump())
    assert after == before


def test_an_import_verifies_again_after_reopening(
    source: Memory, target: Memory, other_settings: Settings
) -> None:
    target.import_(CALLER, export_bytes(source).splitlines())
    target.close()
    reopened = Memory.open(other_settings, HashEmbedder())
    try:
        assert reopened.verify_integrity(CALLER) == source.verify_integrity(CALLER)
    finally:
        reopened.close()


def find_line(lines: list[bytes], chain: str, seq: int) -> int:
    for i, line in enumerate(lines[1:], start=1):
        entry = json.loads(line)["entry"]
        if (entry["chain"], entry["seq"]) == (chain, seq):
            return i
    raise AssertionError(f"no line for {chain} seq {seq}")


def flip_letter_after(line: bytes, marker: bytes) -> bytes:
    start = line.index(marker) + len(marker)
    i = next(j for j in range(start, len(line)) if chr(line[j]).isalpha())
    return line[:i] + chr(line[i]).swapcase().encode() + line[i + 1 :]


def live_attempt_seq(lines: list[bytes], chain: str) -> int:
    for line in lines[1:]:
        item = json.loads(line)
        if item["entry"]["chain"] == chain and item["entry"]["kind"] == "attempt" and item["body"]:
            return int(item["entry"]["seq"])
    raise AssertionError("no live attempt")


def edit_body(lines: list[bytes]) -> None:
    i = find_line(lines, A, live_attempt_seq(lines, A))
    lines[i] = flip_letter_after(lines[i], b'"observation":"')


def edit_entry_field(field: str) -> Callable[[list[bytes]], None]:
    def edit(lines: list[bytes]) -> None:
        i = find_line(lines, B, 1)
        lines[i] = flip_letter_after(lines[i], f'"{field}":"'.encode())

    return edit


def drop_body(lines: list[bytes]) -> None:
    i = find_line(lines, B, 1)
    item = json.loads(lines[i])
    item["body"] = None
    lines[i] = json.dumps(item).encode()


def set_line(lines: list[bytes], i: int, value: bytes) -> None:
    lines[i] = value


def edit_head(lines: list[bytes]) -> None:
    header = json.loads(lines[0])
    header["heads"][A][0] -= 1
    lines[0] = json.dumps(header).encode()


EDITS: dict[str, tuple[Callable[[list[bytes]], None], type[Exception]]] = {
    "body-byte": (edit_body, IntegrityError),
    "entry-agent-byte": (edit_entry_field("agent"), IntegrityError),
    "entry-hash-byte": (edit_entry_field("hash"), IntegrityError),
    "entry-prev-byte": (edit_entry_field("prev"), IntegrityError),
    "body-dropped": (drop_body, IntegrityError),
    "middle-line-removed": (lambda ls: ls.pop(find_line(ls, A, 2)), IntegrityError),
    "last-line-of-a-chain-removed": (lambda ls: ls.pop(find_line(ls, B, 2)), IntegrityError),
    "line-duplicated": (lambda ls: ls.insert(2, ls[2]), IntegrityError),
    "line-truncated": (lambda ls: set_line(ls, 3, ls[3][: len(ls[3]) // 2]), IntegrityError),
    "head-edited": (edit_head, IntegrityError),
    "header-removed": (lambda ls: ls.pop(0), InvalidInput),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_altered_export_is_refused_and_writes_nothing(
    source: Memory, target: Memory, other_settings: Settings, edit: str
) -> None:
    apply, error = EDITS[edit]
    lines = export_bytes(source).splitlines()
    original = list(lines)
    apply(lines)
    assert lines != original
    with pytest.raises(error):
        target.import_(CALLER, lines)
    assert entry_count(other_settings) == 0
    assert target.verify_integrity(CALLER).chains == []
    assert target.recall(CALLER, RecallInput(sql="SELECT count(*) FROM attempts")).rows == [[0]]
    # the untouched export still goes in afterwards
    assert target.import_(CALLER, original) == len(original) - 1


def test_importing_a_chain_the_store_already_holds_raises_conflict_and_writes_nothing(
    source: Memory, target: Memory, other_settings: Settings
) -> None:
    target.import_(CALLER, export_bytes(source, B).splitlines())  # the target holds B only
    before, entries = entry_count(other_settings), list(target.store.iter_ledger())
    with pytest.raises(Conflict):
        target.import_(CALLER, export_bytes(source).splitlines())  # A and B
    assert entry_count(other_settings) == before
    assert list(target.store.iter_ledger()) == entries
    assert {c.chain for c in target.verify_integrity(CALLER).chains} == {B}

    with pytest.raises(Conflict):  # into the store it came from
        source.import_(CALLER, export_bytes(source).splitlines())


# ---------------------------------------------------------------- migrate to the other backend

PORTABLE_QUERIES = ("cache stampede under load", "navbar overflows", "payment queue timed out")


def portable_answers(memory: Memory, caller: Caller) -> list[object]:
    """What both backends answer alike: rankings, and recall rows."""
    out: list[object] = [search(memory, caller, q) for q in PORTABLE_QUERIES]
    out.append(
        sql(memory, caller, "select attempt_id, task_id, outdated from attempts order by attempt_id").rows
    )
    out.append(sql(memory, caller, "select * from tasks order by repository, task_id").rows)
    return out


@pytest.fixture
def postgres_settings(request: pytest.FixtureRequest, tmp_path: object) -> Callable[[], Settings]:
    def make() -> Settings:
        cluster = request.getfixturevalue("pg_cluster")
        return Settings(
            home=tmp_path,
            db_path=tmp_path / "unused.db",
            embedder="hash",
            database_url=cluster.new_database(),
        )  # type: ignore[operator]

    return make


def test_migrating_to_the_other_backend_and_back_keeps_every_hash_and_answer(
    memory: Memory,
    caller: Caller,
    settings: Settings,
    postgres_settings: Callable[[], Settings],
    tmp_path: object,
) -> None:
    fill(memory, caller)
    expected, hashes = portable_answers(memory, caller), ledger(memory)
    memory.close()
    if settings.uses_postgres:
        there = Settings(home=tmp_path, db_path=tmp_path / "there.db", embedder="hash")  # type: ignore[operator]
        back = postgres_settings()
    else:
        there = postgres_settings()
        back = Settings(home=tmp_path, db_path=tmp_path / "back.db", embedder="hash")  # type: ignore[operator]
    assert migrate(settings, there, HashEmbedder()) == len(hashes)
    assert migrate(there, back, HashEmbedder()) == len(hashes)
    for s in (there, back):
        m = Memory.open(s, HashEmbedder())
        try:
            assert (ledger(m), portable_answers(m, caller)) == (hashes, expected)
        finally:
            m.close()
    with pytest.raises(Conflict):
        migrate(settings, back, HashEmbedder())


def test_the_migrate_command_copies_a_store_and_reports_it(
    memory: Memory,
    caller: Caller,
    settings: Settings,
    postgres_settings: Callable[[], Settings],
    tmp_path: object,
) -> None:
    fill(memory, caller)
    hashes = ledger(memory)
    memory.close()
    spec = settings.database_url or f"sqlite:{settings.db_path}"
    target = (
        Settings(home=tmp_path, db_path=tmp_path / "cli.db", embedder="hash")
        if settings.uses_postgres
        else postgres_settings()
    )  # type: ignore[operator]
    to = target.database_url or f"sqlite:{target.db_path}"
    done = subprocess.run(
        [sys.executable, "-m", "mentis", "migrate", "--from", spec, "--to", to],
        capture_output=True,
        text=True,
        timeout=120,
        env={"MENTIS_EMBEDDER": "hash", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"migrated {len(hashes)} ledger entries" in done.stderr
    m = Memory.open(target, HashEmbedder())
    try:
        assert ledger(m) == hashes
    finally:
        m.close()


# ---------------------------------------------------------------- the CLI


def cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(MENTIS_EMBEDDER="hash", MENTIS_HOME=str(home), MENTIS_AGENT_ID="test-agent")
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")  # a cheaper start-up
    env.pop("MENTIS_DB", None)
    return subprocess.run([*MENTIS, *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_cli_export_import_and_rebuild_round_trip(tmp_path: Path, sqlite_source: Memory) -> None:
    src = Path(sqlite_source.store.path)
    entries = list(sqlite_source.store.iter_ledger())
    expected_verify = sqlite_source.verify_integrity(CALLER).model_dump(mode="json")
    sqlite_source.close()

    dump, other = tmp_path / "ledger.jsonl", tmp_path / "other.db"
    done = cli("export", str(dump), "--db", str(src), home=tmp_path)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert f"exported {len(entries)} entries" in done.stderr
    assert len(dump.read_bytes().splitlines()) == 1 + len(entries)

    done = cli("import", str(dump), "--db", str(other), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"imported {len(entries)} entries" in done.stderr

    done = cli("verify", "--db", str(other), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected_verify

    m = open_sqlite(other)
    try:
        assert list(m.store.iter_ledger()) == entries
        imported = answers(m)
    finally:
        m.close()

    done = cli("search", QUERIES[0], "--db", str(other), "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(json.dumps(imported[f"search:{QUERIES[0]}"]))

    done = cli("rebuild", "--db", str(other), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"from {len(entries)} ledger entries" in done.stderr
    m = open_sqlite(other)
    try:
        assert answers(m) == imported
    finally:
        m.close()

    done = cli("import", str(dump), "--db", str(other), home=tmp_path)
    assert done.returncode == Conflict.exit_code == 4, done.stderr


def test_cli_import_of_an_altered_export_exits_6_and_leaves_the_target_empty(
    tmp_path: Path, sqlite_source: Memory
) -> None:
    lines = export_bytes(sqlite_source).splitlines()
    edit_body(lines)
    dump, other = tmp_path / "altered.jsonl", tmp_path / "other.db"
    dump.write_bytes(b"\n".join(lines) + b"\n")
    done = cli("import", str(dump), "--db", str(other), home=tmp_path)
    assert done.returncode == IntegrityError.exit_code == 6, done.stderr
    assert f"chain {A!r}" in done.stderr
    assert entry_count(settings_for(other)) == 0
