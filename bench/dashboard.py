"""Dashboard page latency on a large store: every page through the whole HTTP app.

    .venv/bin/python bench/dashboard.py [--size 100000] [--repeats 3] [--requests 15]
                                        [--out bench/results/dashboard.json]

The store is filled in bulk by ``bench/fill.py``'s ``bulk_fill`` (the store's own append and
derivation code, random unit vectors), then a few corrections, a forget and thoughts are added
through ``Memory`` so every part of a page has something to show. The app is the one
``serve --http`` builds (token auth, middleware, sessions, templates), driven in process by
Starlette's TestClient after signing in with an admin token; search embeds its query with the real
local model. Each page is requested ``--requests`` times per run; the table shows the median over
``--repeats`` runs of each run's p50 and p95.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlette.testclient import TestClient

from fill import bulk_fill
from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecallInput
from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput
from mentis.config import Settings
from mentis.http import HttpConfig, build_app
from mentis.providers.embed.local import LocalEmbedder
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _decorate(memory: Memory) -> dict[str, str]:
    """Corrections, a forget and a few related thoughts on the largest repository's busiest task."""
    admin = Caller(agent_id="bench")
    rows = memory.repository_overview(admin)
    repo = max(rows, key=lambda r: r.attempts).repository
    top = memory.task_page(admin, repo, per_page=100).tasks
    busiest = max(top, key=lambda t: t.row.attempts).row.task_id
    history = memory.recall(admin, parse(RecallInput, {"repository": repo, "task_id": busiest})).rows
    for row in history[:2]:
        memory.mark_conclusion_outdated(
            admin, parse(MarkOutdatedInput, {"repository": repo, "attempt_id": row[0], "reason": "bench"})
        )
    memory.forget_attempt(admin, parse(ForgetInput, {"repository": repo, "attempt_id": history[-1][0]}))
    first = memory.append_thought(
        admin,
        parse(AppendThoughtInput, {"repository": repo, "type": "Hypothesis", "content": "the cache is cold"}),
    ).thought_id
    second = memory.append_thought(
        admin,
        parse(
            AppendThoughtInput,
            {
                "repository": repo,
                "type": "Finding",
                "content": "the cache is warm but keyed wrongly",
                "relations": [{"kind": "Supersedes", "target_id": first}],
            },
        ),
    ).thought_id
    agent = memory.task_page(admin, repo).agents[0]
    return {"repository": repo, "task": busiest, "thought": second, "agent": agent}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("bench/results/dashboard.json"))
    parser.add_argument(
        "--filled", type=Path, help="copy this store (made by an earlier bulk fill) instead of filling"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "mentis.db"
        if args.filled is not None:
            shutil.copyfile(args.filled, db)
            fill: dict[str, Any] = {"copied_from": str(args.filled)}
        else:
            print(f"filling {args.size:,} attempts ...", file=sys.stderr)
            fill = bulk_fill(db, args.size, seed=7)
        memory = Memory.open(Settings(home=Path(tmp), db_path=db), LocalEmbedder.load())
        tokens = TokenStore(db)
        try:
            ids = _decorate(memory)
            memory.warm_up()
            token, _ = tokens.create(scope="admin", agent="bench")
            app = build_app(memory, tokens, HttpConfig(rate_per_second=1e6, rate_burst=1_000_000))
            client = TestClient(app, base_url="http://127.0.0.1")
            login = client.get("/dashboard/login").text
            csrf = login.split('name="csrf" value="')[1].split('"')[0]
            client.post("/dashboard/login", data={"csrf": csrf, "token": token})
            repo = {"repository": ids["repository"]}
            pages = {
                "repositories": "/dashboard/",
                "tasks (page 1)": f"/dashboard/tasks?{urlencode(repo)}",
                "tasks (last page)": f"/dashboard/tasks?{urlencode({**repo, 'page': 10**6})}",
                "tasks (status=failed)": f"/dashboard/tasks?{urlencode({**repo, 'status': 'failed'})}",
                "tasks (status=outdated)": f"/dashboard/tasks?{urlencode({**repo, 'status': 'outdated'})}",
                "tasks (agent)": f"/dashboard/tasks?{urlencode({**repo, 'agent': ids['agent']})}",
                "task timeline": f"/dashboard/task?{urlencode({**repo, 'task_id': ids['task']})}",
                "search (real model)": "/dashboard/search?q=flaky+test+after+cache+change",
                "thoughts": "/dashboard/thoughts?include_invalidated=1",
                "thought + graph": f"/dashboard/thought?id={ids['thought']}",
                "admin": "/dashboard/admin",
            }
            total = memory.task_page(Caller(agent_id="bench"), ids["repository"]).total
            pages["tasks (last page)"] = f"/dashboard/tasks?{urlencode({**repo, 'page': -(-total // 25)})}"
            for url in pages.values():  # warm: indexes loaded, templates compiled
                response = client.get(url)
                assert response.status_code == 200, (url, response.status_code, response.text[:300])
            results: dict[str, Any] = {}
            for name, url in pages.items():
                p50s, p95s = [], []
                for _ in range(args.repeats):
                    samples = []
                    for _ in range(args.requests):
                        t0 = time.perf_counter()
                        client.get(url)
                        samples.append((time.perf_counter() - t0) * 1000)
                    p50s.append(_pct(samples, 0.5))
                    p95s.append(_pct(samples, 0.95))
                results[name] = {"p50_ms": statistics.median(p50s), "p95_ms": statistics.median(p95s)}
                p50, p95 = results[name]["p50_ms"], results[name]["p95_ms"]
                print(f"{name:26s} p50 {p50:7.1f} ms   p95 {p95:7.1f} ms")
            slowest = max(results, key=lambda k: results[k]["p50_ms"])
            report = {
                "size": args.size,
                "largest_repository_attempts": max(
                    r.attempts for r in memory.repository_overview(Caller("b"))
                ),
                "largest_repository_tasks": total,
                "fill": fill,
                "repeats": args.repeats,
                "requests_per_run": args.requests,
                "pages": results,
                "slowest": slowest,
                "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
            }
            print(f"slowest page: {slowest} (p50 {results[slowest]['p50_ms']:.1f} ms)")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=2) + "\n")
            client.close()
        finally:
            tokens.close()
            memory.close()


if __name__ == "__main__":
    main()
