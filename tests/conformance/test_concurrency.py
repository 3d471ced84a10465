"""Several processes (agents on several machines) write one store at once, on both stores (DESIGN §4).

Each writer is a separate OS process with its own ``Memory``; they start together behind a stdin
barrier, report every acknowledged write as a JSON line, and the test then checks that nothing was
lost, duplicated or forked and that the ledger verifies. On PostgreSQL, writers on different
repositories never wait on each other; on SQLite, processes creating one new file at once all open it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import ForgetInput, RecallInput, RecordAttemptInput, SearchInput
from mentis.api.verify import ChainResult, VerifyResult
from mentis.config import Settings
from mentis.service.memory import Caller, Memory
from tests.child_lines import Lines

from .helpers import REPOS, record, search

WORKERS = 4
PER_WORKER = 40
DEADLINE_S = 120.0

WRITER = r"""
import json, sys
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, open_memory
from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput, SearchInput

worker, count, mixed = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "mixed"
repos = sys.argv[4:]
memory = open_memory(embedder=HashEmbedder())  # the store named by MENTIS_DB / MENTIS_DATABASE_URL
caller = Caller(agent_id=f"worker-{worker}")
print("ready", flush=True)
sys.stdin.readline()  # the barrier: every writer starts at once


def ack(kind, repo, ref, attempt_id):
    line = {"kind": kind, "repository": repo, "attempt_id": attempt_id, "seq": ref.seq, "hash": ref.hash}
    print(json.dumps(line), flush=True)


mine = []
for i in range(count):
    repo = repos[i % len(repos)]
    req = RecordAttemptInput(
        repository=repo,
        task_id=f"w{worker}-t{i % 5}",
        action=f"worker {worker} attempt {i} tries the cache",
        observation=f"observation {i} from worker {worker}",
    )
    r = memory.record_attempt(caller, req)
    ack("attempt", repo, r.ledger, r.attempt_id)
    memory.search(caller, SearchInput(query=f"attempt {i} cache", limit=3))  # read between writes
    mine.append((repo, r.attempt_id))
    if mixed and i % 4 == 3:
        repo_c, target = mine[-2]
        c = memory.mark_conclusion_outdated(
            caller, MarkOutdatedInput(repository=repo_c, attempt_id=target, reason=f"stale {i}")
        )
        ack("correction", repo_c, c.ledger, target)
    if mixed and i % 8 == 7:
        repo_f, target = mine[-4]
        f = memory.forget_attempt(caller, ForgetInput(repository=repo_f, attempt_id=target))
        ack("forget", repo_f, f.ledger, target)
memory.close()
print("done", flush=True)
"""


def _env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ, MENTIS_EMBEDDER="hash", MENTIS_DB=str(settings.db_path))
    env.pop("MENTIS_DATABASE_URL", None)
    if settings.database_url:
        env["MENTIS_DATABASE_URL"] = settings.database_url
    return env


def start_writer(
    settings: Settings, worker: int, count: int, mode: str, err: Path
) -> subprocess.Popen[bytes]:
    with err.open("wb") as fh:
        return subprocess.Popen(
            [sys.executable, "-c", WRITER, str(worker), str(count), mode, *REPOS],
            env=_env(settings),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=fh,
            bufsize=0,
        )


def run_writers(tmp_path: Path, settings: Settings, mode: str) -> list[dict[str, Any]]:
    """Start WORKERS writers, release them together, return every acknowledged write."""
    deadline = time.monotonic() + DEADLINE_S
    errs = [tmp_path / f"writer-{w}.err" for w in range(WORKERS)]
    procs = [start_writer(settings, w, PER_WORKER, mode, errs[w]) for w in range(WORKERS)]
    try:
        readers = [Lines(p) for p in procs]
        for w, r in enumerate(readers):
            assert r.next(deadline) == "ready", errs[w].read_text()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.close()
        acks: list[dict[str, Any]] = []
        for w, (p, r) in enumerate(zip(procs, readers, strict=True)):
            lines = []
            while (line := r.next(deadline)) is not None:
                lines.append(line)
            assert lines[-1:] == ["done"], errs[w].read_text()
            acks.extend(json.loads(x) for x in lines[:-1])
            assert p.wait(timeout=max(0.1, deadline - time.monotonic())) == 0, errs[w].read_text()
        return acks
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for pipe in (p.stdin, p.stdout):
                if pipe is not None and not pipe.closed:
                    pipe.close()


OPENER = r"""
import sys, time
from pathlib import Path
from mentis.store.sqlite.store import SqliteStore

