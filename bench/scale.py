"""Scale benchmark (issue 15, "1M attempts"): SQLite stores of 10k, 100k and 1M attempts.

    .venv/bin/python bench/scale.py --data DIR [--sizes 10000,100000,1000000] [--repeats 3]
                                    [--open-runs 3] [--serve-runs 2] [--out bench/results/scale-sqlite.json]
                                    [--merge EARLIER.json]

Each size's store is bulk-filled once through the public ``Store.append_attempts``
(bench/fill.py, the core bench's workload and seed) into ``DIR/scale-<n>/mentis.db`` and reused by
later runs (the 1M fill takes 20-60 min on 2 cores); the measurements only read it. Per size:

- open + verify: ``SqliteStore(path)`` on the closed file, median of ``--open-runs`` (bench/measure.py
  ``measure_open``, with the one-pass verifier's parts);
- search p50/p95 through ``Memory.search`` with the real model (query embedding included), 50 queries
  × ``--repeats`` passes, and the stage breakdown (bench/measure.py ``measure_search``);
- peak RSS of a real ``mentis serve`` subprocess after its preload (bench/serve_rss.py), median of
  ``--serve-runs``;
- bytes on disk per attempt (file + WAL), and per table (SQLite's ``dbstat``);
- the log-log slope of search p50 (and of its vector and lexical stages) over the sizes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from corpus import SEED, Corpus, Workload
from fill import bulk_fill
from measure import measure_open, measure_search
from mentis.providers.embed.local import DIM, MODEL_ID, LocalEmbedder
from mentis.service.access import Caller
from mentis.service.memory import Memory
from mentis.store.sqlite.store import SqliteStore
from report import code_version, machine
from serve_rss import serve_memory

TARGETS = {"open_verify_s": 5.0, "search_p50_ratio_1m_100k": 2.0, "serve_peak_rss_mb": 1500.0}


def store_path(data: Path, n: int) -> Path:
    """The filled store of ``n`` attempts, filling it first if it is not there yet."""
    path = data / f"scale-{n}" / "mentis.db"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    part = path.with_name("filling.db")
    for p in (part, Path(f"{part}-wal"), Path(f"{part}-shm")):
        p.unlink(missing_ok=True)
    print(f"[{n:,}] filling {path} (once) ...", flush=True)
    info = bulk_fill(part, n, SEED + n)
    part.rename(path)
    path.with_name("fill.json").write_text(json.dumps(info, indent=1))
    return path


def disk_usage(path: Path, n: int) -> dict[str, Any]:
    """File + WAL bytes per attempt, and the bytes of each table with its indexes (``dbstat``)."""
    size = path.stat().st_size
    wal = Path(f"{path}-wal")
    size += wal.stat().st_size if wal.exists() else 0
    out: dict[str, Any] = {"file_bytes": size, "bytes_per_attempt": size / n}
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = dict(
            conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type IN ('table','index')")
        )
        per: dict[str, int] = {}
        for name, pgsize in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            table = tables.get(name, name)
            per[table] = per.get(table, 0) + int(pgsize)
        out["bytes_per_attempt_by_table"] = {
            t: b / n for t, b in sorted(per.items(), key=lambda kv: -kv[1]) if b / n >= 1
        }
    except sqlite3.OperationalError as exc:  # SQLite built without dbstat
        out["bytes_per_attempt_by_table"] = {"unavailable": str(exc)}
    finally:
        conn.close()
    return out


def run_size(n: int, args: argparse.Namespace, real: LocalEmbedder, caller: Caller) -> dict[str, Any]:
    path = store_path(Path(args.data), n)
    out: dict[str, Any] = {"size": n, "path": str(path), "loadavg_1m_before": os.getloadavg()[0]}
    fill = path.with_name("fill.json")
    if fill.exists():
        out["fill"] = json.loads(fill.read_text())
    out["disk"] = disk_usage(path, n)
    tag = f"[{n:,}]"
    print(f"{tag} {out['disk']['bytes_per_attempt']:,.0f} bytes/attempt; open + verify ...", flush=True)

    def open_store(verify: bool = True) -> SqliteStore:
        return SqliteStore(path, DIM, verify=verify)

    parts = path if n <= args.verify_parts_max else None  # the parts re-read every row: long at 1M
    out["open"] = measure_open(open_store, args.open_runs, False, [], parts)
    print(f"{tag} open + verify {out['open']['median_s']:.2f} s; search ...", flush=True)
    queries = Workload(Corpus(SEED + n, stream=1), n).queries(50)
    store = open_store()
    try:
        t0 = time.perf_counter()
        store.warm()
        out["warm_s"] = time.perf_counter() - t0
        out["search"] = measure_search(Memory(store, real), real, caller, queries, args.repeats, False, [])
    finally:
        store.close()
    print(f"{tag} search p50 {out['search']['p50_ms']:.1f} ms; serve RSS ...", flush=True)
    texts = [q.query for q in queries[:10]]
    runs = [serve_memory(path, texts) for _ in range(args.serve_runs)]
    out["serve"] = {
        "runs": runs,
        "peak_rss_after_preload_mb_median": statistics.median(r["peak_rss_after_preload_mb"] for r in runs),
        "peak_rss_after_searches_mb_median": statistics.median(r["peak_rss_after_searches_mb"] for r in runs),
    }
    out["loadavg_1m_after"] = os.getloadavg()[0]
    print(f"{tag} serve peak RSS {out['serve']['peak_rss_after_searches_mb_median']:.0f} MB", flush=True)
    return out


def slope(sizes: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(value) on log(size): 1 is linear, 0 flat."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(sizes, values, strict=True) if v and v > 0]
    if len(pts) < 2:
        return None
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def summary(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    ns = [r["size"] for r in sizes]
    out: dict[str, Any] = {}

    def stage(r: dict[str, Any], prefix: str) -> float:
        return sum(v for k, v in r["search"]["breakdown_mean_ms"].items() if k.startswith(prefix))

    out["loglog_slope"] = {
        "search p50": slope(ns, [r["search"]["p50_ms"] for r in sizes]),
        "search p50 process-CPU": slope(ns, [r["search"].get("cpu_p50_ms", 0) for r in sizes]),
        "vector stage (mean)": slope(ns, [stage(r, "vector") for r in sizes]),
        "lexical stage (mean)": slope(ns, [stage(r, "lexical") for r in sizes]),
        "open + verify": slope(ns, [r["open"]["median_s"] for r in sizes]),
    }
    by = {r["size"]: r for r in sizes}
    if 100_000 in by and 1_000_000 in by:
        big, base = by[1_000_000], by[100_000]
        out["targets_1m"] = {
            "open_verify_s": [big["open"]["median_s"], TARGETS["open_verify_s"]],
            "search_p50_ratio_1m_100k": [
                big["search"]["p50_ms"] / base["search"]["p50_ms"],
                TARGETS["search_p50_ratio_1m_100k"],
            ],
            "serve_peak_rss_mb": [
                big["serve"]["peak_rss_after_searches_mb_median"],
                TARGETS["serve_peak_rss_mb"],
            ],
            "bytes_per_attempt": [big["disk"]["bytes_per_attempt"], None],
        }
    return out


def _span(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def print_table(report: dict[str, Any]) -> None:
    def stage(k: str) -> Any:
        return lambda r: r["search"]["breakdown_mean_ms"].get(k)

    def load(r: dict[str, Any]) -> str:
        return f"{r['loadavg_1m_before']:.1f}/{r['loadavg_1m_after']:.1f}"

    rows: list[tuple[str, Any]] = [
        ("open + verify s (median)", lambda r: r["open"]["median_s"]),
        ("open + verify s (min-max)", lambda r: _span(r["open"]["runs_s"])),
        ("open without verify s", lambda r: r["open"]["open_without_verify_median_s"]),
        ("preload (warm) s", lambda r: r["warm_s"]),
        ("search p50 ms", lambda r: r["search"]["p50_ms"]),
        ("search p50 ms (min-max of runs)", lambda r: _span(r["search"]["p50_runs_ms"])),
        ("search p95 ms", lambda r: r["search"]["p95_ms"]),
        ("search p50 process-CPU ms", lambda r: r["search"].get("cpu_p50_ms")),
        *[(f"  {k}"[:44], stage(k)) for k in report["sizes"][-1]["search"]["breakdown_mean_ms"]],
        ("  BM25 rows scored (median)", lambda r: r["search"].get("lexical_scored_rows_median")),
        ("serve peak RSS MB after preload", lambda r: r["serve"]["peak_rss_after_preload_mb_median"]),
        ("serve peak RSS MB after searches", lambda r: r["serve"]["peak_rss_after_searches_mb_median"]),
        ("disk bytes per attempt", lambda r: r["disk"]["bytes_per_attempt"]),
        ("load average before / after", load),
    ]
    sizes = report["sizes"]
    print(f"{'metric':<44}" + "".join(f"{r['size']:>16,}" for r in sizes))
    for label, get in rows:
        cells = ""
        for r in sizes:
            try:
                v = get(r)
            except (KeyError, TypeError):
                v = None
            cells += f"{'-' if v is None else (format(v, ',.2f') if isinstance(v, float) else str(v)):>16}"
        print(f"{label:<44}{cells}")
    print(json.dumps(report["summary"], indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", required=True, help="directory holding the filled stores (kept for reuse)")
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--open-runs", type=int, default=3)
    ap.add_argument("--serve-runs", type=int, default=2)
    ap.add_argument("--out", default="bench/results/scale-sqlite.json")
    ap.add_argument(
        "--verify-parts-max", type=int, default=100_000, help="time the verifier's parts up to this size"
    )
    ap.add_argument("--merge", help="an earlier run's JSON whose other sizes join this report (marked so)")
    args = ap.parse_args()
    for name in ("repeats", "open_runs", "serve_runs"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1 (each is a median over its runs)")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    Path(args.data).mkdir(parents=True, exist_ok=True, mode=0o700)
    started = time.perf_counter()
    real = LocalEmbedder.load()
    caller = Caller(agent_id="bench-agent", session_id="bench")
    report: dict[str, Any] = {
        "machine": machine(),
        "model": MODEL_ID,
        "code": code_version(),
        "config": vars(args),
        "targets": TARGETS,
        "sizes": [],
    }
    for n in sizes:
        report["sizes"].append(run_size(n, args, real, caller))
    if args.merge:
        earlier = json.loads(Path(args.merge).read_text())
        for r in earlier["sizes"]:
            if r["size"] not in sizes:
                report["sizes"].append({**r, "from_run": {"file": args.merge, "code": earlier["code"]}})
        report["sizes"].sort(key=lambda r: r["size"])
    report["summary"] = summary(report["sizes"])
    report["wall_seconds"] = time.perf_counter() - started
    print_table(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=float))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
