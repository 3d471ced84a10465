"""Search latency right after a forget, against normal search latency (issue: "forget without a stall").

A store of N attempts is bulk-filled (bench/fill.py: real chains, random unit vectors). One
``Memory`` (the searcher, standing for an agent's process) has its indexes loaded; another store on
the same file (the forgetter, another process) forgets an attempt before each measured search, so
every measured search is the searcher's first after a forget. Both are compared with searches that
follow no forget. The query embedding is the real model's, as in ``make bench``.

    .venv/bin/python bench/forget.py --size 100000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from corpus import SEED, Corpus, FixedEmbedder, Workload
from fill import bulk_fill
from mentis.api.attempts import ForgetInput
from mentis.api.common import parse
from mentis.providers.embed.local import DIM, LocalEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite.store import SqliteStore
from report import machine


def pct(samples: list[float], q: float) -> float:
    return float(np.percentile(samples, q))


def one_run(path: Path, real: LocalEmbedder, n_queries: int, seed: int) -> dict[str, Any]:
    caller = Caller(agent_id="bench")
    searcher = Memory(SqliteStore(path, DIM), real)
    forgetter = SqliteStore(path, DIM, verify=False)
    forget_mem = Memory(forgetter, FixedEmbedder())
    try:
        queries = Workload(Corpus(seed, stream=1), 1000).queries(n_queries)
        for q in queries[:5]:
            searcher.search(caller, q)  # load the indexes
        reloads = searcher.store.reloads
        victims = [
            (r, a) for r, _t, a in forgetter.attempt_keys(list(range(1, 2 * n_queries * 10, 7))).values()
        ][:n_queries]
        normal, after = [], []
        for q, (repo, attempt_id) in zip(queries, victims, strict=False):
            t0 = time.perf_counter()
            searcher.search(caller, q)
            normal.append((time.perf_counter() - t0) * 1000)
            forget_mem.forget_attempt(
                caller, parse(ForgetInput, {"repository": repo, "attempt_id": attempt_id})
            )
            t0 = time.perf_counter()
            searcher.search(caller, q)
            after.append((time.perf_counter() - t0) * 1000)
        return {
            "forgets": len(after),
            "normal_p50_ms": pct(normal, 50),
            "normal_p99_ms": pct(normal, 99),
            "after_forget_p50_ms": pct(after, 50),
            "after_forget_p99_ms": pct(after, 99),
            "full_reloads_caused": searcher.store.reloads - reloads,
        }
    finally:
        searcher.close()
        forgetter.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--out", default="bench/results/forget.json")
    args = ap.parse_args()
    real = LocalEmbedder.load()
    runs = []
    with tempfile.TemporaryDirectory(prefix="mentis-forget-") as tmp:
        path = Path(tmp) / "forget.db"
        print(f"filling {args.size:,} attempts ...", file=sys.stderr, flush=True)
        fill = bulk_fill(path, args.size, SEED + args.size)
        for i in range(args.repeats):
            runs.append(one_run(path, real, args.queries, SEED + i))
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    keys = [k for k in runs[0] if k.endswith("_ms")]
    median = {k: float(np.median([r[k] for r in runs])) for k in keys}
    ratio = median["after_forget_p99_ms"] / median["normal_p99_ms"]
    report = {
        "machine": machine(),
        "loadavg_1m": os.getloadavg()[0],
        "size": args.size,
        "fill_seconds": fill["seconds"],
        "runs": runs,
        "median": median,
        "p99_ratio_after_forget": ratio,
        "target": "search p99 right after a forget <= 2x normal p99 at 100k",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(
        f"{args.size:,} attempts, medians of {args.repeats} runs: search p50/p99 normal "
        f"{median['normal_p50_ms']:.1f}/{median['normal_p99_ms']:.1f} ms, right after a forget "
        f"{median['after_forget_p50_ms']:.1f}/{median['after_forget_p99_ms']:.1f} ms "
        f"(p99 ratio {ratio:.2f}, target <= 2)"
    )


if __name__ == "__main__":
    main()
