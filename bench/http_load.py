"""Load test of `mentis serve --http` on loopback: many agents at once, REST and MCP mixed.

    .venv/bin/python bench/http_load.py [--clients 16] [--calls 200] [--mcp-clients 4]
                                        [--embedder hash|local] [--max-seconds 600]
                                        [--out bench/results/http-load.json]

The server runs in its own process (this script with ``--serve``) on a fresh SQLite file, with the
rate limit lifted so the server's capacity is measured rather than the limiter. Each client has its
own write token and makes ``--calls`` calls: record_attempt 35 %, search 30 %, recall SQL 10 %,
recall history 10 %, mark_conclusion_outdated 10 %, verify_integrity 3 %, forget_attempt 2 %, on
four shared repositories (so writers contend for the same chains). ``--mcp-clients`` of them
use the official MCP client over /mcp, the rest REST /v1.

It reports throughput and p50/p95/p99 latency (overall and per operation), counts errors, checks
that no write was lost (every recorded, unforgotten attempt and every correction is there, read
back through recall SQL with an admin token) and that every chain verifies, over HTTP and again
when the file is reopened after the server stopped. Exit status 1 when any of that fails.
The embedder defaults to ``hash`` (deterministic, no model): the numbers are the HTTP + store path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mentis.config import Settings
from mentis.http import HttpConfig, build_app, listen, server
from mentis.service.memory import Memory
from mentis.service.tokens import TokenStore

REPOS = [f"github.com/load/repo-{i}" for i in range(4)]
MIX = [
    ("record_attempt", 35),
    ("search", 30),
    ("recall_sql", 10),
    ("recall_history", 10),
    ("mark_conclusion_outdated", 10),
    ("verify_integrity", 3),
    ("forget_attempt", 2),
]
WORDS = [
    *("cart", "total", "rounding", "coupon", "vat", "migration", "lock", "timeout", "cache", "redis"),
    *("flaky", "test", "retry", "timezone", "parser", "unicode", "import", "cycle", "memory", "leak"),
    *("deadlock", "index", "query", "plan"),
]


def serve(db: Path) -> None:
    """The server process: print the port, then serve until SIGTERM."""
    settings = Settings.from_env(db)
    tokens = TokenStore(db)
    memory = Memory.open(settings)
    config = HttpConfig(port=0, rate_per_second=1e9, rate_burst=1_000_000_000, request_timeout_s=120)
    sock = listen(config)
    print(sock.getsockname()[1], flush=True)
    server(build_app(memory, tokens, config), config).run(sockets=[sock])
    memory.close()
    tokens.close()


@dataclass
class Agent:
    """One client's view of what it wrote, to check nothing was lost."""

    index: int
    repo: str
    rng: random.Random
    attempts: dict[str, int] = field(default_factory=dict)  # attempt id -> corrections
    forgotten: set[str] = field(default_factory=set)
    task_of: dict[str, str] = field(default_factory=dict)  # attempt id -> task id

    def pick(self) -> str:
        names, weights = zip(*MIX, strict=True)
        return self.rng.choices(names, weights)[0]

    def text(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    def live(self) -> list[str]:
        return [a for a in self.attempts if a not in self.forgotten]

    def request(self, kind: str) -> tuple[str, dict[str, Any]]:
        """The tool and arguments of the next call (falls back to a record when nothing exists)."""
        live = self.live()
        if kind in ("mark_conclusion_outdated", "forget_attempt", "recall_history") and not live:
            kind = "record_attempt"
        if kind == "record_attempt":
            task = f"task-{self.index}-{self.rng.randrange(8)}"
            check = self.rng.choice([None, "passed", "failed"])
            args: dict[str, Any] = {
                "repository": self.repo,
                "task_id": task,
                "task_title": self.text(4),
                "action": self.text(8),
                "observation": self.text(20),
                "inference": self.text(6),
                "files": [f"src/{self.rng.choice(WORDS)}.py"],
            }
            if check:
                args["check"] = {"command": "pytest -q", "status": check}
            return "record_attempt", args
        if kind == "search":
            return "search", {"query": self.text(5), "limit": 10}
        if kind == "recall_sql":
            sql = "select repository, count(*) from attempts group by repository"
            return "recall", {"sql": sql}
        if kind == "recall_history":
            return "recall", {"repository": self.repo, "task_id": self.task_of[self.rng.choice(live)]}
        if kind == "mark_conclusion_outdated":
            aid = self.rng.choice(live)
            return kind, {"repository": self.repo, "attempt_id": aid, "reason": self.text(6)}
        if kind == "forget_attempt":
            return kind, {"repository": self.repo, "attempt_id": self.rng.choice(live), "reason": "load test"}
        return "verify_integrity", {}  # the token sees only its own chain

    def note(self, tool: str, args: dict[str, Any], result: dict[str, Any]) -> None:
        if tool == "record_attempt":
            self.attempts[result["attempt_id"]] = 0
            self.task_of[result["attempt_id"]] = args["task_id"]
        elif tool == "mark_conclusion_outdated":
            self.attempts[args["attempt_id"]] += 1
        elif tool == "forget_attempt":
            self.forgotten.add(args["attempt_id"])


@dataclass
class Results:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: list[str] = field(default_factory=list)


async def run_agent(agent: Agent, url: str, token: str, calls: int, use_mcp: bool, results: Results) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=120) as http:
        if use_mcp:
            async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
                for _ in range(calls):
                    tool, args = agent.request(agent.pick())
                    start = time.perf_counter()
                    out = await client.call_tool(tool, args)
                    results.latencies[tool].append(time.perf_counter() - start)
                    if out.is_error or not isinstance(out.structured_content, dict):
                        results.errors.append(f"mcp {tool}: {out.content}")
                    else:
                        agent.note(tool, args, out.structured_content)
            return
        for _ in range(calls):
            tool, args = agent.request(agent.pick())
            start = time.perf_counter()
            answer = await http.post(f"/v1/{tool}", json=args)
            results.latencies[tool].append(time.perf_counter() - start)
            if answer.status_code != 200:
                results.errors.append(f"rest {tool}: {answer.status_code} {answer.text[:300]}")
            else:
                agent.note(tool, args, answer.json())


