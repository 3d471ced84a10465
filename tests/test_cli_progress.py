"""Progress bars go to stderr, and only when it is a terminal: stdout stays the data."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import threading
from pathlib import Path

from mentis.api.attempts import RecordAttemptInput
from mentis.api.common import parse
from mentis.service.memory import Caller, Memory

from .conftest import MENTIS, REPO


def _fill(memory: Memory, caller: Caller, n: int = 300) -> None:
    for i in range(n):
        data = {"repository": REPO, "task_id": f"T-{i}", "action": "ran", "observation": f"saw {i}"}
        memory.record_attempt(caller, parse(RecordAttemptInput, data))


def _run_with_terminal_stderr(args: list[str], env: dict[str, str]) -> tuple[int, bytes, str]:
    """Run ``args`` with stderr on a pseudo-terminal; returns (exit code, stdout, terminal text)."""
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        done = subprocess.run(
            args,
            stdout=subprocess.PIPE,
            stderr=slave,
            stdin=subprocess.DEVNULL,
            env={**env, "TERM": "xterm", "COLUMNS": "100"},
            timeout=120,
            check=False,
        )
    finally:
        os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    return done.returncode, done.stdout, b"".join(chunks).decode("utf-8", "replace")


def test_export_to_stdout_draws_progress_on_the_terminal_and_keeps_stdout_pure_jsonl(
    memory: Memory, caller: Caller, mentis_env: dict[str, str]
) -> None:
    _fill(memory, caller)
    memory.close()
    code, out, terminal = _run_with_terminal_stderr([*MENTIS, "export", "-"], mentis_env)
    assert code == 0, terminal
    lines = out.decode().splitlines()
    assert len(lines) == 301
    assert all(isinstance(json.loads(line), dict) for line in lines)
    assert "exporting" in terminal and "exported 300 entries" in terminal


def test_import_and_rebuild_draw_progress_only_on_a_terminal(
    memory: Memory, caller: Caller, mentis_env: dict[str, str], tmp_path: Path
) -> None:
    _fill(memory, caller, 40)
    memory.close()
    dump = tmp_path / "dump.jsonl"
    subprocess.run([*MENTIS, "export", str(dump)], env=mentis_env, check=True, capture_output=True)
    other = {**mentis_env, "MENTIS_DB": str(tmp_path / "other.db")}
    code, out, terminal = _run_with_terminal_stderr([*MENTIS, "import", str(dump)], other)
    assert code == 0 and out == b""
    assert "importing" in terminal and "imported 40 entries" in terminal
    piped = subprocess.run([*MENTIS, "rebuild"], env=other, capture_output=True, text=True, check=True)
    assert piped.stdout == ""
    assert piped.stderr == "rebuilt derived tables from 40 ledger entries\n"
