"""Drill: `mentis serve` is killed with SIGKILL at random moments while an agent records over MCP stdio.

Each round starts a real `mentis serve` subprocess on one shared store and drives it with the
official `mcp` client: three callers record attempts concurrently, each with a unique action text.
At a random moment (after a random number of acknowledged writes, then a random number of event
loop turns while other calls are in flight) the server gets SIGKILL. The store is then opened
(which verifies every chain) and must hold every acknowledged attempt exactly once, nothing that was
never sent, and nothing twice. Rounds accumulate on the same file, so later rounds also reopen
whatever the earlier kills left behind.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections import Counter
from pathlib import Path

import anyio
import anyio.lowlevel
import orjson
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from mentis.api.attempts import RecallInput, RecordAttemptInput
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory

from .scale import SIZES

pytestmark = [pytest.mark.drill, pytest.mark.slow]

REPOS = ("github.com/acme/shop", "github.com/acme/api")
CALLERS = 3
ROUND_DEADLINE_S = 90.0
CHECKER = Caller(agent_id="checker")
SEED = int(os.environ.get("MENTIS_DRILL_SEED", "1515"))

# `mentis serve`, after writing its own pid where the test can read it (the SDK keeps the process).
SERVE = r"""
import os, sys
with open(sys.argv[1], "w") as fh:
    fh.write(str(os.getpid()))
sys.argv = ["mentis", "serve"]
from mentis.cli import main
main()
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def stored_actions(memory: Memory) -> tuple[Counter[str], dict[str, list[int]]]:
    """Attempt actions as the (verified) ledger holds them, and the seqs of every chain."""
    actions: Counter[str] = Counter()
    seqs: dict[str, list[int]] = {}
    for entry, body in memory.store.iter_ledger():
        seqs.setdefault(entry.chain, []).append(entry.seq)
        if entry.kind == "attempt" and body is not None:
            actions[orjson.loads(body)["action"]] += 1
    return actions, seqs


class Round:
    """One server life: what was sent, what came back, and when the kill landed."""

    def __init__(self, number: int, rng: random.Random) -> None:
        self.number = number
        self.kill_after_acks = rng.randint(1, 12)
        self.turns_after = rng.randint(0, 400)
        self.sent: list[str] = []
        self.acked: list[str] = []
        self.killed = False

    async def run(self, params: StdioServerParameters, pidfile: Path, errlog: Path) -> None:
        with errlog.open("a") as err:
            try:
                async with (
                    Client(stdio_client(params, errlog=err)) as client,
                    anyio.create_task_group() as tg,
                ):
                    for worker in range(CALLERS):
                        tg.start_soon(self._record, client, worker)
                    await self._kill_when_due(pidfile)
                    tg.cancel_scope.cancel()
            except Exception:
                if not self.killed:  # a failure before the kill is a real failure
                    raise

    async def _record(self, client: Client, worker: int) -> None:
        for i in range(1_000_000):
            action = f"round {self.number} caller {worker} call {i} bisects the regression"
            self.sent.append(action)
            result = await client.call_tool(
                "record_attempt",
                {
                    "repository": REPOS[(worker + i) % len(REPOS)],
                    "task_id": f"t{i % 5}",
                    "action": action,
                    "observation": f"step {i} narrows it down",
                },
            )
            assert not result.is_error, result.content
            self.acked.append(action)

    async def _kill_when_due(self, pidfile: Path) -> None:
        while len(self.acked) < self.kill_after_acks:
            await anyio.lowlevel.checkpoint()
        for _ in range(self.turns_after):  # a random moment while other calls are in flight
            await anyio.lowlevel.checkpoint()
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
        self.killed = True


@pytest.mark.anyio
async def test_a_server_killed_at_random_moments_keeps_every_acknowledged_write_exactly_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mentis.db"
    pidfile = tmp_path / "serve.pid"
    errlog = tmp_path / "serve.err"
    env = dict(os.environ, MENTIS_DB=str(path), MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="kill-drill")
    params = StdioServerParameters(command=sys.executable, args=["-c", SERVE, str(pidfile)], env=env)
    rng = random.Random(SEED)
    acked: set[str] = set()
    sent: set[str] = set()
    unacked_but_stored = 0
    for number in range(SIZES.kills):
        r = Round(number, rng)
        with anyio.fail_after(ROUND_DEADLINE_S):
            await r.run(params, pidfile, errlog)
        assert r.killed and len(r.acked) >= r.kill_after_acks
        acked.update(r.acked)
        sent.update(r.sent)

        # Opening verifies every chain; a damaged or forked chain raises here.
        memory = Memory.open(Settings(home=tmp_path, db_path=path, embedder="hash"), HashEmbedder())
        try:
            assert memory.verify_integrity(CHECKER).ok
            actions, seqs = stored_actions(memory)
            count = memory.recall(CHECKER, RecallInput(sql="SELECT count(*) FROM attempts")).rows
        finally:
            memory.close()
        assert {a for a, n in actions.items() if n > 1} == set(), f"round {number}: stored twice"
        assert acked <= set(actions), f"round {number}: lost {sorted(acked - set(actions))[:3]}"
        assert set(actions) <= sent, f"round {number}: stored what was never sent"
        assert all(s == list(range(len(s))) for s in seqs.values()), f"round {number}: a gap in a chain"
        assert count == [[sum(actions.values())]]
        unacked_but_stored = len(set(actions) - acked)

    # Calls committed by the server whose answer the kill swallowed are kept once, never twice.
    sys.stderr.write(
        f"kill drill: {SIZES.kills} kills, {len(acked)} acknowledged, "
        f"{unacked_but_stored} committed but unacknowledged, all verified\n"
    )
    # And the store goes on: one more write after the last kill lands at the next seq.
    memory = Memory.open(Settings(home=tmp_path, db_path=path, embedder="hash"), HashEmbedder())
    try:
        before = stored_actions(memory)[1][REPOS[0]]
        done = memory.record_attempt(
            CHECKER,
            RecordAttemptInput(repository=REPOS[0], task_id="t0", action="after the drill", observation="ok"),
        )
        assert done.ledger.seq == len(before)
    finally:
        memory.close()
