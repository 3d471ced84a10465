"""What a run reports: the machine and commit measured, the SQLite table with its targets, and the
JSON (plus cProfile tops with ``--profile``) written to ``--out``."""

from __future__ import annotations

import contextlib
import os
import platform
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson

TARGETS = {
    "search_p50_ms": 25.0,  # at 100k, including query embedding
    "record_p50_ms": 15.0,
    "verify_entries_per_s": 300_000.0,
}


def code_version() -> dict[str, Any]:
    """The commit measured and whether src/ had uncommitted changes (read-only git calls)."""
    root = Path(__file__).resolve().parent.parent

    def git(*a: str) -> str:
        try:
            return subprocess.run(
                ["git", *a], cwd=root, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "src_dirty": bool(git("status", "--porcelain", "--", "src")),
    }


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    import onnxruntime

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnxruntime": onnxruntime.__version__,
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
    }


# ---------------------------------------------------------------- report


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    print()
    print(
        f"machine: {m['cpu']}, {m['cores']} cores; python {m['python']}, numpy {m['numpy']}, "
        f"onnxruntime {m['onnxruntime']}, sqlite {m['sqlite']}"
    )
    print(
        "fill: bulk (store.append_attempts, 2k attempts/txn, random unit vectors); "
        "record/search measured on top with the real model"
    )
    print()
    sizes = [r["size"] for r in report["sizes"]]
    w = 14
    hdr = f"{'metric':<44}" + "".join(f"{s:>{w},}" for s in sizes) + "   target"
    print(hdr)
    print("-" * len(hdr))

    def row(
        label: str,
        get: Callable[[dict[str, Any]], float],
        fmt: str,
        target: str = "",
        ok: Callable[[float], bool] | None = None,
    ) -> None:
        cells = ""
        for r in report["sizes"]:
            v = get(r)
            mark = ""
            if ok is not None:
                mark = " ✓" if ok(v) else " ✗"
            cells += f"{format(v, fmt) + mark:>{w}}"
        print(f"{label:<44}{cells}   {target}")

    t = TARGETS
    row("fill seconds (bulk)", lambda r: r["fill"]["seconds"], ".1f")
    row(
        "load average (1 min) after the size",
        lambda r: r["loadavg_1m_after"],
        ".2f",
        f"(cores: {m['cores']}; > cores = contended)",
    )
    row(
        "search p50 ms (real model, incl. embed)",
        lambda r: r["search"]["p50_ms"],
        ".1f",
        f"<= {t['search_p50_ms']:g} ms @100k",
        lambda v: v <= t["search_p50_ms"],
    )
    row("search p95 ms", lambda r: r["search"]["p95_ms"], ".1f")
    row("search p50 process-CPU ms", lambda r: r["search"]["cpu_p50_ms"], ".1f")
    row("search cold first (loads vector index) ms", lambda r: r["search"]["cold_first_ms"], ".1f")
    row("search right after a record p50 ms", lambda r: r["search_after_record"]["search_p50_ms"], ".1f")
    row(
        "record p50 ms (real model)",
        lambda r: r["record"]["real_model"]["p50_ms"],
        ".1f",
        f"<= {t['record_p50_ms']:g} ms",
        lambda v: v <= t["record_p50_ms"],
    )
    row("record p95 ms (real model)", lambda r: r["record"]["real_model"]["p95_ms"], ".1f")
    row("record p50 process-CPU ms (real model)", lambda r: r["record"]["real_model"]["cpu_p50_ms"], ".1f")
    row("  attempt text tokens (median)", lambda r: r["record"]["attempt_text_tokens_median"], ".0f")
    row(
        "record p50 ms (no embedding)",
        lambda r: r["record"]["no_embedding"]["p50_ms"],
        ".1f",
        f"<= {t['record_p50_ms']:g} ms",
        lambda v: v <= t["record_p50_ms"],
    )
    row("record p95 ms (no embedding)", lambda r: r["record"]["no_embedding"]["p95_ms"], ".1f")
    row("open+verify median s", lambda r: r["open"]["median_s"], ".3f")
    row(
        "open+verify entries/s",
        lambda r: r["open"]["entries_per_s"],
        ",.0f",
        f">= {t['verify_entries_per_s']:,.0f}/s",
        lambda v: v >= t["verify_entries_per_s"],
    )
    print()
    print("search stage breakdown, mean ms per query:")
    stages = list(report["sizes"][-1]["search"]["breakdown_mean_ms"])
    for st in stages:
        row(f"  {st}", lambda r, st=st: r["search"]["breakdown_mean_ms"].get(st, 0.0), ".2f")
    row("  raw matmul (N x 384 @ q)", lambda r: r["search"]["vector_raw_ms"]["matmul"], ".2f")
    row("  query tokens (median)", lambda r: r["search"].get("query_tokens_median", 0), ".0f")
    row("  rows BM25 scores per query (median)", lambda r: r["search"]["lexical_scored_rows_median"], ",.0f")
    print("record breakdown (real model), mean ms:")
    for st in report["sizes"][-1]["record"]["breakdown_real_mean_ms"]:
        row(f"  {st}", lambda r, st=st: r["record"]["breakdown_real_mean_ms"][st], ".2f")
    row("  disk fsync p50 ms (probe)", lambda r: r["record"]["disk_fsync_p50_ms"], ".2f")
    print("open+verify breakdown, median s (parts: the one-pass verifier, which open uses below")
    print("  4,000 entries or when the parallel block scan has any doubt):")
    row("  open without verify", lambda r: r["open"]["open_without_verify_median_s"], ".3f")
    for st in report["sizes"][-1]["open"]["verify_parts_median_s"]:
        row(f"  {st}", lambda r, st=st: r["open"]["verify_parts_median_s"][st], ".3f")
    print()
    print("embedding one text (p50 ms), shipped session vs. onnxruntime thread settings:")
    for name, res in report.get("embed_variants", {}).items():
        print(f"  {name:<42} attempt {res['attempt_p50_ms']:6.1f}   query {res['query_p50_ms']:6.1f}")
    print()
    big = report["sizes"][-1]
    checks = [
        ("search p50 @ largest size", big["search"]["p50_ms"] <= t["search_p50_ms"]),
        ("record p50 (real model) @ largest", big["record"]["real_model"]["p50_ms"] <= t["record_p50_ms"]),
        (
            "record p50 (no embedding) @ largest",
            big["record"]["no_embedding"]["p50_ms"] <= t["record_p50_ms"],
        ),
        ("open+verify entries/s @ largest", big["open"]["entries_per_s"] >= t["verify_entries_per_s"]),
    ]
    for name, ok in checks:
        print(f"  {verdict(ok)}  {name} ({big['size']:,})")
    print(f"total wall time {report['wall_seconds']:.0f} s")


def write_report(report: dict[str, Any], out: Path, profiles: list[str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    print(f"wrote {out}")
    if profiles:
        prof_out = out.with_name(out.stem + "-profile.txt")
        prof_out.write_text("\n".join(profiles))
        print(f"wrote {prof_out}")
