"""The lexical stage alone (issue 15, "search p50 at 1M ≤ 2× 100k"): CPU ms per query of
``LexicalIndex.search`` against the exhaustive scoring it replaced, on the scale bench's stores.

    .venv/bin/python bench/lexical_prune.py --data /work/scale-data [--sizes 100000,1000000]
                                            [--repeats 3] [--limit 200] [--out FILE.json]

Each store (``DIR/scale-<n>/mentis.db``, filled by bench/scale.py) is opened read-only
(``immutable``: nothing is written, not even a ``-shm``) and its ``attempt_terms`` rows are loaded
into a :class:`LexicalIndex` the way ``SqliteIndexes._load_terms`` does (one segment's rows per
batch). The queries are bench/scale.py's (the core workload's 50, a quarter of them scoped to one
repository), turned into term ids as ``SqliteIndexes._lexical`` does, with its term selection;
``--limit`` is what the pipeline asks for (``retrieval.CANDIDATES``).

Per query and pass, ``time.process_time`` of the pruned search and of :func:`exhaustive` (the
previous term-at-a-time search, kept here as the baseline), interleaved so both see the same load;
every answer is checked to be identical (rowids, scores, order).
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from corpus import SEED, Corpus, Workload
from mentis import retrieval
from mentis.index import lexical
from mentis.store.sqlite.indexes import LEXICAL_SELECT_MIN_DOCS


def exhaustive(
    index: lexical.LexicalIndex, terms: list[int], repositories: list[str] | None, limit: int, min_docs: int
) -> list[tuple[int, float]]:
    """The search before pruning: every posting of every selected term scored into an array the
    size of the index. Equal scores rank by rowid (the old code's argpartition left the order of
    ties at the cut-off to chance; the reference breaks them as the search does)."""
    size = index._size
    mask = index._repos.mask(repositories, index._codes[:size])
    if index._dead_count:
        alive = ~index._dead[:size]
        mask = alive if mask is None else mask & alive
    n = size if mask is None else int(np.count_nonzero(mask))
    total = index._total_length if mask is None else float(index._lengths[:size][mask].sum())
    if n == 0:
        return []
    avgdl = total / n if total else 1.0
    norm = lexical.K1 * (1.0 - lexical.B + lexical.B * index._lengths[:size] / avgdl)
    max_df = n // 2 if n >= min_docs else None
    scores = np.zeros(size, dtype=np.float64)
    for term, qtf in Counter(terms).items():
        docs, tf = index.postings(term)
        df = len(docs) if mask is None or not len(docs) else int(np.count_nonzero(mask[docs]))
        if df == 0 or (max_df is not None and df > max_df):
            continue
        idf = max(math.log((n - df + 0.5) / (df + 0.5)), lexical.IDF_FLOOR)
        tf64 = tf.astype(np.float64)
        scores[docs] += qtf * idf * (lexical.K1 + 1.0) * tf64 / (tf64 + norm[docs])
    if mask is not None:
        scores[~mask] = 0.0
    hits = np.flatnonzero(scores)
    if len(hits) > limit:
        cut = scores[hits[np.argpartition(-scores[hits], limit - 1)[limit - 1]]]
        hits = hits[scores[hits] >= cut]  # the top ``limit`` and every tie of the last one
    order = np.lexsort((index._rowids[hits], -scores[hits]))[:limit]
    return [(int(index._rowids[i]), float(scores[i])) for i in hits[order]]


def load(path: Path) -> tuple[lexical.LexicalIndex, dict[str, int], float]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    t0 = time.perf_counter()
    try:
        vocab = dict(conn.execute("SELECT term, id FROM lex_vocab"))
        index = lexical.LexicalIndex()
        cur = conn.execute("SELECT rowid, repository, len, terms FROM attempt_terms ORDER BY rowid")
        while rows := cur.fetchmany(lexical.SEGMENT_DOCS):
            index.add_columns(*zip(*rows, strict=True))
    finally:
        conn.close()
    return index, vocab, time.perf_counter() - t0


def run_size(data: Path, n: int, repeats: int, limit: int) -> dict[str, Any]:
    index, vocab, load_s = load(data / f"scale-{n}" / "mentis.db")
    analyzer = lexical.analyzer()
    asked = []
    for q in Workload(Corpus(SEED + n, stream=1), n).queries(50):
        words = retrieval.query_terms(q.query)
        ids = [vocab[t] for w in words for t in analyzer.terms(w) if t in vocab]
        if ids:
            asked.append((ids, None if q.repository is None else [q.repository]))
    pruned_ms: list[float] = []
    exhaustive_ms: list[float] = []
    mismatches = 0
    for _ in range(repeats):
        for ids, scope in asked:
            t0 = time.process_time()
            got = index.search(ids, scope, limit, LEXICAL_SELECT_MIN_DOCS)
            pruned_ms.append((time.process_time() - t0) * 1e3)
            t0 = time.process_time()
            want = exhaustive(index, ids, scope, limit, LEXICAL_SELECT_MIN_DOCS)
            exhaustive_ms.append((time.process_time() - t0) * 1e3)
            mismatches += got != want
    out = {
        "size": n,
        "load_s": load_s,
        "queries": len(asked),
        "repeats": repeats,
        "limit": limit,
        "mismatches": mismatches,
        "pruned_cpu_ms": {"p50": statistics.median(pruned_ms), "mean": statistics.fmean(pruned_ms)},
        "exhaustive_cpu_ms": {
            "p50": statistics.median(exhaustive_ms),
            "mean": statistics.fmean(exhaustive_ms),
        },
    }
    print(json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the directory holding scale-<n>/mentis.db")
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=int, default=retrieval.CANDIDATES)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    results = [run_size(Path(args.data), int(s), args.repeats, args.limit) for s in args.sizes.split(",")]
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
