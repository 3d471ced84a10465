"""Drill: a soak of several processes doing mixed reads and writes on one store, SQLite and PostgreSQL.

Each worker is an OS process with its own ``Memory`` on the shared store. They start together
behind a stdin barrier and, until their time is up, cycle through record_attempt, search, recall
(SQL and a task's history), append_thought, search_thoughts, mark_conclusion_outdated and
forget_attempt, spread over three repositories so that the chains are contended. Each reports what
it did as one JSON line at the end. Then: zero errors in any worker, every chain verifies, and the
ledger and the recall views hold exactly the reported writes (per kind), no more, no fewer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import RecallInput
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory

from ..child_lines import Lines
from ..pg_server import Cluster
from .scale import SIZES

pytestmark = [pytest.mark.drill, pytest.mark.slow]

REPOS = ("github.com/acme/shop", "github.com/acme/api", "github.com/acme/infra")
CHECKER = Caller(agent_id="checker")

WORKER = r"""
import json, sys, time, traceback
from pathlib import Path
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecallInput, RecordAttemptInput, SearchInput
from mentis.api.thoughts import AppendThoughtInput, SearchThoughtsInput

path, url, worker, seconds = Path(sys.argv[1]), sys.argv[2] or None, int(sys.argv[3]), float(sys.argv[4])
repos = sys.argv[5:]
settings = Settings(home=path.parent, db_path=path, embedder="hash", database_url=url)
memory = Memory.open(settings, HashEmbedder())
caller = Caller(agent_id=f"soak-{worker}")
print("ready", flush=True)
sys.stdin.readline()  # the barrier
done = {"attempt": 0, "correction": 0, "forget": 0, "thought": 0, "reads": 0, "corrections_forgotten": 0}
corrected = {}
errors = []
mine = []
end = time.monotonic() + seconds
i = 0
while time.monotonic() < end:
    repo = repos[(worker + i) % len(repos)]
    try:
        step = i % 10
        if step in (0, 3, 6):
            r = memory.record_attempt(caller, RecordAttemptInput(
                repository=repo, task_id=f"w{worker}-t{i % 4}",
                action=f"worker {worker} step {i} retries the flaky cache test",
                observation=f"worker {worker} saw timeout {i} in the cache layer"))
            mine.append((repo, r.attempt_id))
            done["attempt"] += 1
        elif step == 1:
            memory.search(caller, SearchInput(query=f"flaky cache timeout {i}", limit=10))
            done["reads"] += 1
        elif step == 2:
            memory.recall(caller, RecallInput(sql="SELECT count(*) FROM attempts WHERE repository = :r",
                                              params={"r": repo}))
            memory.recall(caller, RecallInput(repository=mine[-1][0], task_id=f"w{worker}-t{(i - 2) % 4}"))
            done["reads"] += 2
        elif step == 4:
            memory.append_thought(caller, AppendThoughtInput(
                repository=repo, type=("Decision", "Finding", "LessonLearned")[i % 3],
                content=f"worker {worker} thought {i}: pool size {i * 13 % 97} fixed the checkout load"))
            done["thought"] += 1
        elif step == 5:
            memory.search_thoughts(caller, SearchThoughtsInput(query=f"pool size checkout {i}", limit=5))
            done["reads"] += 1
        elif step == 7:
            r_repo, target = mine[-1]
            memory.mark_conclusion_outdated(caller, MarkOutdatedInput(
                repository=r_repo, attempt_id=target, reason=f"stale after step {i}"))
            done["correction"] += 1
            corrected[target] = corrected.get(target, 0) + 1
        elif step == 9 and i % 20 == 9:
            r_repo, target = mine.pop(0)
            memory.forget_attempt(caller, ForgetInput(repository=r_repo, attempt_id=target))
            done["forget"] += 1
            done["corrections_forgotten"] += corrected.pop(target, 0)
    except Exception as exc:
        errors.append(f"step {i}: {type(exc).__name__}: {exc}")
        traceback.print_exc()
    i += 1
