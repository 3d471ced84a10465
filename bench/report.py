"""What a run reports: the machine and commit measured, the SQLite table with its targets, and the
JSON (plus cProfile tops with ``--profile``) written to ``--out``."""

from __future__ import annotations

import contextlib
import os
import platform
import sqlite3
import subprocess
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
    import onnxruntime  # type: ignore[import-untyped, unused-ignore]

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

Path_ = tuple[str, ...]
ROWS: list[tuple[str, Path_, str, str | None]] = [  # label, key path in a size's results, format, target
    ("fill seconds (bulk)", ("fill", "seconds"), ".1f", None),
    ("load average (1 min) before the size", ("loadavg_1m_before",), ".2f", None),
    ("load average (1 min) after the size", ("loadavg_1m_after",), ".2f", None),
    ("search p50 ms (real model, incl. embed)", ("search", "p50_ms"), ".1f", "search_p50_ms"),
    ("search p95 ms", ("search", "p95_ms"), ".1f", None),
    ("search p50 process-CPU ms", ("search", "cpu_p50_ms"), ".1f", None),
    ("search cold first (loads vector index) ms", ("search", "cold_first_ms"), ".1f", None),
    ("search right after a record p50 ms", ("search_after_record", "search_p50_ms"), ".1f", None),
    ("record p50 ms (real model)", ("record", "real_model", "p50_ms"), ".1f", "record_p50_ms"),
    ("record p95 ms (real model)", ("record", "real_model", "p95_ms"), ".1f", None),
    ("record p50 process-CPU ms (real model)", ("record", "real_model", "cpu_p50_ms"), ".1f", None),
    ("  attempt text tokens (median)", ("record", "attempt_text_tokens_median"), ".0f", None),
    ("record p50 ms (no embedding)", ("record", "no_embedding", "p50_ms"), ".2f", "record_p50_ms"),
    ("record p95 ms (no embedding)", ("record", "no_embedding", "p95_ms"), ".2f", None),
    ("open+verify median s", ("open", "median_s"), ".3f", None),
    ("open+verify entries/s", ("open", "entries_per_s"), ",.0f", "verify_entries_per_s"),
    *[
        (f"8 writers, {mode}: {what}", ("writers", mode, key), fmt, None)
        for mode in ("1 repository", "8 repositories")
        for what, key, fmt in (("writes/s", "writes_per_s", ",.0f"), ("p50 ms", "p50_ms", ".1f"))
    ],
]
SECTIONS: list[tuple[str, Path_, list[tuple[str, Path_, str, str | None]]]] = [
    ("search stage breakdown, mean ms per query:", ("search", "breakdown_mean_ms"), [
        ("  raw matmul (N x 384 @ q)", ("search", "vector_raw_ms", "matmul"), ".2f", None),
        ("  query tokens (median)", ("search", "query_tokens_median"), ".0f", None),
        ("  rows BM25 scores per query (median)", ("search", "lexical_scored_rows_median"), ",.0f", None),
    ]),
    ("record breakdown (real model), mean ms:", ("record", "breakdown_real_mean_ms"), [
        ("  disk fsync p50 ms (probe)", ("record", "disk_fsync_p50_ms"), ".2f", None),
    ]),
    ("open+verify breakdown, median s (SQLite: the one-pass verifier's parts, which open uses below\n"
     "  4,000 entries or when the parallel block scan has any doubt):", ("open", "verify_parts_median_s"), [
        ("  open without verify", ("open", "open_without_verify_median_s"), ".3f", None),
    ]),
]  # fmt: skip
TARGET_TEXT = {
    "search_p50_ms": f"<= {TARGETS['search_p50_ms']:g} ms @100k",
    "record_p50_ms": f"<= {TARGETS['record_p50_ms']:g} ms",
    "verify_entries_per_s": f">= {TARGETS['verify_entries_per_s']:,.0f}/s",
}


def meets(target: str, v: float) -> bool:
    return v >= TARGETS[target] if target.endswith("_per_s") else v <= TARGETS[target]


def dig(r: dict[str, Any], path: Path_) -> Any:
    """The value at ``path`` in one size's results, or None where that run did not measure it."""
    for key in path:
        if not isinstance(r, dict) or key not in r:
            return None
        r = r[key]
    return r


def print_report(report: dict[str, Any]) -> None:
    """One column per (backend, size); rows no column measured are left out; targets on SQLite."""
    m, cols, w = report["machine"], report["sizes"], 15
    print()
    print(
        f"machine: {m['cpu']}, {m['cores']} cores; python {m['python']}, numpy {m['numpy']}, "
        f"onnxruntime {m['onnxruntime']}, sqlite {m['sqlite']}"
    )
    if "postgres_settings" in report:
        print(f"postgres: {report['postgres_settings']}")
    print("fill: bulk (store.append_attempts, 2k attempts/txn, random unit vectors); record/search on top")
    print(f"with the real model. Load average > {m['cores']} (cores) = contended.")
    hdr = f"{'metric':<46}" + "".join(f"{r['backend'][:6] + ' ' + format(r['size'], ','):>{w}}" for r in cols)
    print(hdr + "   target")
    print("-" * (len(hdr) + 20))

    def row(label: str, path: Path_, fmt: str, target: str | None) -> None:
        values = [dig(r, path) for r in cols]
        if all(v is None for v in values):
            return
        cells = ""
        for r, v in zip(cols, values, strict=True):
            ok = ""
            if v is not None and target and r["backend"] == "sqlite":
                ok = " ✓" if meets(target, v) else " ✗"
            cells += f"{'-' if v is None else format(v, fmt) + ok:>{w}}"
        print(f"{label:<46}{cells}   {TARGET_TEXT.get(target or '', '')}")

    for spec in ROWS:
        row(*spec)
    for title, path, extra in SECTIONS:
        print(title)
        stages = list(dict.fromkeys(k for r in cols for k in dig(r, path) or {}))
        for st in stages:
            row(f"  {st}"[:46], (*path, st), ".3f" if path[0] == "open" else ".2f", None)
        for spec in extra:
            row(*spec)
    if report.get("embed_variants"):
        print("embedding one text (p50 ms), shipped session vs. onnxruntime thread settings:")
        for name, res in report["embed_variants"].items():
            print(f"  {name:<42} attempt {res['attempt_p50_ms']:6.1f}   query {res['query_p50_ms']:6.1f}")
    big = [r for r in cols if r["backend"] == "sqlite"][-1:]
    for label, path, _, target in ROWS if big else []:
        if target:
            ok = meets(target, dig(big[0], path))
            print(f"  {'PASS' if ok else 'FAIL'}  {label} @ largest size ({big[0]['size']:,})")
    print(f"total wall time {report['wall_seconds']:.0f} s")


def write_report(report: dict[str, Any], out: Path, profiles: list[str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    print(f"wrote {out}")
    if profiles:
        prof_out = out.with_name(out.stem + "-profile.txt")
        prof_out.write_text("\n".join(profiles))
        print(f"wrote {prof_out}")
