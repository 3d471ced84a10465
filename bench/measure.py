"""The measurements, each on an open store through ``Memory`` with the real model: search (with a
stage breakdown), record, search right after a record, open + verify, and the embedding session
variants. Reported per run as p50/p95 and summarised as the median over runs."""

from __future__ import annotations

import contextlib
import cProfile
import io
import os
import pstats
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import mentis.retrieval as retrieval_mod
import mentis.retrieval.graph as graph_mod
import mentis.retrieval.titles as titles_mod
import mentis.service.attempts as attempts_mod
from corpus import FixedEmbedder, Workload, attempt_text_of
from mentis.api.attempts import SearchInput
from mentis.ledger.chain import verify_rows
from mentis.providers.embed.local import DIM, LocalEmbedder
from mentis.service.access import Caller
from mentis.service.memory import Memory
from mentis.store.protocol import Store
from mentis.store.shared.core import ENTRY_COLS
from mentis.store.sqlite.store import SqliteStore


def pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q)) if samples else float("nan")


def summarize(runs: list[list[float]], cpu_runs: list[list[float]] | None = None) -> dict[str, Any]:
    """Per-run p50/p95 (ms), reported as the median over runs.

    ``cpu_runs`` are the process CPU times of the same calls (all threads, ORT's included): on a
    contended machine wall time rises while CPU time stays close to the idle wall time.
    """
    p50 = [pct(r, 50) for r in runs]
    p95 = [pct(r, 95) for r in runs]
    out = {
        "p50_ms": statistics.median(p50),
        "p95_ms": statistics.median(p95),
        "min_ms": min(min(r) for r in runs),
        "p50_runs_ms": p50,
        "p95_runs_ms": p95,
        "n_per_run": len(runs[0]) if runs else 0,
        "runs": len(runs),
    }
    if cpu_runs:
        out["cpu_p50_ms"] = statistics.median(pct(r, 50) for r in cpu_runs)
    return out


