"""The PostgreSQL side of ``core.py --backend postgres``: a throwaway cluster (bench/pg_cluster.py,
server defaults, fsync on) holding one fresh database per size, open + verify on the server, 8
concurrent writers, and the side-by-side table of both backends."""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from corpus import REPOS, FixedEmbedder, Workload
from measure import ms, pct
from mentis.service.access import Caller
from mentis.service.memory import Memory

RunSize = Callable[[str, int, Any], dict[str, Any]]
"""``core.run_size`` bound to its run: (backend, size, cluster or None) -> that size's results."""


WRITERS = 8
WRITES_PER_WRITER = 25


def measure_writers(
    stores: Callable[[], Any], wl: Workload, caller: Caller, repeats: int, shared: Any | None
) -> dict[str, Any]:
    """8 writer threads recording (no embedding) into one repository vs. one repository each.

    ``shared``: one store used by every thread (PostgreSQL: its pool of 8 connections); None:
    each thread opens its own store with ``stores()`` (SQLite: its own connection, as 8
    processes would; the threads share the GIL, so this is a floor on what processes reach)."""
    out: dict[str, Any] = {}
    for mode in ("1 repository", "8 repositories"):
        per_run = []
        for _ in range(repeats):
            inputs = []
            for i in range(WRITERS):
                repo = REPOS[0] if mode == "1 repository" else REPOS[i]
                inputs.append(
                    [
                        wl.record_input().model_copy(update={"repository": repo})
                        for _ in range(WRITES_PER_WRITER)
                    ]
                )
            own = [shared or stores() for _ in range(WRITERS)]
            lat: list[list[float]] = [[] for _ in range(WRITERS)]
            errors: list[BaseException] = []
            barrier = threading.Barrier(WRITERS + 1)

            def work(i: int, ctx: tuple[Any, ...] = (lat, own, inputs, errors, barrier)) -> None:
                lat, own, inputs, errors, barrier = ctx
                mem = Memory(own[i], FixedEmbedder())
                barrier.wait()
                try:
                    for req in inputs[i]:
                        t0 = time.perf_counter()
                        mem.record_attempt(caller, req)
                        lat[i].append(ms(t0))
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=work, args=(i,)) for i in range(WRITERS)]
            for t in threads:
                t.start()
            barrier.wait()
            t0 = time.perf_counter()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            if shared is None:
                for s in own:
                    s.close()
            if errors:
                raise errors[0]
            flat = [x for r in lat for x in r]
            per_run.append(
                {"writes_per_s": len(flat) / wall, "p50_ms": pct(flat, 50), "p95_ms": pct(flat, 95)}
            )
        out[mode] = {
            "writes_per_s": statistics.median(r["writes_per_s"] for r in per_run),
            "p50_ms": statistics.median(r["p50_ms"] for r in per_run),
            "p95_ms": statistics.median(r["p95_ms"] for r in per_run),
            "runs": per_run,
        }
    out["method"] = (
        f"{WRITERS} threads x {WRITES_PER_WRITER} Memory.record_attempt each (FixedEmbedder), "
        "started on a barrier; median over repeats"
    )
    return out


def run_postgres(
    args: argparse.Namespace, sizes: list[int], report: dict[str, Any], run_size: RunSize
) -> None:
    """Each size on a fresh database of one throwaway cluster, beside SQLite unless ``--no-sqlite``."""
    from pg_cluster import throwaway_cluster

    with throwaway_cluster() as cluster:
        report["postgres_settings"] = cluster.settings()
        print(f"postgres cluster: {report['postgres_settings']}", flush=True)
        for n in sizes:
            if not args.no_sqlite:
                report["sizes"].append(run_size("sqlite", n, None))
            report["sizes"].append(run_size("postgres", n, cluster))
