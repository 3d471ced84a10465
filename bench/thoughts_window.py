#!/usr/bin/env python
"""What the conversational windows cost ``search_thoughts`` and ``append_thought`` (retrieval/window.py).

    .venv/bin/python bench/thoughts_window.py [--thoughts 20000] [--rounds 5] [--queries 40]

Fills a SQLite store with ``--thoughts`` thoughts through ``Memory.append_thought`` (synthetic
turns from ``corpus.Corpus``, 12-word to 40-word, in sessions of 20 turns, two agents writing
alternately so a fifth of the neighbours are interleaved; random unit vectors, no model), then
asks ``--queries`` questions with the real model embedding each query in alternating rounds of
three modes — "no windows" (no session neighbours found and no window rows searched: the ranking
before windows), "search-time windows" (neighbours, no window rows) and "windows" (as shipped:
neighbours and the causal window rows) — and reports the medians of the rounds' p50/p95, the
time spent finding neighbours (``filter_thoughts`` + ``load_thoughts``) per query, and the
process CPU time per search (steadier than wall time on a shared machine). The fill alternates
writing each thought with and without its causal window row (``_index_window`` switched off for
every other thought) and reports the CPU time per ``append_thought`` of each half (the embedding
is a random vector, so this is the write without the model).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from corpus import Corpus
from mentis.api.thoughts import AppendThoughtInput, SearchThoughtsInput
from mentis.config import Settings
from mentis.providers.embed.local import DIM, MODEL_ID, LocalEmbedder
from mentis.service.memory import Caller, Memory

REPO = "bench/thoughts"


class RandomEmbedder:
    """Random unit vectors under the real model's id (the fill does not pay for the model)."""

    def __init__(self) -> None:
        self.model_id, self.dim = MODEL_ID, DIM
        self.rng = np.random.default_rng(7)

    def embed(self, texts: Any) -> np.ndarray:
        v = self.rng.standard_normal((len(texts), DIM)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def sqlite_count(path: Path, table: str) -> int:
    import sqlite3

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def percentile(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs), q * 100))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--thoughts", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "thoughts-window.json")
    args = ap.parse_args(argv)

    corpus = Corpus(11)
    tmp = tempfile.TemporaryDirectory(prefix="mentis-window-")
    home = Path(tmp.name)
    settings = Settings(home=home, db_path=home / "m.db", embedder="hash")
    writer = Memory.open(settings, RandomEmbedder())  # type: ignore[arg-type]
    t0 = time.perf_counter()
    rng = np.random.default_rng(3)
    store: Any = writer.store
    index_window = store._index_window
    append_cpu: dict[str, list[float]] = {"with window row": [], "without": []}
    for i in range(args.thoughts):
        agent = "a" if i % 5 else "b"  # every fifth turn comes from another agent's session
        session = f"{agent}-{i // 20}"
        text = corpus.text(int(rng.integers(12, 41)))
        req = AppendThoughtInput(repository=REPO, type="FactLearned", content=text, session_id=session)
        half = "with window row" if i % 2 else "without"
        store._index_window = index_window if i % 2 else (lambda *a: None)
        c = time.process_time()
        writer.append_thought(Caller(agent_id=agent), req, link_duplicates=False)
        append_cpu[half].append((time.process_time() - c) * 1000)
    store._index_window = index_window
    fill_s = time.perf_counter() - t0
    writer.close()

    memory = Memory.open(settings, LocalEmbedder.load())
    caller = Caller(agent_id="bench", can_write=False)
    queries = [corpus.text(int(rng.integers(6, 16))) for _ in range(args.queries)]
    ops = memory.thoughts
    real = ops.session_neighbours
    spent: list[float] = []

    def timed_neighbours(rows: Any, scope: Any) -> dict[int, list[int]]:
        t = time.perf_counter()
        out = real(rows, scope)
        spent.append((time.perf_counter() - t) * 1000)
        return out

    modes = ("no windows", "search-time windows", "windows")
    cpu: dict[str, list[float]] = {mode: [] for mode in modes}
    window_rows = memory.store.window_lexical
    store_any: Any = memory.store

    def ask(q: str, mode: str = "") -> float:
        t, c = time.perf_counter(), time.process_time()
        memory.search_thoughts(caller, SearchThoughtsInput(query=q, repository=REPO, limit=10))
        if mode:
            cpu[mode].append((time.process_time() - c) * 1000)
        return (time.perf_counter() - t) * 1000

    for q in queries[:5]:
        ask(q)  # warm-up: indexes loaded, model warm
    rounds: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    for _ in range(args.rounds):
        for mode in modes:
            ops.session_neighbours = timed_neighbours if mode != "no windows" else (lambda rows, scope: {})  # type: ignore[assignment]
            store_any.window_lexical = window_rows if mode == "windows" else (lambda *a: [])
            times = [ask(q, mode) for q in queries]
            rounds[mode].append((percentile(times, 0.5), percentile(times, 0.95)))
    n_windows = sqlite_count(settings.db_path, "window_terms")
    memory.close()
    tmp.cleanup()

    result = {
        "thoughts": args.thoughts,
        "fill_s": round(fill_s, 1),
        "rounds": args.rounds,
        "queries": args.queries,
        "load_average": Path("/proc/loadavg").read_text().split()[:3],
        "search_thoughts_ms": {
            mode: {
                "p50": round(statistics.median(r[0] for r in rs), 2),
                "p95": round(statistics.median(r[1] for r in rs), 2),
                "rounds_p50": [round(r[0], 2) for r in rs],
            }
            for mode, rs in rounds.items()
        },
        "search_thoughts_cpu_ms_p50": {mode: round(percentile(xs, 0.5), 2) for mode, xs in cpu.items()},
        "append_thought_cpu_ms_p50": {k: round(percentile(xs, 0.5), 3) for k, xs in append_cpu.items()},
        "window_rows": n_windows,
        "neighbours_ms_per_query": {
            "p50": round(percentile(spent, 0.5), 2),
            "p95": round(percentile(spent, 0.95), 2),
        },
    }
    print(json.dumps(result, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
