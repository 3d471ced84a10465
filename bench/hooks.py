"""Hook latency, and the similarity threshold under which a hook says nothing.

    .venv/bin/python bench/hooks.py [--runs 3] [--calls 20] [--local-calls 5]
                                    [--out bench/results/hooks.json]

Latency: the real `mentis hook claude-code <event>` command (a new process per call, as a harness
runs it) on a real git checkout and a store of 200 attempts embedded with the real model, in two
modes:

- ``http``: hooks talk to a running ``mentis serve --http`` (model loaded once, in the server);
- ``local``: no server configured. post-tool-use hands the attempt to a background child and
  returns (the child's time is not counted; the next call starts after it ended);
  user-prompt-submit opens the store and loads the model itself.

For each mode and event (post-tool-use recording a failed pytest; user-prompt-submit searching and
answering with context) it makes ``--calls`` calls after two warm-up calls and takes p50 and p95;
this is repeated ``--runs`` times and the medians of those are reported.

Threshold: 12 attempts on different subjects and, for each, a prompt paraphrasing its problem in
other words; the cosine of each prompt to its own attempt (what ``score_parts.vector`` reports) is
set against its best cosine to any other attempt.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mentis.integrations.hooks.recorder import wait_for_pending

ROOT = Path(__file__).resolve().parents[1]
MENTIS = [sys.executable, "-m", "mentis"]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
}

PAIRS = [
    (
        "cart total is off by one cent after applying a percentage coupon; rounding each line "
        "before summing fixed it",
        "the basket sum is a penny wrong when a discount code is used",
    ),
    (
        "login fails with 401 after the session cookie expires because the refresh token is not sent",
        "users get logged out and see unauthorized errors when their session times out",
    ),
    (
        "PDF invoice export crashes on names with accents: the font lacks the glyphs",
        "exporting bills to pdf throws an error for customers with umlauts in their name",
    ),
    (
        "flaky test_checkout_timeout: the payment mock answers after the 2 s client timeout under load",
        "the checkout test fails randomly on CI because the fake payment provider is slow",
    ),
    (
        "database migration 0042 locks the orders table for minutes on production-sized data",
        "schema change blocks writes to orders for a long time on the big database",
    ),
    (
        "memory grows without bound in the image resize worker: PIL images are never closed",
        "the thumbnail service leaks RAM until it is killed by the OOM killer",
    ),
    (
        "search results ignore the language filter because the query builder drops empty facets",
        "filtering search by locale does nothing, results in all languages still show up",
    ),
    (
        "email notifications are sent twice: the retry handler does not check the idempotency key",
        "customers receive duplicate confirmation mails after an order",
    ),
    (
        "CSV import misreads dates as month/day for European files; parse with the declared locale",
        "uploading a spreadsheet from Germany swaps day and month in the date column",
    ),
    (
        "websocket connections drop every 60 s behind the nginx proxy: proxy_read_timeout too low",
        "live updates disconnect once a minute when running behind the reverse proxy",
    ),
    (
        "mypy reports incompatible types in the pydantic validators after the v2 upgrade",
        "type checker errors in model validation code since moving to the new pydantic major",
    ),
    (
        "docker image build takes 20 minutes because the dependency layer is invalidated by every "
        "source change",
        "container builds are very slow since any code edit reinstalls all packages",
    ),
]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, check=True, capture_output=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def fill(home: Path, n: int) -> None:
    """``n`` attempts with the real model, in-process (only the setup, not measured)."""
    from mentis.api.attempts import RecordAttemptInput
    from mentis.api.common import parse
    from mentis.config import Settings
    from mentis.service.memory import Caller, Memory

    memory = Memory.open(Settings(home=home, db_path=home / "mentis.db", embedder="local"))
    try:
        for i in range(n):
            action, prompt = PAIRS[i % len(PAIRS)]
            memory.record_attempt(
                Caller(agent_id="bench"),
                parse(
                    RecordAttemptInput,
                    {
                        "repository": "github.com/acme/shop",
                        "task_id": f"task-{i}",
                        "action": action,
                        "observation": f"{prompt} (case {i})",
                        "files": [f"src/module_{i % 17}.py"],
                        "check": {"command": "pytest -q", "status": "failed" if i % 3 else "passed"},
                    },
                ),
            )
    finally:
        memory.close()


def run_hook(env: dict[str, str], repo: Path, event: str, payload: dict[str, Any]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [*MENTIS, "hook", "claude-code", event],
        cwd=repo,
        env=env,
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"hook exited {done.returncode}: {done.stderr}")
    # without a server the attempt is recorded by a background child: let it finish (not timed),
    # so one call's recording does not slow down the next call
    wait_for_pending(Path(env["MENTIS_HOME"]))
    return elapsed * 1000


def measure(env: dict[str, str], repo: Path, calls: int, home: Path) -> dict[str, dict[str, float]]:
    payloads = {
        "post-tool-use": {
            "cwd": str(repo),
            "hook_event_name": "PostToolUseFailure",
            "tool_name": "Bash",
            "tool_input": {"command": "pytest -q"},
            "error": "Exit code 1\nFAILED tests/test_cart.py::test_total - rounding off by a cent\n1 failed",
        },
        "user-prompt-submit": {
            "cwd": str(repo),
            "hook_event_name": "UserPromptSubmit",
            "prompt": "the basket sum is a penny wrong when a discount code is used",
        },
    }
    out = {}
    start = []  # a Python process that does nothing, on the same machine at the same time: the floor
    for _ in range(calls):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        start.append((time.perf_counter() - t0) * 1000)
    out["python -c pass"] = {"p50_ms": percentile(start, 0.5), "p95_ms": percentile(start, 0.95)}
    for event, payload in payloads.items():
        for _ in range(2):
            run_hook(env, repo, event, payload)
        times = [run_hook(env, repo, event, payload) for _ in range(calls)]
        out[event] = {"p50_ms": percentile(times, 0.5), "p95_ms": percentile(times, 0.95)}
    log = home / "logs" / "hook-errors.jsonl"
    if log.exists():
        raise SystemExit(f"hooks logged errors: {log.read_text()}")
    return out


def serve(home: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MENTIS_HOME": str(home), "MENTIS_EMBEDDER": "local"}
    env.pop("MENTIS_DB", None)
    proc = subprocess.Popen(
        [*MENTIS, "serve", "--http", f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                if (home / "admin.token").exists():
                    return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise SystemExit("mentis serve --http exited")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("mentis serve --http did not start within 120 s")


def latency(runs: int, calls: int, local_calls: int, modes: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for mode in modes:
        per_run: list[dict[str, dict[str, float]]] = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory(prefix="mentis-bench-hooks-") as tmp:
                home, repo = Path(tmp) / "home", Path(tmp) / "shop"
                home.mkdir()
                repo.mkdir()
                git(repo, "init", "-q", "-b", "fix/cart-rounding")
                git(repo, "remote", "add", "origin", "git@github.com:acme/shop.git")
                (repo / "cart.py").write_text("def total(items):\n    return sum(items)\n")
                git(repo, "add", ".")
                git(repo, "commit", "-q", "-m", "init")
                (repo / "cart.py").write_text("def total(items):\n    return round(sum(items), 2)\n")
                fill(home, 200)
                env = {k: v for k, v in os.environ.items() if not k.startswith("MENTIS_")}
                env.update(GIT_ENV, MENTIS_HOME=str(home), MENTIS_EMBEDDER="local")
                (home / "hooks.toml").write_text("[context]\nmin_similarity = 0.0\n")  # always answer
                if mode == "http":
                    port = free_port()
                    server = serve(home, port)
                    try:
                        env.update(
                            MENTIS_HOOK_URL=f"http://127.0.0.1:{port}",
                            MENTIS_HOOK_TOKEN_FILE=str(home / "admin.token"),
                        )
                        per_run.append(measure(env, repo, calls, home))
                    finally:
                        server.send_signal(signal.SIGINT)
                        server.wait(timeout=60)
                else:
                    per_run.append(measure(env, repo, local_calls, home))
        results[mode] = {
            event: {
                key: round(statistics.median(r[event][key] for r in per_run), 1)
                for key in ("p50_ms", "p95_ms")
            }
            for event in per_run[0]
        }
        results[mode]["runs"] = per_run
    return results


def threshold() -> dict[str, Any]:
    from mentis.api.attempts import RecordAttemptInput, SearchInput
    from mentis.api.common import parse
    from mentis.config import Settings
    from mentis.service.memory import Caller, Memory

    with tempfile.TemporaryDirectory(prefix="mentis-bench-threshold-") as tmp:
        memory = Memory.open(Settings(home=Path(tmp), db_path=Path(tmp) / "m.db", embedder="local"))
        caller = Caller(agent_id="bench")
        try:
            for i, (action, _) in enumerate(PAIRS):
                memory.record_attempt(
                    caller,
                    parse(
                        RecordAttemptInput,
                        {"repository": "r", "task_id": f"t{i}", "action": action, "observation": action},
                    ),
                )
            own, other = [], []
            for i, (_, prompt) in enumerate(PAIRS):
                found = memory.search(caller, SearchInput(query=prompt, repository="r", limit=len(PAIRS)))
                scores = {t.task_id: t.score_parts.vector or 0.0 for t in found.tasks}
                own.append(round(scores.get(f"t{i}", 0.0), 3))
                other.append(round(max(v for k, v in scores.items() if k != f"t{i}"), 3))
        finally:
            memory.close()
    return {
        "own": own,
        "best_other": other,
        "own_min": min(own),
        "own_median": statistics.median(own),
        "other_max": max(other),
        "other_median": statistics.median(other),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--local-calls", type=int, default=5)
    parser.add_argument("--modes", default="http,local", help="http, local or both (comma-separated)")
    parser.add_argument("--skip-threshold", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "hooks.json")
    args = parser.parse_args()
    if shutil.which("git") is None:
        raise SystemExit("git is needed")
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load": os.getloadavg()},
        "threshold": None if args.skip_threshold else threshold(),
        "latency": latency(args.runs, args.calls, args.local_calls, args.modes.split(",")),
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    t = report["threshold"]
    if t:
        print(
            f"threshold: own-attempt cosine min {t['own_min']} median {t['own_median']}; "
            f"best other max {t['other_max']} median {t['other_median']}"
        )
    for mode in args.modes.split(","):
        for event in ("python -c pass", "post-tool-use", "user-prompt-submit"):
            r = report["latency"][mode][event]
            print(f"{mode:6} {event:20} p50 {r['p50_ms']:8.1f} ms   p95 {r['p95_ms']:8.1f} ms")


if __name__ == "__main__":
    main()
