#!/usr/bin/env python
"""The vector stage at scale with and without the inverted file, on one loaded store (issue 15).

    .venv/bin/python bench/ivf_scale.py --data /work/scale-data --size 1000000 [--passes 3]
                                        [--out bench/results/ivf-scale.json]

Opens ``DIR/scale-<n>/mentis.db`` (filled by bench/scale.py; only read here, verify skipped: it
is timed by scale.py), loads the in-process indexes as the shipped preload does, but with the
inverted file held back, then trains it (so the preload's cost before and after is measured on
the same load), and then, per query, runs the store's vector stage (``store.vector``, limit 200 as
search asks: refresh check + candidates + exact float32 re-score from SQLite) alternately with the
inverted file on and off (off: the int8 scan of every row, the code before it). Reported: process
CPU ms per query (median and mean; CPU, not wall, because the machine is shared), the preload's
parts, the peak RSS of this process, and the recall@10 of the inverted file's results against the
exact scan's on these vectors (the bench's store holds random unit vectors: no cluster structure,
the worst case for an inverted file; bench/ivf_recall.py measures real embeddings). The queries
are the scale bench's 50 workload queries, embedded with the real model; every fourth names a
repository.
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
from mentis.embed.local import DIM, LocalEmbedder
from mentis.retrieval import CANDIDATES
from mentis.store.sqlite import SqliteStore
from report import code_version, machine

OFF = 1 << 62  # an ivf_min_rows no index reaches: the full int8 scan


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
    ap.add_argument("--force", action="store_true", help="int8 and the inverted file at any size")
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
        index = store._indexes["vectors"]
        if args.force:
            index.quantize_min_rows = index.ivf_min_rows = 0
        wanted = index.ivf_min_rows
        index.ivf_min_rows = OFF
        t0, c0 = time.perf_counter(), time.process_time()
        store.warm()  # the preload as before: the inverted file held back
        out["preload_without_ivf_s"] = time.perf_counter() - t0
        out["preload_without_ivf_cpu_s"] = time.process_time() - c0
        out["peak_rss_after_preload_without_ivf_mb"] = peak_rss_mb()
        index.ivf_min_rows = wanted
        t0, c0 = time.perf_counter(), time.process_time()
        index.prepare()
        out["ivf_train_and_assign_s"] = time.perf_counter() - t0
        out["ivf_train_and_assign_cpu_s"] = time.process_time() - c0
        out["peak_rss_after_ivf_mb"] = peak_rss_mb()
        ivf = index._ivf
        out["ivf"] = None if ivf is None else {"lists": ivf.lists, "probes": ivf.probes, "rows": len(index)}
        times: dict[str, list[float]] = {"ivf": [], "exact_int8": []}
        hits = total = 0
        for _ in range(args.passes):
            for q, scope in zip(qvecs, scopes, strict=True):
                index.ivf_min_rows = wanted
                got, ms = cpu_ms(lambda q=q, scope=scope: store.vector(q, scope, CANDIDATES))
                times["ivf"].append(ms)
                index.ivf_min_rows = OFF
                want, ms = cpu_ms(lambda q=q, scope=scope: store.vector(q, scope, CANDIDATES))
                times["exact_int8"].append(ms)
                top = {r for r, _ in want[:10]}
                hits += len(top & {r for r, _ in got[:10]})
                total += len(top)
        index.ivf_min_rows = wanted
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
