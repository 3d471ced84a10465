"""What the title-to-title signal of ``search`` costs (issue 16): the upgrade of a store written
before ``title_terms`` existed, and the process CPU time per search with the signal on and off.

    cp /work/scale-data/scale-100000/mentis.db /tmp/t/mentis.db     # a copy: opening it upgrades it
    .venv/bin/python bench/titles_cost.py /tmp/t/mentis.db --rounds 6

The copy is opened once (schema 2 -> 3: each live attempt's title indexed from its checked
body; wall and CPU seconds reported beside a second open, which only verifies), then 50 of
``core.py``'s queries run through ``Memory.search`` with the real model, in rounds that
alternate the signal off (the store's title look-up answers nothing, so the fusion and the
task look-up it needs are skipped: the ranking path before it) and on. CPU time is the
process's (``time.process_time``: the lexical thread included), so other engineers' load
changes it less than wall time. Writes the JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from corpus import SEED, Corpus, Workload
from mentis.providers.embed.local import DIM, LocalEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite.store import SqliteStore


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("db", type=Path, help="a writable copy of a store (it is upgraded in place)")
    ap.add_argument("--size", type=int, default=100_000, help="the size its queries are drawn for")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", type=Path, default=Path("bench/results/titles-cost.json"))
    args = ap.parse_args()
    out: dict[str, Any] = {}
    for label in ("open_upgrade", "open_again"):
        wall, cpu = time.perf_counter(), time.process_time()
        SqliteStore(args.db, DIM).close()
        out[label] = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}
        print(label, {k: round(v, 2) for k, v in out[label].items()}, flush=True)
    real = LocalEmbedder.load()
    store = SqliteStore(args.db, DIM)
    memory = Memory(store, real)
    caller = Caller(agent_id="bench-agent", session_id="bench")
    queries = Workload(Corpus(SEED + args.size, stream=1), args.size).queries(50)
    store.warm()
    for q in queries[:5]:
        memory.search(caller, q)  # warm-up
    titled = store.title_lexical
    cpu: dict[str, list[float]] = {"off": [], "on": []}
    wall: dict[str, list[float]] = {"off": [], "on": []}
    try:
        for i in range(args.rounds * 2):
            mode = "off" if i % 2 == 0 else "on"
            store.title_lexical = titled if mode == "on" else (lambda *_: [])  # type: ignore[method-assign]
            for q in queries:
                w, c = time.perf_counter(), time.process_time()
                memory.search(caller, q)
                cpu[mode].append((time.process_time() - c) * 1000)
                wall[mode].append((time.perf_counter() - w) * 1000)
    finally:
        store.title_lexical = titled  # type: ignore[method-assign]
        store.close()
    for mode in ("off", "on"):
        out[f"search_{mode}"] = {
            "cpu_ms_p50": statistics.median(cpu[mode]),
            "cpu_ms_mean": statistics.fmean(cpu[mode]),
            "wall_ms_p50": statistics.median(wall[mode]),
            "searches": len(cpu[mode]),
        }
        print(mode, {k: round(v, 2) for k, v in out[f"search_{mode}"].items()}, flush=True)
    out["cpu_ms_p50_added"] = out["search_on"]["cpu_ms_p50"] - out["search_off"]["cpu_ms_p50"]
    args.out.write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
