"""A small run of bench/http_load.py: concurrent REST and MCP clients, no errors, no lost writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench" / "http_load.py"


@pytest.mark.slow
def test_concurrent_clients_over_rest_and_mcp_lose_no_write_and_every_chain_verifies(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    command = [
        sys.executable,
        str(BENCH),
        "--clients",
        "4",
        "--calls",
        "25",
        "--mcp-clients",
        "2",
        "--max-seconds",
        "120",
        "--out",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["calls"] == 100
    assert (report["errors"], report["lost_attempts"], report["unexpected_attempts"]) == (0, 0, 0)
    assert report["corrections"]["expected"] == report["corrections"]["found"]
    assert report["chains_verified_over_http"] is True and report["chains_verified_on_reopen"] > 0
    assert report["latency"]["p95_ms"] > 0
