"""Core latency benchmark for the SQLite store: record_attempt, search, open + verify.

    .venv/bin/python bench/core.py [--sizes 1000,10000,100000] [--repeats 3]
                                   [--out bench/results/core-sqlite.json] [--profile]
    .venv/bin/python bench/core.py --backend postgres [--sizes 10000,100000]

``--backend postgres`` starts a throwaway PostgreSQL + pgvector cluster (bench/pg_cluster.py,
server defaults, fsync on) and measures the same phases there, plus 8 concurrent writers, beside
the SQLite store measured in the same run (``--no-sqlite`` skips it).

For each size a fresh store is filled in bulk (bench/fill.py: ``Store.append_attempts``, many
attempts per transaction, random unit vectors instead of the model: the real model embeds ~220
texts/s, 100k would take ~8 min). On top of it the real path is measured through ``Memory`` with
the real local model (bench/measure.py). The workload is bench/corpus.py's; bench/report.py prints
and writes the results; bench/pg_harness.py runs the PostgreSQL side. See bench/README.md.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from corpus import SEED, Corpus, Workload
from fill import bulk_fill, pg_bulk_fill
from measure import (
    measure_embed_variants,
    measure_open,
    measure_records,
    measure_search,
    measure_search_after_record,
)
from mentis.providers.embed.local import DIM, MODEL_ID, LocalEmbedder
from mentis.service.access import Caller
from mentis.service.memory import Memory
from mentis.store.sqlite.store import SqliteStore
from pg_harness import WRITERS, measure_writers, run_postgres
from report import TARGETS, code_version, machine, print_report, write_report


def run_size(
    backend: str,
    n: int,
    cluster: Any,
    *,
    args: argparse.Namespace,
    real: LocalEmbedder,
    caller: Caller,
    profiles: list[str],
    tmp: Path,
) -> dict[str, Any]:
    """Fill a fresh store of ``n`` attempts and measure search, record, open + verify (and, with
    ``args.writers``, concurrent writers) on it."""
    load_before = os.getloadavg()[0]
    tag = f"[{backend} {n:,}]"
    print(f"{tag} filling ... (load average {load_before:.2f})", flush=True)
    if backend == "sqlite":
        path = tmp / f"core-{n}.sqlite"
        fill = bulk_fill(path, n, SEED + n)

        def open_store(verify: bool = True) -> Any:
            return SqliteStore(path, DIM, verify=verify)
    else:
        from mentis.store.postgres.store import PostgresStore

        url = cluster.new_database(f"core_{n}")
        fill = pg_bulk_fill(url, n, SEED + n)

        def open_store(verify: bool = True) -> Any:
            return PostgresStore(url, DIM, verify=verify)

    rate, mb = fill["attempts_per_s"], fill["file_mb"]
    print(f"{tag} filled in {fill['seconds']:.1f} s ({rate:,.0f}/s, {mb:.0f} MB)", flush=True)
    # Queries and new records come from the same vocabulary/distribution as the fill.
    wl = Workload(Corpus(SEED + n, stream=1), n)
    queries = wl.queries(50)
    store = open_store()
    mark = len(profiles)
    try:
        mem = Memory(store, real)
        print(f"{tag} search ...", flush=True)
        search = measure_search(mem, real, caller, queries, args.repeats, args.profile, profiles)
        print(f"{tag} record ...", flush=True)
        record = measure_records(
            store, real, wl, caller, args.repeats, args.records, args.records_fixed, args.profile, profiles
        )
        after = measure_search_after_record(store, real, wl, caller, queries) if backend == "sqlite" else None
        writers = None
        if args.writers:
            print(f"{tag} {WRITERS} concurrent writers ...", flush=True)
            shared = store if backend == "postgres" else None
            writers = measure_writers(lambda: open_store(False), wl, caller, args.repeats, shared)
    finally:
        store.close()
    print(f"{tag} open + verify ...", flush=True)
    opened = measure_open(
        open_store, args.open_runs, args.profile, profiles, path if backend == "sqlite" else None
    )
    out = {
        "backend": backend,
        "size": n,
        "fill": fill,
        "search": search,
        "record": record,
        "open": opened,
        "loadavg_1m_before": load_before,
        "loadavg_1m_after": os.getloadavg()[0],
    }
    if after is not None:
        out["search_after_record"] = after
    if writers is not None:
        out["writers"] = writers
    if len(profiles) > mark:
        profiles.insert(mark, f"################ {tag}\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement (median reported)")
    ap.add_argument("--records", type=int, default=40, help="real-model records per run")
    ap.add_argument("--records-fixed", type=int, default=100, help="no-embedding records per run")
    ap.add_argument("--open-runs", type=int, default=5)
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--no-sqlite", action="store_true", help="postgres: skip the SQLite side-by-side run")
    ap.add_argument("--out", default=None, help="default bench/results/core-<backend>.json")
    ap.add_argument("--profile", action="store_true", help="cProfile the hot paths at each size")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.out = args.out or f"bench/results/core-{args.backend}.json"
    args.writers = args.backend == "postgres"

    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="mentis-bench-"))
    t0 = time.perf_counter()
    real = LocalEmbedder.load()
    report: dict[str, Any] = {
        "machine": machine(),
        "model": MODEL_ID,
        "model_load_s": time.perf_counter() - t0,
        "targets": TARGETS,
        "temp_dir": str(tmp),
        "config": vars(args),
        "code": code_version(),
        "sizes": [],
    }
    caller = Caller(agent_id="bench-agent", session_id="bench")
    profiles: list[str] = []
    run = functools.partial(run_size, args=args, real=real, caller=caller, profiles=profiles, tmp=tmp)
    try:
        if args.backend == "postgres":
            run_postgres(args, sizes, report, run)
        else:
            report["sizes"] = [run("sqlite", n, None) for n in sizes]
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.backend == "sqlite":
        print("embedding variants ...", flush=True)
        report["embed_variants"] = measure_embed_variants(
            real, Workload(Corpus(SEED, stream=7), 1000), max(1, args.repeats)
        )
    report["wall_seconds"] = time.perf_counter() - started
    print_report(report)
    write_report(report, Path(args.out), profiles)


if __name__ == "__main__":
    main()
