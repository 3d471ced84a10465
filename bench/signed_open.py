"""Open + verify of a SQLite store whose entries are all signed, beside the same store unsigned.

Two stores get the same ``n`` synthetic attempts (``fill.attempt_rows``) through the public
``Store.append_attempts``, all by one agent: in the signed one the agent has a registered key and
every append is signed by a :class:`mentis.ledger.signing.Signer` (one stream), so the store checks each
signature as it writes. Then ``SqliteStore(path, DIM)`` (open, which verifies) is timed
``--runs`` times on each closed store (wall time), the parallel pass's block scans and stitch
with no worker (CPU time of this process), and ``verify(signatures=True)`` once on the signed one.

    .venv/bin/python bench/signed_open.py                    # 100k attempts, medians of 3
    .venv/bin/python bench/signed_open.py --n 20000 --runs 5
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from corpus import Corpus, Workload
from fill import FILL_BATCH, attempt_rows
from mentis.ledger import signing
from mentis.ledger.bodies import AgentEventBody
from mentis.providers.embed.local import DIM
from mentis.store.seal import Seal
from mentis.store.sqlite import verify as sqlite_verify
from mentis.store.sqlite.schema import _LEDGER_SCHEMA
from mentis.store.sqlite.store import SqliteStore

AGENT = "bench-agent"


def fill(path: Path, n: int, seed: int, signed: bool) -> float:
    """``n`` attempts by AGENT (signed when ``signed``); returns the seconds the fill took."""
    store = SqliteStore(path, DIM, verify=False)
    t0 = time.perf_counter()
    sign = None
    if signed:
        key = Ed25519PrivateKey.generate()
        public = signing.public_text(key.public_key())
        register = AgentEventBody(
            op="register", agent_id=AGENT, by="admin", display_name=AGENT, description="", aliases=[]
        )
        store.append_agent_event(register, Seal())
        key_id = signing.key_id_of(key.public_key())
        store.append_agent_event(
            AgentEventBody(op="key_add", agent_id=AGENT, by="admin", key_id=key_id, public_key=public), Seal()
        )
        sign = signing.Signer(key, AGENT).sign
    wl, rng, done = Workload(Corpus(seed), n), np.random.default_rng(seed + 1), 0
    while done < n:
        now = signing.now_iso()  # a signed write must be dated within SKEW_S of the clock
        rows = [
            r._replace(body=replace(r.body, agent_id=AGENT, created_at=now))
            for r in attempt_rows(wl, rng, min(FILL_BATCH, n - done))
        ]
        store.append_attempts(rows, Seal(sign=sign))
        done += len(rows)
    store.close()
    return time.perf_counter() - t0


def time_open(path: Path, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        SqliteStore(path, DIM).close()
        times.append(time.perf_counter() - t0)
    return times


def cpu_scan(path: Path, runs: int) -> list[float]:
    """CPU seconds of the parallel pass with every block scanned in this process (no worker): the
    work open spreads over the processes, less sensitive to other load than wall time."""
    times = []
    for _ in range(runs):
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN")
            heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
            t0 = time.process_time()
            reports = sqlite_verify.verify_blocks(conn, str(path), heads, _LEDGER_SCHEMA, 0)
            times.append(time.process_time() - t0)
            assert reports is not None, "the parallel pass gave up: the store would open in one pass"
        finally:
            conn.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "signed-open.json")
    args = ap.parse_args()
    result: dict[str, Any] = {"n": args.n, "runs": args.runs}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("unsigned", "signed"):
            path = Path(tmp) / f"{name}.db"
            fill_s = fill(path, args.n, args.seed, name == "signed")
            opens, cpu = time_open(path, args.runs), cpu_scan(path, args.runs)
            result[name] = {"fill_s": round(fill_s, 2), "open_s": [round(t, 3) for t in opens],
                            "open_median_s": round(statistics.median(opens), 3),
                            "scan_cpu_median_s": round(statistics.median(cpu), 3)}  # fmt: skip
            print(f"{name}: fill {fill_s:.1f} s, open + verify median {statistics.median(opens):.3f} s "
                  f"{[round(t, 3) for t in opens]}", file=sys.stderr)  # fmt: skip
        store = SqliteStore(Path(tmp) / "signed.db", DIM, verify=False)
        t0 = time.perf_counter()
        store.verify(signatures=True)
        result["signed"]["verify_every_signature_s"] = round(time.perf_counter() - t0, 2)
        store.close()
    for what in ("open_median_s", "scan_cpu_median_s"):
        result[f"signed_over_unsigned_{what.removesuffix('_median_s')}"] = round(
            result["signed"][what] / result["unsigned"][what], 2
        )
    print(json.dumps(result, indent=2))
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
