"""Drill: a thousand hook calls, concurrent sessions and killed hooks leave one background server
per store, and none once the idle period has passed.

claude-mem's users report its workers leaking by the hundreds (tens of GB). Here two stores (two
``MENTIS_HOME``s of one user) are used from two checkouts of each of two repositories at once:

1. Killed hooks. With no server yet, a burst of real ``mentis hook`` processes starts on each store
   at once (prompts and checks, over the four checkouts); on each store two prompt hooks are killed
   with SIGKILL, one as soon as the store's socket is bound (by whichever hook took the lock; the
   server may not run yet) and one once a server process runs.
2. A thousand calls. Four processes, one per checkout and harness, make the hook's own calls
   (``open_backend`` then one REST call: tests/drills/hook_calls.py) alternating over both stores,
   all released at once so they race to start the servers. Before each wave both servers are
   killed with SIGKILL (a crash: their sockets stay behind), so each wave races to replace them.
   At full size (``make drill``) the thousand calls are real ``mentis hook`` processes instead, six
   at a time.

Throughout, a sampler reads /proc: never more than one server of a store at once. After the calls
exactly one runs per store; every check that was not killed and every recording that answered is
recorded exactly once; no hook logged an error; once the idle period has passed, none is left and
their sockets are gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import RecallInput
from mentis.config import Settings
from mentis.integrations.hooks.recorder import wait_for_pending
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from tests.integrations.hook_helpers import (
    env_for,
    errors,
    git,
    make_repo,
    mentis,
    popen_hook,
    server_sockets,
    servers,
    stop_servers,
    wait_until,
)

from .scale import REPORTS, SIZES

pytestmark = [pytest.mark.drill, pytest.mark.slow]

IDLE_S = 4
WAVES = 2
WORKERS = 4
"""One per checkout: two checkouts of each of two repositories."""
BURST = 6
START_S = 120.0
CALLER = Path(__file__).with_name("hook_calls.py")


class Sampler(threading.Thread):
    """Counts each store's live servers every 50 ms; keeps the most seen at once."""

    def __init__(self, root: Path, homes: list[Path]) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.homes = homes
        self.most = dict.fromkeys(homes, 0)
        self.samples = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.05):
            sockets = server_sockets(self.root).values()
            for home in self.homes:
                live = sum(1 for s in sockets if s.startswith(f"{home.resolve()}/"))
                self.most[home] = max(self.most[home], live)
            self.samples += 1


def socket_bound(home: Path) -> bool:
    return any((home / "run").glob("*.sock")) if (home / "run").exists() else False


def check(cwd: Path, case: str, harness: str) -> dict[str, Any]:
    """A failed ``pytest -q`` as ``harness`` reports it: Claude Code fires PostToolUseFailure,
    Codex a PostToolUse whose response carries the exit code."""
    payload: dict[str, Any] = {"cwd": str(cwd), "tool_name": "Bash", "tool_input": {"command": "pytest -q"}}
    if harness == "codex":
        response = {"exit_code": 1, "output": f"invoice rounding {case}"}
        return {**payload, "hook_event_name": "PostToolUse", "tool_response": response}
    return {
        **payload,
        "hook_event_name": "PostToolUseFailure",
        "error": f"Exit code 1\ninvoice rounding {case}",
    }


def ask(cwd: Path) -> dict[str, Any]:
    return {"cwd": str(cwd), "hook_event_name": "UserPromptSubmit", "prompt": "invoice rounding"}


def observed(case: str) -> str:
    return f"`pytest -q` failed (exit 1): invoice rounding {case}"


def observations(home: Path) -> list[str]:
    """Every attempt's observation in the store, read through the library 100 rows at a time."""
    memory = Memory.open(Settings(home=home, db_path=home / "mentis.db", embedder="hash"), HashEmbedder())
    found: list[str] = []
    try:
        while True:
            sql = f"select observation from attempts order by observation limit 100 offset {len(found)}"
            rows = memory.recall(Caller(agent_id="reader"), RecallInput(sql=sql)).rows
            found += [str(row[0]) for row in rows]
            if len(rows) < 100:
                return found
    finally:
        memory.close()


def kill_servers(homes: list[Path]) -> int:
    killed = [pid for home in homes for pid in servers(home)]
    for pid in killed:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: all(servers(h) == [] for h in homes), START_S, "the killed servers gone")
    return len(killed)


