"""What `mentis serve --remote` adds to a call: latency direct over HTTP vs through the proxy.

    .venv/bin/python bench/remote_proxy.py [--runs 3] [--calls 30] [--out bench/results/remote_proxy.json]

A real `mentis serve --http` (hash embedder, so the model's time does not hide the transport's) on
a fresh store; the official MCP client calls it directly over streamable HTTP, and through a real
`mentis serve --remote` child over stdio, without and with a signing key (registered by `mentis
agent keygen`). For each path it times ``--calls`` `search` calls and ``--calls`` `record_attempt`
calls after two warm-up calls each (0.12 s apart, under the server's rate limit per token), and
takes the median; the medians of ``--runs`` runs are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp import Client
from tests.remote_support import MENTIS, direct_client, http_server, make_token, proxy_params

AGENT = "bench-agent"
GAP_S = 0.12
"""Pause between calls: the server allows a token 20 requests/s, and a signed write makes two."""


def _attempt(i: int) -> dict[str, Any]:
    return {
        "repository": "github.com/acme/shop",
        "task_id": f"task-{i % 7}",
        "action": f"tried change number {i} to the cart rounding",
        "observation": f"observation {i}: the cart total was checked against the invoice",
        "files": ["shop/cart.py"],
    }


async def _time(client: Client, calls: int, offset: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for tool in ("search", "record_attempt"):
        samples = []
        for i in range(calls + 2):
            args = {"query": f"cart total rounding {i}"} if tool == "search" else _attempt(offset + i)
            start = time.perf_counter()
            result = await client.call_tool(tool, args)
            elapsed = time.perf_counter() - start
            assert not result.is_error, result.content
            if i >= 2:
                samples.append(elapsed * 1000)
            await anyio.sleep(GAP_S)
        out[tool] = statistics.median(samples)
    return out


async def _run(calls: int, home: Path) -> dict[str, dict[str, float]]:
    db = home / "mentis.db"
    env = {**os.environ, "MENTIS_DB": str(db), "MENTIS_HOME": str(home), "MENTIS_EMBEDDER": "hash"}
    env.pop("MENTIS_AGENT_ID", None)
    token = make_token(db, AGENT)
    key = home / "bench.pem"
    keygen = [*MENTIS, "agent", "keygen", "--agent", AGENT, "--out", str(key), "--json"]
    proxy_env = {k: v for k, v in env.items() if k != "MENTIS_DB"}
    proxy_env.update(MENTIS_TOKEN=token, MENTIS_HOME=str(home / "proxy"))
    results: dict[str, dict[str, float]] = {}
    async with http_server(env) as url:
        async with direct_client(url, token) as direct:
            results["direct_http"] = await _time(direct, calls, 0)
        async with Client(proxy_params(url, proxy_env)) as proxy:
            results["proxy"] = await _time(proxy, calls, 1000)
        subprocess.run(keygen, env=env, check=True, capture_output=True)
        async with Client(proxy_params(url, {**proxy_env, "MENTIS_SIGNING_KEY": str(key)})) as proxy:
            results["proxy_signed"] = await _time(proxy, calls, 2000)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as home:
            runs.append(anyio.run(_run, args.calls, Path(home)))
    report = {
        path: {tool: round(statistics.median(r[path][tool] for r in runs), 2) for tool in runs[0][path]}
        for path in runs[0]
    }
    doc = {
        "median_ms": report,
        "runs": args.runs,
        "calls": args.calls,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    text = json.dumps(doc, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
