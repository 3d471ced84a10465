"""Several processes (agents on several machines) writing to several repositories at once, on
both stores; and, on PostgreSQL, writers on different repositories never wait on each other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from mentis.config import Settings
from mentis.memory import Caller, Memory

from .helpers import REPOS, search

WORKERS = 4
PER_WORKER = 8
WORKER = """
import json, sys
from mentis.embed import HashEmbedder
from mentis.memory import Caller, open_memory
from mentis.model import RecordAttemptInput, parse
repos, n, name = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
m = open_memory(embedder=HashEmbedder())
caller = Caller(agent_id=name)
for i in range(n):
    repo = repos[i % len(repos)]
    r = m.record_attempt(caller, parse(RecordAttemptInput, {
        "repository": repo, "task_id": f"{name}-{i}", "action": f"step {i} by {name}",
        "observation": f"worker {name} wrote attempt {i}"}))
    ack = {"repository": repo, "attempt_id": r.attempt_id, "seq": r.ledger.seq, "hash": r.ledger.hash}
    print(json.dumps(ack))
m.close()
"""


def _env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ, MENTIS_EMBEDDER="hash", MENTIS_DB=str(settings.db_path))
    env.pop("MENTIS_DATABASE_URL", None)
    if settings.database_url:
        env["MENTIS_DATABASE_URL"] = settings.database_url
    return env


@pytest.mark.slow
def test_processes_writing_to_several_repositories_lose_duplicate_and_fork_nothing(
    memory: Memory, settings: Settings, caller: Caller, tmp_path: Path
) -> None:
    memory.close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, json.dumps(list(REPOS)), str(PER_WORKER), f"w{i}"],
            env=_env(settings),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(WORKERS)
    ]
    acks = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        acks += [json.loads(line) for line in out.splitlines()]
    assert len(acks) == WORKERS * PER_WORKER
    reopened = Memory.open(settings, memory.embedder)
    try:
        entries = [(e.chain, e.seq, e.id, e.hash) for e, _ in reopened.store.iter_ledger()]
        assert Counter(c for c, *_ in entries) == Counter({r: WORKERS * PER_WORKER // 2 for r in REPOS})
        for repo in REPOS:
            assert sorted(s for c, s, *_ in entries if c == repo) == list(range(WORKERS * PER_WORKER // 2))
        assert {(c, s, i, h) for c, s, i, h in entries} == {
            (a["repository"], a["seq"], a["attempt_id"], a["hash"]) for a in acks
        }
        assert [c.entries for c in reopened.verify_integrity(caller).chains] == [16, 16]
        assert search(reopened, caller, "worker w3 wrote attempt 5")[0] == (REPOS[1], "w3-5")
    finally:
        reopened.close()


def test_a_writer_on_another_repository_does_not_wait_for_a_held_repository_lock(
    memory: Memory, settings: Settings, caller: Caller, backend: str
) -> None:
    if backend != "postgres":
        pytest.skip("SQLite serialises every writer on its file lock; per-repository heads are PostgreSQL's")
    import psycopg

    from mentis.store.postgres_base import LOCK_CLASS

    from .helpers import record

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
