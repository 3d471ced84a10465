"""Drill: writes on a filesystem that fills up.

Two real OS-level faults, no layer of our own in between:

- a small tmpfs mounted for the test (CI runs as root; where ``mount`` is not permitted the test
  skips and says so), filled through `mentis serve` over MCP stdio: SQLite gets ENOSPC;
- ``RLIMIT_FSIZE`` in a child process with SIGXFSZ ignored, so a write past the limit fails with
  EFBIG: this one runs everywhere, root or not.

Either way the failing call is a clear ``[store]`` error, nothing half-written is left (the ledger
holds exactly the acknowledged writes and verifies), and once space returns the same store opens,
verifies and accepts writes again.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from mentis.api.attempts import RecallInput, RecordAttemptInput
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory

pytestmark = [pytest.mark.drill, pytest.mark.slow]

REPO = "github.com/acme/shop"
CHECKER = Caller(agent_id="checker")
MAX_WRITES = 2_000  # a bound: the filesystems below fill long before this


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def observation(i: int) -> str:
    """About 12 KB of words, different for every write (so the term index grows too)."""
    rng = random.Random(i)
    return " ".join(f"w{rng.randrange(10**6)}" for _ in range(1_500))


def attempt(i: int) -> dict[str, Any]:
    return {
        "repository": REPO,
        "task_id": f"t{i % 3}",
        "action": f"write number {i} fills the disk",
        "observation": observation(i),
    }


def reopened_actions(path: Path) -> list[str]:
    """Open (so verify) the store and list the attempts the ledger holds, in order."""
    memory = Memory.open(Settings(home=path.parent, db_path=path, embedder="hash"), HashEmbedder())
    try:
        assert memory.verify_integrity(CHECKER).ok
        actions = [
            json.loads(body)["action"]
            for entry, body in memory.store.iter_ledger()
            if entry.kind == "attempt" and body is not None
        ]
        count = memory.recall(CHECKER, RecallInput(sql="SELECT count(*) FROM attempts")).rows
        assert count == [[len(actions)]]
        return actions
    finally:
        memory.close()


def write_after(path: Path, i: int) -> None:
    """The store accepts a write again, and reads find it."""
    memory = Memory.open(Settings(home=path.parent, db_path=path, embedder="hash"), HashEmbedder())
    try:
        memory.record_attempt(CHECKER, RecordAttemptInput(**attempt(i)))
        sql = "SELECT action FROM attempts WHERE action = :a"
        found = memory.recall(CHECKER, RecallInput(sql=sql, params={"a": attempt(i)["action"]}))
        assert found.rows == [[attempt(i)["action"]]]
    finally:
        memory.close()


# --------------------------------------------------------------------------- a tmpfs that fills up


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(
            f"mount -t tmpfs is not permitted here ({done.stderr.strip()}); the RLIMIT_FSIZE drill runs"
        )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True, capture_output=True)


def grow(mnt: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True, capture_output=True)


@pytest.mark.anyio
async def test_a_full_tmpfs_gives_a_clear_store_error_and_the_store_recovers_when_space_returns(
    small_tmpfs: Path, tmp_path: Path
) -> None:
    path = small_tmpfs / "mentis.db"
    env = dict(os.environ, MENTIS_DB=str(path), MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="disk-drill")
    params = StdioServerParameters(command=sys.executable, args=["-m", "mentis", "serve"], env=env)
    acked: list[str] = []
    with (tmp_path / "serve.err").open("w") as err, anyio.fail_after(240):
        async with Client(stdio_client(params, errlog=err)) as client:
            error = None
            for i in range(MAX_WRITES):
                result = await client.call_tool("record_attempt", attempt(i))
                if result.is_error:
                    error = str(result.content[0].text)  # type: ignore[union-attr]
                    break
                acked.append(attempt(i)["action"])
            assert error is not None, "the 1 MB filesystem never filled"
            assert error.removeprefix("Error executing tool record_attempt: ").startswith("[store] "), error
            assert "disk" in error and "free some disk space" in error, error
            assert acked, "not one write fitted before the disk filled"
            # Reads still answer while the disk is full, and show only acknowledged writes.
            count = await client.call_tool("recall", {"sql": "SELECT count(*) FROM attempts"})
            assert not count.is_error, count.content
            assert count.structured_content is not None
            assert count.structured_content["rows"] == [[len(acked)]]

            grow(small_tmpfs)  # space returns; the same server accepts writes again
            again = await client.call_tool("record_attempt", attempt(MAX_WRITES))
            assert not again.is_error, again.content
            acked.append(attempt(MAX_WRITES)["action"])

    assert reopened_actions(path) == acked
    write_after(path, MAX_WRITES + 1)


# --------------------------------------------------------------------------- RLIMIT_FSIZE (EFBIG)

FSIZE_WRITER = r"""
import json, resource, signal, sys
from pathlib import Path
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.errors import MentisError
from mentis.service.memory import Caller, Memory
from mentis.api.attempts import RecordAttemptInput
from tests.drills.test_disk_full import MAX_WRITES, attempt

path = Path(sys.argv[1])
memory = Memory.open(Settings(home=path.parent, db_path=path, embedder="hash"), HashEmbedder())
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
for i in range(MAX_WRITES):
    try:
        memory.record_attempt(Caller(agent_id="fsize"), RecordAttemptInput(**attempt(i)))
    except MentisError as exc:
        print(json.dumps({"error": exc.code, "message": exc.message}), flush=True)
        break
    print(json.dumps({"acked": attempt(i)["action"]}), flush=True)
memory.close()
"""


def test_a_file_size_limit_gives_a_clear_store_error_and_the_store_recovers_without_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mentis.db"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", FSIZE_WRITER, str(path)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=root,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    acked = [line["acked"] for line in lines if "acked" in line]
    assert acked, done.stderr[-3000:]
    last = lines[-1]
    assert last["error"] == "store", last
    assert "free some disk space" in last["message"], last
    # Without the limit (space returned) the store opens, verifies, holds exactly what was
    # acknowledged, and takes new writes.
    assert reopened_actions(path) == acked
    write_after(path, MAX_WRITES + 1)
