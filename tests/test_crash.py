"""A writer killed with SIGKILL loses nothing it acknowledged and never breaks the chain.

The writer is a subprocess that prints a line only after a call returned. The test reads a
bounded number of lines, kills the process mid-stream, then opens (and so verifies) the store.
Writes that embed inside their transaction (rebuild, import) are killed while the
transaction is open, through an embedder that reports and then blocks.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import RecallInput, RecordAttemptInput, SearchInput
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory

from .child_lines import Lines

REPOS = ("github.com/acme/shop", "github.com/acme/api")
DEADLINE_S = 60.0
CALLER = Caller(agent_id="checker")

pytestmark = pytest.mark.slow

WRITER = r"""
import json, sys
from pathlib import Path
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.api.attempts import RecordAttemptInput

path, repos = Path(sys.argv[1]), sys.argv[2:]
memory = Memory.open(Settings(home=path.parent, db_path=path, embedder="hash"), HashEmbedder())
caller = Caller(agent_id="crashy")
for i in range(1_000_000):
    repo = repos[i % len(repos)]
    r = memory.record_attempt(caller, RecordAttemptInput(
        repository=repo, task_id=f"t{i % 7}", action=f"attempt {i} bisects the regression",
        observation=f"step {i} narrows it down"))
    print(json.dumps({"attempt_id": r.attempt_id, "repository": repo, "seq": r.ledger.seq}), flush=True)
"""

# An embedder that, once armed, says so on stdout and blocks: the caller is inside its
# write transaction (rebuild and import embed there), so a kill lands mid-transaction.
BLOCKING = r"""
import sys
from pathlib import Path
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory


class Blocking(HashEmbedder):
    armed = False

    def embed(self, texts):
        if self.armed:
            print("inside", flush=True)
            sys.stdin.readline()
        return super().embed(texts)


path, op = Path(sys.argv[1]), sys.argv[2]
embedder = Blocking()
memory = Memory.open(Settings(home=path.parent, db_path=path, embedder="hash"), embedder)
embedder.armed = True
if op == "rebuild":
    memory.rebuild()
else:
    with open(sys.argv[3], "rb") as fh:
        memory.import_(Caller(agent_id="importer"), fh)