memory.close()
print(json.dumps({"done": done, "errors": errors[:20], "error_count": len(errors)}), flush=True)
"""


def soak(tmp_path: Path, settings: Settings) -> dict[str, int]:
    """Run the workers; return the summed counts after checking there were no errors."""
    deadline = time.monotonic() + SIZES.soak_seconds + 180
    errs = [tmp_path / f"worker-{w}.err" for w in range(SIZES.soak_processes)]
    procs = []
    for w in range(SIZES.soak_processes):
        with errs[w].open("wb") as fh:
            argv = [str(settings.db_path), settings.database_url or "", str(w), str(SIZES.soak_seconds)]
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", WORKER, *argv, *REPOS],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=fh,
                    bufsize=0,
                )
            )
    try:
        readers = [Lines(p) for p in procs]
        for w, r in enumerate(readers):
            assert r.next(deadline) == "ready", errs[w].read_text()[-3000:]
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.close()
        totals: Counter[str] = Counter()
        for w, (p, r) in enumerate(zip(procs, readers, strict=True)):
            line = r.next(deadline)
            assert line is not None, errs[w].read_text()[-3000:]
            report: dict[str, Any] = json.loads(line)
            assert report["error_count"] == 0, report["errors"]
            assert p.wait(timeout=max(0.1, deadline - time.monotonic())) == 0, errs[w].read_text()[-3000:]
            totals.update(report["done"])
        return dict(totals)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for pipe in (p.stdin, p.stdout):
                if pipe is not None and not pipe.closed:
                    pipe.close()


def check(settings: Settings, totals: dict[str, int]) -> None:
    memory = Memory.open(settings, HashEmbedder())  # verifies every chain
    try:
        verified = memory.verify_integrity(CHECKER)
        assert verified.ok and {c.chain for c in verified.chains} == set(REPOS)
        kinds: Counter[str] = Counter()
        seqs: dict[str, list[int]] = {}
        for entry, _ in memory.store.iter_ledger():
            kinds[entry.kind] += 1
            seqs.setdefault(entry.chain, []).append(entry.seq)
        assert all(sorted(s) == list(range(len(s))) for s in seqs.values())
        assert dict(kinds) == {
            k: totals[k] for k in ("attempt", "correction", "forget", "thought") if totals[k]
        }

        def count(view: str) -> int:
            rows = memory.recall(CHECKER, RecallInput(sql=f"SELECT count(*) FROM {view}")).rows
            return int(rows[0][0])

        assert count("attempts") == totals["attempt"] - totals["forget"]
        assert count("thoughts") == totals["thought"]
        # corrections of forgotten attempts go with them; the others are all there
        assert count("corrections") == totals["correction"] - totals["corrections_forgotten"]
    finally:
        memory.close()
    sys.stderr.write(f"soak: {SIZES.soak_processes} processes x {SIZES.soak_seconds:.0f} s: {totals}\n")


def test_a_soak_on_one_sqlite_file_ends_with_zero_errors_verified_chains_and_exact_counts(
    tmp_path: Path,
) -> None:
    settings = Settings(home=tmp_path, db_path=tmp_path / "mentis.db", embedder="hash")
    Memory.open(settings, HashEmbedder()).close()  # created before the workers race to open it
    totals = soak(tmp_path, settings)
    assert totals["attempt"] > 0 and totals["reads"] > 0
    check(settings, totals)


def test_a_soak_on_postgresql_ends_with_zero_errors_verified_chains_and_exact_counts(
    tmp_path: Path, pg_cluster: Cluster
) -> None:
    base = Settings(home=tmp_path, db_path=tmp_path / "unused.db", embedder="hash")
    settings = replace(base, database_url=pg_cluster.new_database())
    Memory.open(settings, HashEmbedder()).close()  # the schema exists before the workers start
    totals = soak(tmp_path, settings)
    assert totals["attempt"] > 0 and totals["reads"] > 0
    check(settings, totals)