async def read_back(url: str, admin: str) -> tuple[set[str], int, bool]:
    """Every attempt id and the number of corrections the server has, and whether it verifies."""
    ids: set[str] = set()
    async with httpx2.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=120
    ) as http:
        offset = 0
        while True:
            sql = "select attempt_id from attempts order by attempt_id limit 100 offset :o"
            page = (await http.post("/v1/recall", json={"sql": sql, "params": {"o": offset}})).json()
            ids |= {row[0] for row in page["rows"]}
            if len(page["rows"]) < 100:
                break
            offset += 100
        sql = "select count(*) from corrections"
        corrections = (await http.post("/v1/recall", json={"sql": sql})).json()["rows"][0][0]
        verified = (await http.post("/v1/verify_integrity", json={})).json()
    return ids, int(corrections), bool(verified.get("ok"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def summarise(values: list[float]) -> dict[str, float]:
    return {
        "count": len(values),
        "p50_ms": round(percentile(values, 0.50), 2),
        "p95_ms": round(percentile(values, 0.95), 2),
        "p99_ms": round(percentile(values, 0.99), 2),
        "mean_ms": round(statistics.fmean(values) * 1000, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--calls", type=int, default=200, help="calls per client")
    parser.add_argument("--mcp-clients", type=int, default=4, help="how many clients use MCP instead of REST")
    parser.add_argument("--embedder", default="hash", choices=["hash", "local"])
    parser.add_argument("--max-seconds", type=float, default=600)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "http-load.json")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return 0

    with tempfile.TemporaryDirectory(prefix="mentis-load-") as tmp:
        db = Path(tmp) / "mentis.db"
        env = {**os.environ, "MENTIS_DB": str(db), "MENTIS_EMBEDDER": args.embedder}
        tokens = TokenStore(db)
        admin, _ = tokens.create(scope="admin", agent="load-admin")
        agents = [
            Agent(i, REPOS[i % len(REPOS)], random.Random(args.seed * 1000 + i)) for i in range(args.clients)
        ]
        keys = [
            tokens.create(scope="write", repositories=(a.repo,), agent=f"load-{a.index}")[0] for a in agents
        ]
        tokens.close()
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(db)], env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None
            url = f"http://127.0.0.1:{int(proc.stdout.readline())}"
            results = Results()

            async def load() -> float:
                with anyio.fail_after(args.max_seconds):
                    start = time.perf_counter()
                    async with anyio.create_task_group() as tg:
                        for agent, key in zip(agents, keys, strict=True):
                            use_mcp = agent.index < args.mcp_clients
                            tg.start_soon(run_agent, agent, url, key, args.calls, use_mcp, results)
                    return time.perf_counter() - start

            elapsed = anyio.run(load)
            ids, corrections, verified_http = anyio.run(read_back, url, admin)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        reopened = Memory.open(Settings(home=db.parent, db_path=db, embedder=args.embedder))  # verifies
        chains = len(reopened.store.verify())
        reopened.close()

    expected = {a for agent in agents for a in agent.live()}
    expected_corrections = sum(
        c for agent in agents for a, c in agent.attempts.items() if a not in agent.forgotten
    )
    everything = [v for values in results.latencies.values() for v in values]
    report = {
        "clients": args.clients,
        "mcp_clients": min(args.mcp_clients, args.clients),
        "calls_per_client": args.calls,
        "embedder": args.embedder,
        "calls": len(everything),
        "seconds": round(elapsed, 2),
        "throughput_per_s": round(len(everything) / elapsed, 1),
        "latency": summarise(everything),
        "by_operation": {tool: summarise(v) for tool, v in sorted(results.latencies.items())},
        "errors": len(results.errors),
        "first_errors": results.errors[:5],
        "lost_attempts": len(expected - ids),
        "unexpected_attempts": len(ids - expected),
        "corrections": {"expected": expected_corrections, "found": corrections},
        "chains_verified_over_http": verified_http,
        "chains_verified_on_reopen": chains,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
    }
    ok = (
        not results.errors
        and report["lost_attempts"] == 0
        and report["unexpected_attempts"] == 0
        and corrections == expected_corrections
        and verified_http
        and report["calls"] == args.clients * args.calls
    )
    report["ok"] = ok
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    lat = report["latency"]
    print(
        f"{report['calls']} calls by {args.clients} clients in {report['seconds']} s: "
        f"{report['throughput_per_s']} calls/s, p50 {lat['p50_ms']} ms, p95 {lat['p95_ms']} ms; "
        f"errors {report['errors']}, lost {report['lost_attempts']}, "
        f"chains verified {verified_http and chains > 0} -> {args.out}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