path, start = Path(sys.argv[1]), float(sys.argv[2])
time.sleep(max(0.0, start - time.time() - 0.02))  # sleep, then spin: every opener starts at once
while time.time() < start:
    pass
SqliteStore(path, 8).close()
print("opened", flush=True)
"""


def test_processes_creating_one_new_sqlite_file_at_once_all_open_it(tmp_path: Path) -> None:
    # SQLite reports "locked" at once, busy handler or not, to a connection switching a file to
    # WAL while another process creates it; the store retries that switch.
    for attempt in range(4):
        path = tmp_path / f"new-{attempt}.db"
        start = time.time() + 2.0
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(path), str(start)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        results = [p.communicate(timeout=60) for p in procs]
        assert [(p.returncode, out.strip()) for p, (out, _) in zip(procs, results, strict=True)] == [
            (0, "opened")
        ] * 6, [err for _, err in results]


def all_attempt_ids(memory: Memory, caller: Caller) -> list[str]:
    """Every attempt id the recall views show, paged past the 100-row cap."""
    out: list[str] = []
    while True:
        page = memory.recall(
            caller,
            RecallInput(
                sql="SELECT attempt_id FROM attempts ORDER BY attempt_id LIMIT 100 OFFSET :o",
                params={"o": len(out)},
            ),
        )
        assert not page.truncated
        out.extend(r[0] for r in page.rows)
        if len(page.rows) < 100:
            return out


def ledger(memory: Memory) -> list[tuple[str, int, str, str, str]]:
    return sorted((e.chain, e.seq, e.kind, e.id, e.hash) for e, _ in memory.store.iter_ledger())


def assert_continuous(rows: list[tuple[str, int, str, str, str]]) -> dict[str, int]:
    """Seqs per chain are exactly 0..n-1; returns n per chain."""
    seqs: dict[str, list[int]] = {}
    for chain, seq, *_ in rows:
        seqs.setdefault(chain, []).append(seq)
    for chain, found in seqs.items():
        assert found == list(range(len(found))), chain
    return {c: len(s) for c, s in seqs.items()}


@pytest.mark.slow
def test_four_processes_recording_at_once_lose_duplicate_and_fork_nothing(
    memory: Memory, settings: Settings, caller: Caller, tmp_path: Path, open_memory: Callable[[], Memory]
) -> None:
    memory.close()
    acks = run_writers(tmp_path, settings, "plain")

    assert len(acks) == WORKERS * PER_WORKER
    acked = {a["attempt_id"]: (a["repository"], a["seq"], a["hash"]) for a in acks}
    assert len(acked) == len(acks)

    memory = open_memory()
    rows = ledger(memory)
    assert {aid: (chain, seq, h) for chain, seq, kind, aid, h in rows if kind == "attempt"} == acked
    assert Counter(kind for *_, kind, _, _ in rows) == Counter({"attempt": WORKERS * PER_WORKER})
    per_chain = assert_continuous(rows)
    assert per_chain == {r: WORKERS * PER_WORKER // 2 for r in REPOS}

    ids = all_attempt_ids(memory, caller)
    assert Counter(ids) == Counter(set(acked))
    heads = {a["repository"]: a["hash"] for a in acks if a["seq"] == per_chain[a["repository"]] - 1}
    n = WORKERS * PER_WORKER // 2
    assert memory.verify_integrity(caller) == VerifyResult(
        ok=True,
        chains=[
            ChainResult(chain=r, ok=True, entries=n, head_seq=n - 1, head_hash=heads[r], bodies_erased=0)
            for r in sorted(REPOS)
        ],
    )
    assert search(memory, caller, "observation 5 from worker 3")[0] == (REPOS[1], "w3-t0")


@pytest.mark.slow
def test_four_processes_correcting_and_forgetting_at_once_keep_every_chain_verifiable(
    memory: Memory, settings: Settings, caller: Caller, tmp_path: Path, open_memory: Callable[[], Memory]
) -> None:
    memory.close()
    acks = run_writers(tmp_path, settings, "mixed")

    memory = open_memory()
    rows = ledger(memory)
    assert {(chain, seq, kind, h) for chain, seq, kind, _, h in rows} == {
        (a["repository"], a["seq"], a["kind"], a["hash"]) for a in acks
    }
    assert len(rows) == len(acks)
    assert_continuous(rows)

    forgotten = {a["attempt_id"] for a in acks if a["kind"] == "forget"}
    recorded = {a["attempt_id"] for a in acks if a["kind"] == "attempt"}
    corrected_live = {a["attempt_id"] for a in acks if a["kind"] == "correction"} - forgotten
    assert forgotten and corrected_live

    result = memory.verify_integrity(caller)
    assert result.ok
    assert sum(c.entries for c in result.chains) == len(acks)
    assert Counter(all_attempt_ids(memory, caller)) == Counter(recorded - forgotten)
    outdated = memory.recall(caller, RecallInput(sql="SELECT count(*) FROM attempts WHERE outdated = 1")).rows
    assert outdated == [[len(corrected_live)]]


# ---------------------------------------------------------------- two Memory objects, one store


@pytest.fixture
def two(open_memory: Callable[[], Memory]) -> tuple[Memory, Memory]:
    return open_memory(), open_memory()


def test_a_second_memory_finds_the_first_ones_new_attempt_through_its_vector_index(
    two: tuple[Memory, Memory], caller: Caller
) -> None:
    first, second = two
    first.record_attempt(
        caller,
        RecordAttemptInput(
            repository=REPOS[0], task_id="old", action="tune the gc pauses", observation="pauses shrink"
        ),
    )
    warm = second.search(caller, SearchInput(query="tune the gc pauses"))  # index loaded now
    assert [t.task_id for t in warm.tasks] == ["old"]

    new = first.record_attempt(
        caller,
        RecordAttemptInput(
            repository=REPOS[1],
            task_id="new",
            action="quarantine the zeppelin fixture",
            observation="zeppelin fixture no longer leaks sockets",
        ),
    )
    found = second.search(
        caller, SearchInput(query="quarantine the zeppelin fixture zeppelin fixture no longer leaks sockets")
    )
    top = found.tasks[0]
    assert (top.repository, top.task_id, top.attempt.attempt_id) == (REPOS[1], "new", new.attempt_id)
    assert top.score_parts.vector_rank == 1
    assert top.score_parts.vector is not None and top.score_parts.vector > 0.99
    # the vector side alone sees it too (a query with no lexical terms: all stopwords)
    vector_only = second.search(caller, SearchInput(query="the", repository=REPOS[1]))
    assert vector_only.ranking.startswith("vector")
    assert [t.attempt.attempt_id for t in vector_only.tasks] == [new.attempt_id]


def test_a_second_memory_stops_returning_an_attempt_the_first_one_forgot(
    two: tuple[Memory, Memory], caller: Caller
) -> None:
    first, second = two
    ids = [
        first.record_attempt(
            caller,
            RecordAttemptInput(
                repository=REPOS[0], task_id=f"t{i}", action=f"bump retry budget {i}", observation="flaky"
            ),
        ).attempt_id
        for i in range(3)
    ]
    before = second.search(caller, SearchInput(query="the", repository=REPOS[0]))
    assert {t.attempt.attempt_id for t in before.tasks} == set(ids)

    first.forget_attempt(caller, ForgetInput(repository=REPOS[0], attempt_id=ids[0]))
    after = second.search(caller, SearchInput(query="the", repository=REPOS[0]))
    assert {t.attempt.attempt_id for t in after.tasks} == set(ids[1:])


def test_a_writer_on_another_repository_does_not_wait_for_a_held_repository_lock(
    memory: Memory, settings: Settings, caller: Caller, backend: str
) -> None:
    if backend != "postgres":
        pytest.skip("SQLite serialises every writer on its file lock; per-repository heads are PostgreSQL's")
    import psycopg

    from mentis.store.postgres.connection import LOCK_CLASS

    assert settings.database_url is not None
    with psycopg.connect(settings.database_url) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LOCK_CLASS, REPOS[0]))
        record(memory, caller, REPOS[1])  # completes while REPOS[0]'s head is held
        done = threading.Event()
        writer = threading.Thread(target=lambda: (record(memory, caller, REPOS[0]), done.set()))
        writer.start()
        assert not done.wait(0.5)  # REPOS[0]'s writer queues behind the holder
        holder.rollback()
        assert done.wait(10)
        writer.join(10)
    assert [c.chain for c in memory.verify_integrity(caller).chains] == [REPOS[1], REPOS[0]]
