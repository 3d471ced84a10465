#!/usr/bin/env python
"""The vector stage at scale with and without the sign-bit prefilter, on one loaded store (issue 15).

    .venv/bin/python bench/prefilter_scale.py --data /work/scale-data --size 1000000 [--passes 3]
                                              [--out bench/results/prefilter-scale.json]

Opens ``DIR/scale-<n>/mentis.db`` (filled by bench/scale.py; only read here, verify skipped: it
is timed by scale.py), loads the in-process indexes as the shipped preload does (timed: process
CPU and wall), then per query runs the store's vector stage (``store.vector``, limit 200 as search
asks: refresh check + candidates + exact float32 re-score from SQLite) alternately with the
prefilter on and off (off: the int8 scan of every row, the code before it). Reported: process CPU
ms per query (median, mean, min-max; CPU, not wall, because the machine is shared), the peak RSS
of this process, and the recall@10 of the prefiltered results against the full scan's on these
vectors (the bench's store holds random unit vectors, where sign bits say the least; real
embeddings: bench/prefilter_recall.py). The queries are the scale bench's 50 workload queries,
embedded with the real model; every fourth names a repository.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from corpus import SEED, Corpus, Workload
from mentis.providers.embed.local import DIM, LocalEmbedder
from mentis.retrieval import CANDIDATES
from mentis.store.sqlite.store import SqliteStore
from report import code_version, machine

OFF = 1 << 62  # a prefilter_min_rows no index reaches: the full int8 scan


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_ms(fn: Any) -> tuple[Any, float]:
    t0 = time.process_time()
    out = fn()
    return out, (time.process_time() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--force", action="store_true", help="int8 and the prefilter at any size")
    ap.add_argument("--out")
    args = ap.parse_args()
    path = Path(args.data) / f"scale-{args.size}" / "mentis.db"
    embedder = LocalEmbedder.load()
    queries = Workload(Corpus(SEED + args.size, stream=1), args.size).queries(50)
    qvecs = embedder.embed([q.query for q in queries])
    scopes = [None if q.repository is None else [q.repository] for q in queries]
    store = SqliteStore(path, DIM, verify=False)
    out: dict[str, Any] = {
        "size": args.size,
        "forced": args.force,
        "code": code_version(),
        "machine": machine(),
    }
    try:
        index = store._indexes.vectors["vectors"]
        if args.force:
            index.quantize_min_rows = index.prefilter_min_rows = 0
        wanted = index.prefilter_min_rows
        t0, c0 = time.perf_counter(), time.process_time()
        store.warm()
        out["preload_s"] = time.perf_counter() - t0
        out["preload_cpu_s"] = time.process_time() - c0
        out["peak_rss_after_preload_mb"] = peak_rss_mb()
        out["rows"] = len(index)
        out["bits_mb"] = index._bits.nbytes / 2**20
        times: dict[str, list[float]] = {"prefilter": [], "full_int8": []}
        hits = total = 0
        for _ in range(args.passes):
            for q, scope in zip(qvecs, scopes, strict=True):
                index.prefilter_min_rows = wanted
                got, ms = cpu_ms(lambda q=q, scope=scope: store.vector(q, scope, CANDIDATES))
                times["prefilter"].append(ms)
                index.prefilter_min_rows = OFF
                want, ms = cpu_ms(lambda q=q, scope=scope: store.vector(q, scope, CANDIDATES))
                times["full_int8"].append(ms)
                top = {r for r, _ in want[:10]}
                hits += len(top & {r for r, _ in got[:10]})
                total += len(top)
        index.prefilter_min_rows = wanted
        for name, values in times.items():
            out[f"vector_cpu_ms_{name}"] = {
                "median": statistics.median(values),
                "mean": statistics.fmean(values),
                "min": min(values),
                "max": max(values),
            }
        out["recall_at_10_vs_exact_random_vectors"] = hits / max(total, 1)
        out["queries"] = len(queries) * args.passes
    finally:
        store.close()
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
