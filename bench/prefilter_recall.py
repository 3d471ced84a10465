#!/usr/bin/env python
"""Recall of the sign-bit prefilter's results against the exact scan, on real embeddings.

    .venv/bin/python bench/prefilter_recall.py [--docs 8000] [--out bench/results/prefilter-recall.json]

The vectors are the real model's (all-MiniLM-L6-v2), from two sources, each one "repository":

- ``dev``: every vector the dev-set evaluation cached under ``bench/.cache/embeddings`` (run
  ``bench/eval.py all`` first): SeaMonkey reports, LoCoMo turns, Python FAQ answers and their
  queries;
- ``pydocs``: ``--docs`` paragraphs of the Python documentation's reStructuredText sources (Debian's
  ``python3.11-doc``, fetched into the cache by the FAQ set), every paragraph of at least 8 words,
  taken evenly across the files in path order, embedded once (cached under ``ivf-recall/``).

A seeded 300 of the pooled rows are held out as queries; the index holds the rest. For each size
(the first n rows of a seeded shuffle, doubling up to all of them) and each probe share, the
``VectorIndex`` with int8 and the prefilter forced on (``quantize_min_rows = prefilter_min_rows = 0``)
answers limit k with the exact float32 re-score, as search does, and is compared with the exact
float32 scan's top k: recall@k = shared rows / k, over the queries, for k = 10 and 50, unscoped and
scoped to the query's own repository. The rows kept follow the limit (``KEEP_PER_RESULT`` × k), and
that ratio is what carries across sizes: each size runs 4, 8, 16 and 32 rows kept per result with
no share, then the shipped rule (1% of the rows, at least 64 per result); the share of rows kept
is reported beside it. (``bench/results/ivf-recall-kmeans.json`` is the same kind of measurement
of the inverted file tried first, at k = 10 and 200 with probe shares 1/32, 1/16, 1/8.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evaluation.pyfaq import PACKAGE, plain
from evaluation.runner import CACHE
from mentis.index import signbits
from mentis.index.vectors import VectorIndex
from mentis.providers.embed.local import LocalEmbedder

SOURCES = Path("usr/share/doc/python3.11/html/_sources")
CONFIGS = ((0.0, 4), (0.0, 8), (0.0, 16), (0.0, 32), (signbits.KEEP_SHARE, signbits.KEEP_PER_RESULT))
"""(share kept, rows kept per result): rows per result alone, then the shipped rule."""
DEPTHS = (10, 50)
"""Recall at the top 10 (what a caller sees) and 50 (the most search returns), each asked as the
limit (the rows kept follow the limit)."""
QUERIES = 300
CHUNK = 2_000


def paragraphs(limit: int) -> list[str]:
    root = CACHE / PACKAGE / SOURCES
    if not root.is_dir():
        raise SystemExit(f"{root} is missing: run `bench/eval.py pyfaq` first (it fetches {PACKAGE})")
    found: list[str] = []
    for path in sorted(root.rglob("*.txt")):
        for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8", errors="replace")):
            if block.startswith((" ", "\t", "..")):
                continue
            text = " ".join(plain(block).split())
            if len(text.split()) >= 8:
                found.append(text)
    step = max(1, len(found) // max(limit, 1))
    return found[::step][:limit]


def real_vectors(docs: int) -> tuple[np.ndarray, list[str]]:
    parts, repos = [], []
    for path in sorted((CACHE / "embeddings").glob("*.npy")):
        block = np.load(path)
        if not path.name.endswith(".tmp.npy") and block.ndim == 2 and block.shape[1] == 384:
            parts.append(block)
            repos += ["dev"] * len(block)
    if docs:
        texts = paragraphs(docs)
        embedder = LocalEmbedder.load()
        for lo in range(0, len(texts), CHUNK):
            chunk = texts[lo : lo + CHUNK]
            digest = hashlib.sha256("\0".join(chunk).encode()).hexdigest()
            path = CACHE / "ivf-recall" / f"pydocs-{digest}.npy"
            if path.exists():
                block = np.load(path)
            else:
                block = embedder.embed(chunk)
                path.parent.mkdir(parents=True, exist_ok=True)
                np.save(path, block)
            parts.append(block)
            repos += ["pydocs"] * len(block)
    return np.concatenate(parts).astype(np.float32), repos


def recall(
    rows: np.ndarray, repos: list[str], queries: np.ndarray, qrepos: list[str], share: float, min_scan: int
) -> dict[str, Any]:
    signbits.KEEP_SHARE, signbits.KEEP_PER_RESULT = share, min_scan
    exact = VectorIndex(rows.shape[1], quantize_min_rows=1 << 62, prefilter_min_rows=1 << 62)
    forced = VectorIndex(rows.shape[1], quantize_min_rows=0, prefilter_min_rows=0)
    rowids = list(range(1, len(rows) + 1))
    for index in (exact, forced):
        index.add(rowids, repos, rows)

    def rescore(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return ids, rows[ids - 1]

    out: dict[str, Any] = {}
    for label, scoped in (("unscoped", False), ("scoped", True)):
        for depth in DEPTHS:
            hits = 0
            for q, repo in zip(queries, qrepos, strict=True):
                scope = [repo] if scoped else None
                want = {r for r, _ in exact.search(q, scope, depth)}
                hits += len(want & {r for r, _ in forced.search(q, scope, depth, rescore)})
            out[f"{label}_recall@{depth}"] = round(hits / (depth * len(queries)), 4)
    out["kept_share"] = {d: round(min(1.0, signbits.keep_count(len(rows), d) / len(rows)), 4) for d in DEPTHS}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--out")
    args = ap.parse_args()
    vectors, repos = real_vectors(args.docs)
    rng = np.random.default_rng(15)
    order = rng.permutation(len(vectors))
    held, rest = order[:QUERIES], order[QUERIES:]
    queries, qrepos = vectors[held], [repos[i] for i in held]
    sizes, n = [], 1_000
    while n < len(rest):
        sizes.append(n)
        n *= 2
    sizes.append(len(rest))
    results = []
    for size in sizes:
        take = rest[:size]
        for share, min_scan in CONFIGS:
            row = {"rows": size, "share": share, "keep_per_result": min_scan}
            row.update(recall(vectors[take], [repos[i] for i in take], queries, qrepos, share, min_scan))
            print(json.dumps(row), flush=True)
            results.append(row)
    counts = {r: repos.count(r) for r in sorted(set(repos))}
    out = {"rows_by_repository": counts, "queries": QUERIES, "results": results}
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
