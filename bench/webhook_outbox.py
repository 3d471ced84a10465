"""What the webhook outbox adds to a write: ``record_attempt`` on a SQLite store (hash embedder,
so the store's time is not hidden by the model's), A/B against a checkout without webhooks.

    .venv/bin/python bench/webhook_outbox.py --base /work/main/src --rounds 7 --calls 300

Each round runs, one after the other in fresh processes on fresh stores (each round starting with
the next one, so none always runs first): the base checkout
(``--base``: its ``src``, put first on PYTHONPATH: no outbox at all), this checkout with no
subscription (the append's one ``INSERT … SELECT`` finds no subscription) and this checkout with
one subscription taking ``attempt.recorded`` (one outbox row per write). Each process records
``--calls`` attempts after 20 warm-ups and reports the median wall and CPU time per call; the
figure is the median over rounds. Writes the JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("base", "no_subscription", "one_subscription")


def child(mode: str, calls: int) -> dict[str, float]:
    from mentis.api.attempts import RecordAttemptInput
    from mentis.config import Settings
    from mentis.providers.embed import HashEmbedder
    from mentis.service.memory import Caller, Memory

    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home), db_path=Path(home) / "mentis.db", embedder="hash")
        memory = Memory.open(settings, HashEmbedder())
        if mode == "one_subscription":
            from mentis.api.webhooks import CreateWebhookInput
            from mentis.service.tokens import TokenStore

            tokens = TokenStore.open(settings)
            _, token = tokens.create(scope="read", repositories=("*",))
            tokens.close()
            url = "http://127.0.0.1:9/hook"  # never contacted: no worker runs here
            req = CreateWebhookInput(url=url, events=["attempt.recorded"], token_id=token.id)
            memory.create_webhook(Caller(agent_id="ops", admin=True), req)
        caller = Caller(agent_id="bench")
        walls, cpus = [], []
        for i in range(calls + 20):
            req = RecordAttemptInput(
                repository="github.com/acme/shop",
                task_id=f"t{i % 50}",
                action=f"ran the test suite, round {i}",
                observation="3 failed in test_cart.py: rounding of totals",
                check={"command": "pytest -q", "status": "failed", "exit_code": 1},
            )
            wall, cpu = time.perf_counter(), time.process_time()
            memory.record_attempt(caller, req)
            if i >= 20:
                walls.append(time.perf_counter() - wall)
                cpus.append(time.process_time() - cpu)
        memory.close()
    return {"wall_ms": statistics.median(walls) * 1e3, "cpu_ms": statistics.median(cpus) * 1e3}


def statement_cost(n: int = 20_000) -> dict[str, float]:
    """CPU microseconds of the append's outbox statements alone (``_TAKERS``, then one
    ``_OUTBOX_INSERT`` per subscription), with no and with one subscription, in one transaction on
    a SQLite file."""
    import sqlite3

    from mentis.store.shared.webhooks import _OUTBOX_INSERT, _TAKERS, SQLITE_WEBHOOK_SCHEMA

    out = {}
    with tempfile.TemporaryDirectory() as home:
        conn = sqlite3.connect(Path(home) / "x.db", isolation_level=None)
        conn.executescript(SQLITE_WEBHOOK_SCHEMA)
        conn.execute("BEGIN")
        for label in ("no_subscription_us", "one_subscription_us"):
            cpu = time.process_time()
            for i in range(n):
                for (hook,) in conn.execute(_TAKERS, ('%"attempt.recorded"%',)).fetchall():
                    args = (f"msg_{i}_{hook}", hook, "attempt.recorded", "r", i, "id", "at", 1.0, 1.0)
                    conn.execute(_OUTBOX_INSERT, args)
            out[label] = round((time.process_time() - cpu) / n * 1e6, 1)
            conn.execute(
                "INSERT OR IGNORE INTO webhooks VALUES('wh_1', 'u', '[\"attempt.recorded\"]', NULL, NULL, "
                "NULL, 'full', 't', 's', 'a', 'b')"
            )
        conn.execute("COMMIT")
        conn.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--base", type=Path, required=False, help="src/ of a checkout without webhooks")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("bench/results/webhook-outbox.json"))
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.calls)))
        return
    statement = statement_cost()
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES if m != "base" or args.base}
    for round_ in range(args.rounds):
        modes = list(runs)
        for mode in modes[round_ % len(modes) :] + modes[: round_ % len(modes)]:  # each first in turn
            env = dict(os.environ)
            if mode == "base":
                env["PYTHONPATH"] = str(args.base.resolve())
            done = subprocess.run(
                [sys.executable, __file__, "--child", mode, "--calls", str(args.calls)],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    result: dict[str, Any] = {
        mode: {k: round(statistics.median(r[k] for r in rs), 3) for k in ("wall_ms", "cpu_ms")}
        for mode, rs in runs.items()
    }
    result["statement_cpu"] = statement
    result["runs"] = runs
    result["load_average"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
