"""Peak memory of a real ``mentis serve`` (MCP over stdio) on a given SQLite file.

The server is a subprocess started the way a harness starts it. Over its stdin the bench speaks
newline-delimited JSON-RPC (MCP's stdio framing): ``initialize``, ``notifications/initialized``,
then ``tools/call search``. ``serve`` preloads the in-process indexes in the background, and a
search waits for that preload (both take the indexes' locks), so once the first answer is in, the
preload is done: ``VmHWM`` (peak resident set) and ``VmRSS`` are then read from
``/proc/<pid>/status``. A few more searches follow before the second reading.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

PROTOCOL = "2025-06-18"


def proc_status(pid: int) -> dict[str, int]:
    """The ``Vm*`` / ``Rss*`` lines of ``/proc/<pid>/status``, in bytes."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.startswith(("Vm", "Rss")) and value.strip().endswith("kB"):
            out[key] = int(value.split()[0]) * 1024
    return out


class StdioPeer:
    """One JSON-RPC peer over a subprocess's stdin/stdout, each read bounded by a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self._in, self._out = proc, proc.stdin, proc.stdout
        self._next = 0

    def send(self, method: str, params: dict[str, Any], notify: bool = False) -> int:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            self._next += 1
            msg["id"] = self._next
        self._in.write(json.dumps(msg).encode() + b"\n")
        self._in.flush()
        return self._next

    def wait(self, msg_id: int, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer to request {msg_id} within {timeout_s:.0f} s")
            ready, _, _ = select.select([self._out], [], [], left)
            if not ready:
                continue
            line = _readline(self._out)
            if not line:
                raise RuntimeError(f"serve exited (code {self.proc.poll()}) before answering")
            msg = json.loads(line)
            if msg.get("id") == msg_id:
                return dict(msg)

    def call(self, method: str, params: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        return self.wait(self.send(method, params), timeout_s)


def _readline(stream: IO[bytes]) -> bytes:
    return stream.readline()


def serve_memory(db: Path, queries: list[str], timeout_s: float = 1800.0) -> dict[str, Any]:
    """Start ``mentis serve`` on ``db``, search once (which waits for the preload), read its peak
    RSS, search the other ``queries``, read it again, and stop the server."""
    env = dict(os.environ, MENTIS_DB=str(db), MENTIS_HOME=str(db.parent), MENTIS_AGENT_ID="bench-rss")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mentis", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        peer = StdioPeer(proc)
        init = {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        }
        peer.call("initialize", init, timeout_s)
        ready_s = time.perf_counter() - t0
        peer.send("notifications/initialized", {}, notify=True)
        after_open = proc_status(proc.pid)
        t1 = time.perf_counter()
        first = peer.call("tools/call", {"name": "search", "arguments": {"query": queries[0]}}, timeout_s)
        if first.get("error") or first.get("result", {}).get("isError"):
            raise RuntimeError(f"search failed: {first}")
        first_search_s = time.perf_counter() - t1
        preloaded = proc_status(proc.pid)
        for q in queries[1:]:
            peer.call("tools/call", {"name": "search", "arguments": {"query": q}}, timeout_s)
        searched = proc_status(proc.pid)
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {
        "ready_s": ready_s,
        "first_search_s (waits for the preload)": first_search_s,
        "rss_after_open_mb": after_open["VmRSS"] / 1e6,
        "peak_rss_after_preload_mb": preloaded["VmHWM"] / 1e6,
        "rss_after_preload_mb": preloaded["VmRSS"] / 1e6,
        "peak_rss_after_searches_mb": searched["VmHWM"] / 1e6,
        "rss_after_searches_mb": searched["VmRSS"] / 1e6,
        "rss_anon_after_searches_mb": searched.get("RssAnon", 0) / 1e6,
        "rss_file_after_searches_mb": searched.get("RssFile", 0) / 1e6,
        "searches": len(queries),
    }
