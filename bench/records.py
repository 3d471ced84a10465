"""What typing a ledger body costs: ``orjson.loads`` alone against ``AttemptBody.parse`` /
``ThoughtBody.parse`` (loads + the typed record), on 100k bodies written by the real service.

    .venv/bin/python bench/records.py [--n 100000] [--runs 5]

Bodies come from a store filled through ``Memory`` (hash embedder) and are cycled up to ``--n``;
each figure is the median of ``--runs`` passes over all of them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from mentis.api.attempts import RecordAttemptInput
from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput
from mentis.config import Settings
from mentis.ledger.bodies import AttemptBody, ThoughtBody
from mentis.service.memory import Caller, Memory


def bodies(n: int) -> dict[str, list[bytes]]:
    with tempfile.TemporaryDirectory() as tmp:
        memory = Memory.open(Settings(home=Path(tmp), db_path=Path(tmp) / "m.db", embedder="hash"))
        caller = Caller(agent_id="bench")
        for i in range(200):
            check = {"command": "pytest -q", "status": "failed", "exit_code": 1} if i % 2 else None
            req = {"repository": "r", "task_id": f"t{i % 20}", "action": f"ran step {i} of the fix"}
            req |= {"observation": "two tests failed with a timeout in the token refresh", "check": check}
            req |= {"files": ["src/auth.py", "tests/test_auth.py"], "tags": ["auth"], "inference": "a lock"}
            memory.record_attempt(caller, parse(RecordAttemptInput, req))
            thought = {"repository": "r", "type": "Decision", "content": f"use lock {i}", "tags": ["a"]}
            memory.append_thought(caller, parse(AppendThoughtInput, thought))
        found: dict[str, list[bytes]] = {"attempt": [], "thought": []}
        for entry, raw in memory.store.iter_ledger():
            if raw is not None:
                found[entry.kind].append(raw)
        memory.close()
    return {kind: (raws * (n // len(raws) + 1))[:n] for kind, raws in found.items()}


def median_ms(fn: Callable[[bytes], Any], raws: list[bytes], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for raw in raws:
            fn(raw)
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    out: dict[str, Any] = {"n": args.n, "runs": args.runs}
    for kind, raws in bodies(args.n).items():
        typed = AttemptBody if kind == "attempt" else ThoughtBody
        out[kind] = {"orjson_loads_ms": median_ms(orjson.loads, raws, args.runs)}
        out[kind]["parse_ms"] = median_ms(typed.parse, raws, args.runs)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