class Stopwatch:
    """Wall (perf_counter) and process CPU time of one call."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    @contextlib.contextmanager
    def time(self) -> Iterator[None]:
        c0, t0 = time.process_time(), time.perf_counter()
        yield
        self.wall.append((time.perf_counter() - t0) * 1000)
        self.cpu.append((time.process_time() - c0) * 1000)


def ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


class Timers:
    """Wraps callables on objects/modules and accumulates their wall time per name."""

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        original = getattr(owner, attr)
        had_own = isinstance(owner, type(sys)) or attr in getattr(owner, "__dict__", {})

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                self.total[name] = self.total.get(name, 0.0) + (time.perf_counter() - t0) * 1000

        setattr(owner, attr, timed)
        if had_own:
            self._undo.append(lambda: setattr(owner, attr, original))
        else:
            self._undo.append(lambda: delattr(owner, attr))

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()


@contextlib.contextmanager
def profiled(enabled: bool, label: str, sink: list[str]) -> Iterator[None]:
    if not enabled:
        yield
        return
    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        buf = io.StringIO()
        st = pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("tottime")
        st.print_stats(15)
        sink.append(f"===== {label} (sorted by tottime) =====\n{buf.getvalue()}")


def measure_search(
    mem: Memory,
    real: LocalEmbedder,
    caller: Caller,
    queries: list[SearchInput],
    repeats: int,
    prof: bool,
    sink: list[str],
) -> dict[str, Any]:
    # Cold: the first search loads every vector from SQLite into the in-process index.
    t0 = time.perf_counter()
    mem.search(caller, queries[0])
    cold = ms(t0)
    for q in queries[:5]:
        mem.search(caller, q)
    runs, cpu_runs = [], []
    hits = []
    for _ in range(repeats):
        sw = Stopwatch()
        for q in queries:
            with sw.time():
                res = mem.search(caller, q)
            hits.append(len(res.tasks))
        runs.append(sw.wall)
        cpu_runs.append(sw.cpu)
    out = summarize(runs, cpu_runs)
    out["cold_first_ms"] = cold
    out["mean_tasks_returned"] = float(np.mean(hits))
    out["query_tokens_median"] = float(np.median([len(real._tokenizer.encode(q.query).ids) for q in queries]))

    # Stage breakdown: one more pass with timing wrappers around each step Memory.search takes.
    timers = Timers()
    store = mem.store
    # (owner, attribute, label) over the store's public methods; labels starting with "  of which"
    # are nested in the row above and left out of the sum. Memory's private steps it no longer
    # has are skipped.
    vector = (
        "vector (index refresh + matmul + top-k)"
        if isinstance(store, SqliteStore)
        else "vector (pgvector HNSW query)"
    )
    stages = [
        (mem.embedder, "embed", "embed query"),
        (retrieval_mod, "query_terms", "query_terms"),
        (store, "lexical", "lexical (BM25, incl. index refresh)"),
        (store, "title_lexical", "title BM25 (incl. index refresh)"),
        (store, "vector", vector),
        (retrieval_mod, "fuse", "fuse"),
        (titles_mod, "fuse_titles", "fuse title hits"),
        (graph_mod, "rerank", "graph rerank"),
        (store, "attempt_edges", "  of which attempt_edges SQL"),
        (store, "attempt_keys", "attempt_keys"),
        (retrieval_mod, "group_tasks", "group_tasks"),
        (store, "load_attempts", "load_attempts (bodies)"),
        (store, "task_info", "task_info"),
        (mem.attempts, "_rerank", "_rerank (LLM rerank, off)"),
    ]
    for owner, attr, label in stages:
        if hasattr(owner, attr):
            timers.wrap(owner, attr, label)
    t0 = time.perf_counter()
    try:
        for q in queries:
            mem.search(caller, q)
    finally:
        timers.restore()
    total = ms(t0)
    breakdown = {
        lbl: timers.total.get(lbl, 0.0) / len(queries) for _, a, lbl in stages if lbl in timers.total
    }
    top_level = sum(v for k, v in breakdown.items() if not k.startswith("  of which"))
    breakdown["other (models, python)"] = total / len(queries) - top_level
    out["breakdown_mean_ms"] = breakdown

    if not isinstance(store, SqliteStore):
        return out
    # How many rows each lexical query touches (BM25 is computed for every matching row).
    total_rows = store.counts()["attempts"]
    matches = [m for m in (retrieval_mod.query_terms(q.query) for q in queries) if m]
    lex_matches = [len(store.lexical(m, None, total_rows)) for m in matches]
    out["lexical_scored_rows_median"] = float(np.median(lex_matches)) if lex_matches else 0.0
    out["lexical_scored_rows_max"] = int(max(lex_matches)) if lex_matches else 0

    # Raw vector cost on a matrix of the index's shape (the fill's vectors are random unit vectors too).
    qv = mem.embedder.embed([queries[0].query])[0]
    mat = np.random.default_rng(0).standard_normal((total_rows, DIM)).astype(np.float32)
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        scores = mat @ qv
    matmul = ms(t0) / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        top = np.argpartition(-scores, 199)[:200] if len(scores) > 200 else np.arange(len(scores))
        top[np.argsort(-scores[top], kind="stable")]
    topk = ms(t0) / reps
    out["vector_raw_ms"] = {"matmul": matmul, "argpartition+sort": topk, "rows": total_rows}

    with profiled(prof, "search x len(queries)", sink):
        if prof:
            for q in queries:
                mem.search(caller, q)
    return out


def measure_records(
    store: Store,
    real: LocalEmbedder,
    wl: Workload,
    caller: Caller,
    repeats: int,
    n_real: int,
    n_fixed: int,
    prof: bool,
    sink: list[str],
) -> dict[str, Any]:
    mem_real = Memory(store, real)
    mem_fixed = Memory(store, FixedEmbedder())

    def run(mem: Memory, n: int) -> Stopwatch:
        inputs = [wl.record_input() for _ in range(n)]  # validation is the transport's, not timed
        sw = Stopwatch()
        for req in inputs:
            with sw.time():
                mem.record_attempt(caller, req)
        return sw

    def runs(mem: Memory, n: int) -> dict[str, Any]:
        sws = [run(mem, n) for _ in range(repeats)]
        return summarize([s.wall for s in sws], [s.cpu for s in sws])

    run(mem_real, 3)  # warm-up
    out: dict[str, Any] = {}
    texts = [attempt_text_of(wl.record_input()) for _ in range(50)]
    out["attempt_text_tokens_median"] = float(np.median([len(real._tokenizer.encode(t).ids) for t in texts]))
    out["real_model"] = runs(mem_real, n_real)
    out["no_embedding"] = runs(mem_fixed, n_fixed)

    # Breakdown of a real record.
    timers = Timers()
    timers.wrap(real, "embed", "embed attempt text")
    timers.wrap(store, "append_attempt", "append_attempt (txn + fsync)")
    timers.wrap(attempts_mod, "secret_warnings", "secret_warnings")
    inputs = [wl.record_input() for _ in range(n_real)]
    t0 = time.perf_counter()
    try:
        for req in inputs:
            mem_real.record_attempt(caller, req)
    finally:
        timers.restore()
    total = ms(t0)
    bd = {k: v / n_real for k, v in timers.total.items()}
    bd["other (body, uuid, models)"] = total / n_real - sum(bd.values())
    out["breakdown_real_mean_ms"] = bd

    if not isinstance(store, SqliteStore):
        return out
    # Raw fsync latency of the temp directory's disk.
    probe = Path(store.path).with_suffix(".fsync")
    lat = []
    with open(probe, "wb") as fh:
        for _ in range(30):
            fh.write(b"x" * 4096)
            fh.flush()
            t0 = time.perf_counter()
            os.fsync(fh.fileno())
            lat.append(ms(t0))
    probe.unlink()
    out["disk_fsync_p50_ms"] = pct(lat, 50)

    with profiled(prof, f"record_attempt (real model) x {n_real}", sink):
        if prof:
            run(mem_real, n_real)
    return out


def measure_search_after_record(
    store: Store, real: LocalEmbedder, wl: Workload, caller: Caller, queries: list[SearchInput]
) -> dict[str, Any]:
    """An agent records, then searches: each search first refreshes its stale in-process indexes
    (``warm`` is timed alone after one record, then one more record precedes the search)."""
    mem_real = Memory(store, real)
    mem_fixed = Memory(store, FixedEmbedder())
    samples, refresh = [], []
    for q in queries[:20]:
        mem_fixed.record_attempt(caller, wl.record_input())
        t0 = time.perf_counter()
        store.warm()
        refresh.append(ms(t0))
        mem_fixed.record_attempt(caller, wl.record_input())
        t0 = time.perf_counter()
        mem_real.search(caller, q)
        samples.append(ms(t0))
    return {"search_p50_ms": pct(samples, 50), "warm_p50_ms": pct(refresh, 50)}


def measure_open(
    open_store: Callable[..., Store], runs: int, prof: bool, sink: list[str], path: Path | None = None
) -> dict[str, Any]:
    """Median time to open the closed store (verifying every chain) and to open it without
    verifying, and ``verify()`` alone; with the SQLite file's ``path``, the one-pass verifier's parts."""
    probe = open_store(verify=False)
    counts = probe.counts()
    verify_only = []
    for _ in range(runs):
        t0 = time.perf_counter()
        probe.verify()
        verify_only.append(time.perf_counter() - t0)
    probe.close()
    times: list[float] = []
    no_verify: list[float] = []
    for verify, samples in ((True, times), (False, no_verify)):
        for _ in range(runs):
            t0 = time.perf_counter()
            store = open_store(verify=verify)
            samples.append(time.perf_counter() - t0)
            store.close()
    with profiled(prof, "open + verify", sink):
        if prof:
            open_store(verify=True).close()
    med = statistics.median(times)
    parts = {"verify() alone": verify_only, **(verify_parts(path, runs) if path else {})}
    return {
        "entries": counts["entries"],
        "chains": counts["chains"],
        "median_s": med,
        "runs_s": times,
        "entries_per_s": counts["entries"] / med,
        "open_without_verify_median_s": statistics.median(no_verify),
        "verify_parts_median_s": {k: statistics.median(v) for k, v in parts.items()},
    }


def verify_parts(path: Path, runs: int) -> dict[str, list[float]]:
    """The one-pass verifier's parts on a plain connection to the SQLite file, with the store's SQL."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    sql = (
        f"SELECT {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b "
        "ON b.rowid = e.rowid ORDER BY e.chain, e.seq"
    )
    fetch, hashing, orphan = [], [], []
    for _ in range(runs):
        heads = {c: (s_, h) for c, s_, h in conn.execute("SELECT chain, seq, hash FROM heads")}
        t0 = time.perf_counter()
        rows = conn.execute(sql).fetchall()
        fetch.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        verify_rows(rows, heads)
        hashing.append(time.perf_counter() - t0)
        del rows
        t0 = time.perf_counter()
        conn.execute(
            "SELECT b.rowid FROM bodies b LEFT JOIN entries e ON e.rowid = b.rowid "
            "WHERE e.rowid IS NULL LIMIT 1"
        ).fetchone()
        orphan.append(time.perf_counter() - t0)
    conn.close()
    return {
        "fetch rows (SQL join + ORDER BY)": fetch,
        "verify_rows (hash loop)": hashing,
        "orphan-body check": orphan,
    }


