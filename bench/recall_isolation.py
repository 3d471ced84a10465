"""Does one expensive ``recall`` statement slow down everyone else's ``search``?

    .venv/bin/python bench/recall_isolation.py [--attempts 2000] [--searches 40] [--repeats 3]
        [--embedder hash|local] [--attackers 1,4] [--out bench/results/recall-isolation.json]

A SQLite store is filled with ``--attempts`` attempts through ``Memory.record_attempt``. The
normal latency of ``Memory.search`` (varied queries, after a warm-up) is measured alone, then
again while another thread keeps running one of the worst recall statements we could write (each
re-issued as soon as the last one ended at its 5 s limit or error). Every figure is the median over
``--repeats`` passes of each pass's median (and p95) over ``--searches`` searches. Target: search
during the worst statement within 2x its normal median. See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from mentis.api.attempts import RecallInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import MentisError
from mentis.providers.embed import Embedder, HashEmbedder
from mentis.service.memory import Caller, Memory

WORDS = str.split(
    "timeout retry cache flaky worker deadlock parser cart total rounding migration index vector "
    "socket reset token expired lock contention schema drift import cycle memory leak segfault "
    "build cache stale header encoding utf8 json decode null pointer race fixture teardown"
)
WORST = {
    "like_per_row": (
        "with recursive r(n) as (select 1 union all select n + 1 from r) select count(*) from r "
        "where printf('%.*c', 1000000, 'a') || n like '%' || printf('%.*c', 97, 'a') || 'b'"
    ),
    "views_cross_join": (
        "select count(*) from attempts a, attempts b, attempts c where a.observation < c.observation"
    ),
    "sorted_megabyte_blobs": (
        "with recursive r(n, s) as (select 1, randomblob(1000000) union all select n + 1, s from r) "
        "select n from r order by s"
    ),
    "growing_distinct_cte": (
        "with recursive r(n) as (select 1 union select n + 1 from r) select count(*) from r"
    ),
}
READER = Caller(agent_id="attacker", can_write=False, repositories=("repo-*",))
SEARCHER = Caller(agent_id="searcher", repositories=("repo-*",))


def fill(memory: Memory, n: int, rng: random.Random) -> None:
    caller = Caller(agent_id="filler")
    for i in range(n):
        text = " ".join(rng.choices(WORDS, k=40))
        memory.record_attempt(
            caller,
            parse(
                RecordAttemptInput,
                {
                    "repository": f"repo-{i % 4}",
                    "task_id": f"T-{i // 4}",
                    "action": " ".join(rng.choices(WORDS, k=12)),
                    "observation": text,
                    "files": [f"src/{rng.choice(WORDS)}.py"],
                },
            ),
        )


def search_pass(memory: Memory, queries: list[SearchInput]) -> list[float]:
    times = []
    for q in queries:
        t0 = time.perf_counter()
        memory.search(SEARCHER, q)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.95) - 1)]


class Attacker:
    """Runs ``sql`` as recall over and over on ``threads`` threads until stopped."""

    def __init__(self, memory: Memory, sql: str, threads: int) -> None:
        self.memory, self.sql = memory, parse(RecallInput, {"sql": sql})
        self.stop = threading.Event()
        self.outcomes: list[str] = []
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        self.started = threading.Barrier(threads + 1)

    def _run(self) -> None:
        self.started.wait()
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                self.memory.recall(READER, self.sql)
                outcome = "ok"
            except MentisError as exc:
                outcome = exc.message.split(":")[0]
            self.outcomes.append(f"{outcome} ({time.perf_counter() - t0:.1f} s)")

    def __enter__(self) -> Attacker:
        for t in self.threads:
            t.start()
        self.started.wait()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attempts", type=int, default=2000)
    ap.add_argument("--searches", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--embedder", choices=("hash", "local"), default="hash")
    ap.add_argument("--attackers", default="1,4", help="recall threads per worst statement (comma list)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/recall-isolation.json"))
    args = ap.parse_args()
    rng = random.Random(7)
    embedder: Embedder
    if args.embedder == "local":
        from mentis.providers.embed.local import LocalEmbedder

        embedder = LocalEmbedder.load()
    else:
        embedder = HashEmbedder()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mentis.db"
        memory = Memory.open(Settings(home=Path(tmp), db_path=path, embedder=args.embedder), embedder)
        fill(memory, args.attempts, rng)
        queries = [
            parse(SearchInput, {"query": " ".join(rng.choices(WORDS, k=rng.randint(2, 6)))})
            for _ in range(args.searches)
        ]
        search_pass(memory, queries)  # warm-up: indexes loaded
        rows: list[dict[str, Any]] = []

        def measure(name: str, threads: int, sql: str | None) -> None:
            medians, p95s, outcomes = [], [], []
            for _ in range(args.repeats):
                if sql is None:
                    times = search_pass(memory, queries)
                else:
                    with Attacker(memory, sql, threads) as attacker:
                        times = search_pass(memory, queries)
                    outcomes += attacker.outcomes
                medians.append(statistics.median(times))
                p95s.append(p95(times))
            row = {
                "while": name,
                "recall_threads": threads,
                "search_p50_ms": round(statistics.median(medians), 2),
                "search_p95_ms": round(statistics.median(p95s), 2),
                "recall_outcomes": sorted(set(o.split(" (")[0] for o in outcomes)),
            }
            rows.append(row)
            print(orjson.dumps(row).decode(), file=sys.stderr, flush=True)

        measure("nothing (normal latency)", 0, None)
        for threads in (int(t) for t in args.attackers.split(",")):
            for name, sql in WORST.items():
                measure(name, threads, sql)
        memory.close()
    base = rows[0]["search_p50_ms"]
    for row in rows:
        row["ratio_to_normal"] = round(row["search_p50_ms"] / base, 2)
    result = {
        "machine": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "cpus": os.cpu_count(),
        },
        "attempts": args.attempts,
        "searches_per_pass": args.searches,
        "repeats": args.repeats,
        "embedder": args.embedder,
        "target": "search p50 during the worst statement <= 2x normal",
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"{'while':28} {'threads':>7} {'p50 ms':>8} {'p95 ms':>8} {'x normal':>8}")
    for row in rows:
        print(
            f"{row['while']:28} {row['recall_threads']:>7} {row['search_p50_ms']:>8} "
            f"{row['search_p95_ms']:>8} {row['ratio_to_normal']:>8}"
        )


if __name__ == "__main__":
    main()