print("finished", flush=True)
"""


def spawn(script: str, args: list[str], err: Path) -> subprocess.Popen[bytes]:
    with err.open("wb") as fh:
        return subprocess.Popen(
            [sys.executable, "-c", script, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=fh,
            bufsize=0,
        )


def kill(proc: subprocess.Popen[bytes], deadline: float) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=max(0.1, deadline - time.monotonic())) == -signal.SIGKILL


def reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def settings_for(path: Path) -> Settings:
    return Settings(home=path.parent, db_path=path, embedder="hash")


def entries(path: Path) -> list[tuple[str, int, str, str]]:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT chain, seq, kind, id FROM entries ORDER BY chain, seq").fetchall()
    finally:
        con.close()


def continuous(rows: list[tuple[str, int, str, str]]) -> dict[str, int]:
    seqs: dict[str, list[int]] = {}
    for chain, seq, _, _ in rows:
        seqs.setdefault(chain, []).append(seq)
    for chain, found in seqs.items():
        assert found == list(range(len(found))), chain
    return {c: len(s) for c, s in seqs.items()}


def record(memory: Memory, repo: str, task: str, action: str, observation: str) -> str:
    req = RecordAttemptInput(repository=repo, task_id=task, action=action, observation=observation)
    return memory.record_attempt(CALLER, req).attempt_id


def answers(memory: Memory) -> list[Any]:
    """What the store says, for before/after comparisons."""
    out: list[Any] = []
    for q in ("flaky cache test", "timeout retry", "the"):
        out.append(memory.search(CALLER, SearchInput(query=q)).model_dump())
    out.append(memory.recall(CALLER, RecallInput(repository=REPOS[0], task_id="cache")).model_dump())
    return out


def seed(path: Path) -> Memory:
    memory = Memory.open(settings_for(path), HashEmbedder())
    for i in range(300):  # more than one embedding batch (128)
        record(memory, REPOS[i % 2], "cache" if i % 3 else "retry", f"flaky cache test {i}", f"timeout {i}")
    return memory


# ---------------------------------------------------------------- killed while recording


def test_a_writer_killed_mid_stream_keeps_every_acknowledged_attempt(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    deadline = time.monotonic() + DEADLINE_S
    proc = spawn(WRITER, [str(path), *REPOS], tmp_path / "writer.err")
    try:
        lines = Lines(proc)
        acks = []
        for _ in range(30):
            line = lines.next(deadline)
            assert line is not None, (tmp_path / "writer.err").read_text()
            acks.append(json.loads(line))
        kill(proc, deadline)  # mid-stream: the writer was still recording
        while (line := lines.next(deadline)) is not None:  # acknowledged before the kill
            if line.endswith("}"):
                acks.append(json.loads(line))
    finally:
        reap(proc)

    memory = Memory.open(settings_for(path), HashEmbedder())  # verifies every chain
    try:
        rows = entries(path)
        per_chain = continuous(rows)
        stored = {aid: (chain, seq) for chain, seq, kind, aid in rows if kind == "attempt"}
        assert len(stored) == len(rows) >= len(acks) >= 30
        assert {a["attempt_id"]: (a["repository"], a["seq"]) for a in acks}.items() <= stored.items()
        assert memory.verify_integrity(CALLER).ok
        found = memory.recall(CALLER, RecallInput(sql="SELECT count(*) FROM attempts"))
        assert found.rows == [[len(stored)]]

        # the chain goes on where it stopped
        after = memory.record_attempt(
            CALLER,
            RecordAttemptInput(repository=REPOS[0], task_id="t0", action="resume", observation="ok"),
        )
        assert after.ledger.seq == per_chain[REPOS[0]]
    finally:
        memory.close()


# ---------------------------------------------------------------- killed inside a transaction


def test_a_rebuild_killed_mid_transaction_leaves_the_derived_tables_as_they_were(
    tmp_path: Path,
) -> None:
    path = tmp_path / "crash.db"
    memory = seed(path)
    before = answers(memory)
    memory.close()

    deadline = time.monotonic() + DEADLINE_S
    proc = spawn(BLOCKING, [str(path), "rebuild"], tmp_path / "rebuild.err")
    try:
        assert Lines(proc).next(deadline) == "inside", (tmp_path / "rebuild.err").read_text()
        kill(proc, deadline)
    finally:
        reap(proc)

    memory = Memory.open(settings_for(path), HashEmbedder())
    try:
        assert answers(memory) == before
        assert memory.verify_integrity(CALLER).ok
    finally:
        memory.close()


def test_an_import_killed_mid_transaction_writes_nothing_and_can_be_run_again(
    tmp_path: Path,
) -> None:
    source = seed(tmp_path / "source.db")
    dump = io.BytesIO()
    count = source.export(CALLER, dump)
    expected = list(source.store.iter_ledger())
    source.close()
    export = tmp_path / "ledger.jsonl"
    export.write_bytes(dump.getvalue())

    target = tmp_path / "target.db"
    Memory.open(settings_for(target), HashEmbedder()).close()
    deadline = time.monotonic() + DEADLINE_S
    proc = spawn(BLOCKING, [str(target), "import", str(export)], tmp_path / "import.err")
    try:
        assert Lines(proc).next(deadline) == "inside", (tmp_path / "import.err").read_text()
        kill(proc, deadline)
    finally:
        reap(proc)

    assert entries(target) == []
    memory = Memory.open(settings_for(target), HashEmbedder())
    try:
        assert memory.verify_integrity(CALLER).chains == []
        assert memory.import_(CALLER, export.read_bytes().splitlines()) == count
        assert list(memory.store.iter_ledger()) == expected
        history = memory.recall(CALLER, RecallInput(repository=REPOS[0], task_id="cache"))
        assert len(history.rows) == 100
    finally:
        memory.close()