def test_a_thousand_hook_calls_from_concurrent_sessions_and_killed_hooks_leave_one_server_per_store(
    tmp_path: Path,
) -> None:
    homes = [tmp_path / "store-a", tmp_path / "store-b"]
    for home in homes:
        home.mkdir(mode=0o700)
        (home / "hooks.toml").write_text("[context]\nmin_similarity = 0.2\n")
    envs = {home: env_for(home, MENTIS_HOOK_IDLE_S=str(IDLE_S)) for home in homes}
    shop = make_repo(tmp_path / "shop", remote="git@github.com:acme/shop.git")
    api = make_repo(tmp_path / "api", branch="fix/auth", remote="git@github.com:acme/api.git")
    git(shop, "worktree", "add", "-q", "-b", "fix/coupons", str(tmp_path / "shop-2"))
    git(api, "worktree", "add", "-q", "-b", "fix/tokens", str(tmp_path / "api-2"))
    checkouts = [shop, tmp_path / "shop-2", api, tmp_path / "api-2"]
    harnesses = ["claude-code", "codex", "claude-code", "codex"]
    expected: dict[Path, list[str]] = {home: [] for home in homes}  # observations that must be recorded
    report: dict[str, Any] = {"size": SIZES.name, "calls": 0, "killed_hooks": 0, "killed_servers": 0}
    sampler = Sampler(tmp_path, homes)
    sampler.start()
    started = time.monotonic()
    try:
        # 1. a burst on each store at once, with no server yet; two hooks of each killed as they start it
        bursts: dict[Path, list[subprocess.Popen[bytes]]] = {}
        for home in homes:
            bursts[home] = []
            for i in range(BURST):
                cwd = checkouts[i % len(checkouts)]
                if i < 2:  # the victims are prompts, so every check that ran is one that was not killed
                    bursts[home].append(popen_hook(envs[home], "user-prompt-submit", ask(cwd), cwd))
                else:
                    expected[home].append(observed(f"burst {i}"))
                    payload = check(cwd, f"burst {i}", "claude-code")
                    bursts[home].append(popen_hook(envs[home], "post-tool-use", payload, cwd))
        for home in homes:
            wait_until(lambda home=home: socket_bound(home), START_S, "a socket bound")
            bursts[home][0].kill()
        for home in homes:
            wait_until(lambda home=home: bool(servers(home)), START_S, "a server started")
            bursts[home][1].kill()
        for home in homes:
            codes = [proc.wait(timeout=START_S) for proc in bursts[home]]
            assert codes[2:] == [0] * (BURST - 2) and set(codes[:2]) <= {0, -signal.SIGKILL}, codes
            report["killed_hooks"] += codes[:2].count(-signal.SIGKILL)
            report["calls"] += BURST
            wait_for_pending(home)  # the checks' detached recorders
            assert len(servers(home)) == 1, servers(home)

        # 2. the thousand calls, in waves that each begin with both servers crashed
        per_wave = -(-max(SIZES.hook_calls - report["calls"], 0) // (WAVES * WORKERS)) * WORKERS
        for wave in range(WAVES):
            report["killed_servers"] += kill_servers(homes)
            if SIZES.name == "full":
                report["calls"] += _hook_processes(envs, homes, checkouts, per_wave, wave, expected)
            else:
                report["calls"] += _hook_streams(envs, homes, checkouts, harnesses, per_wave, expected)
            for home in homes:
                wait_for_pending(home)
                assert len(servers(home)) == 1, f"wave {wave}: {servers(home)} serve {home}"
        report["seconds_calls"] = round(time.monotonic() - started, 1)
        for home in homes:
            assert errors(home) == []
            recorded = observations(home)
            assert sorted(recorded) == sorted(expected[home])  # each recorded once, none lost

        # 3. none left after the idle period
        wait_until(lambda: all(servers(h) == [] for h in homes), IDLE_S + START_S, "no server after idle")
        assert [list((h / "run").glob("*.sock")) for h in homes] == [[], []]
        report["seconds"] = round(time.monotonic() - started, 1)
    finally:
        sampler.done.set()
        sampler.join()
        for home in homes:
            stop_servers(home)
    assert sampler.most == dict.fromkeys(homes, 1), sampler.most
    report |= {"samples": sampler.samples, "most_servers_of_a_store_at_once": 1, "load": os.getloadavg()}
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / "hook-servers.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


def _hook_streams(
    envs: dict[Path, dict[str, str]],
    homes: list[Path],
    checkouts: list[Path],
    harnesses: list[str],
    calls: int,
    expected: dict[Path, list[str]],
) -> int:
    """``calls`` calls from one process per checkout, released at once; the calls made."""
    env = envs[homes[0]]  # the script names each store itself
    workers = [
        subprocess.Popen(
            [sys.executable, str(CALLER), str(cwd), harness, str(calls // WORKERS), *map(str, homes)],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for cwd, harness in zip(checkouts, harnesses, strict=True)
    ]
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
    for worker in workers:  # go
        assert worker.stdin is not None
        worker.stdin.write("\n")
        worker.stdin.flush()
    made = 0
    for worker in workers:
        out, _ = worker.communicate(timeout=START_S * 2)
        assert worker.returncode == 0
        for line in map(json.loads, out.splitlines()):
            assert "error" not in line, line
            if line["operation"] == "record_attempt":
                expected[Path(line["home"])].append(line["observation"])
            made += 1
    assert made == calls // WORKERS * WORKERS
    return made


def _hook_processes(
    envs: dict[Path, dict[str, str]],
    homes: list[Path],
    checkouts: list[Path],
    calls: int,
    wave: int,
    expected: dict[Path, list[str]],
) -> int:
    """``calls`` real ``mentis hook`` processes, six at a time; the calls made."""

    def one(n: int) -> None:
        home, cwd = homes[n % 2], checkouts[n // 2 % len(checkouts)]
        harness = ("claude-code", "codex")[n // 8 % 2]
        if n % 4 == 3:
            case = f"wave {wave} call {n}"
            event, payload = "post-tool-use", check(cwd, case, harness)
            expected[home].append(observed(case))
        else:
            event, payload = "user-prompt-submit", ask(cwd)
        done = mentis(envs[home], "hook", harness, event, cwd=cwd, stdin=json.dumps(payload))
        assert (done.returncode, done.stderr) == (0, "")

    with ThreadPoolExecutor(6) as pool:
        for job in [pool.submit(one, n) for n in range(calls)]:
            job.result(timeout=START_S * 2)
    return calls