def measure_embed_variants(real: LocalEmbedder, wl: Workload, rounds: int) -> dict[str, Any]:
    """Embedding latency of one attempt text / one query with the shipped session and with
    alternative onnxruntime thread settings (same graph, same weights)."""
    import onnxruntime as ort  # type: ignore[import-untyped, unused-ignore]
    from safetensors.numpy import load_file

    from mentis.providers.embed import local

    weights = load_file(str(local.model_dir() / "model.safetensors"))
    model_bytes = local.build_onnx_model(weights).SerializeToString()
    del weights

    def session(threads: int, spin: bool) -> LocalEmbedder:
        o = local._session_options()
        o.intra_op_num_threads = threads
        if not spin:
            o.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(model_bytes, sess_options=o, providers=["CPUExecutionProvider"])
        return LocalEmbedder(sess, real._tokenizer)

    shipped = local._session_options()
    variants = {
        f"shipped ({shipped.intra_op_num_threads} threads, spinning)": real,
        "2 threads, allow_spinning=0": session(2, False),
        "1 thread": session(1, True),
    }
    attempts = [attempt_text_of(wl.record_input()) for _ in range(20)]
    queries = [q.query for q in wl.queries(20)]
    out: dict[str, Any] = {}
    for name, emb in variants.items():
        emb.embed(attempts[:2])
        res = {}
        for label, texts in (("attempt", attempts), ("query", queries)):
            per_round = []
            for _ in range(rounds):
                sw = Stopwatch()
                for t in texts:
                    with sw.time():
                        emb.embed([t])
                per_round.append(pct(sw.wall, 50))
            res[f"{label}_p50_ms"] = statistics.median(per_round)
        out[name] = res
    return out
