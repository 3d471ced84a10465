"""`mentis serve` writes nothing but JSON-RPC 2.0 messages on stdout, whatever it is sent.

A harness reads the server's stdout as newline-delimited JSON-RPC; one stray print (a banner, a
log line, a progress bar) breaks the session. These tests run the real `mentis serve` subprocess
(hash embedder) through sessions that call every tool, including failing calls, and check every
line the server wrote on stdout. Logs belong on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteReceiveStream, Process
from mcp import Client, StdioServerParameters

from mentis.service.operations import OPERATIONS

from .conftest import REPO

TOOLS = {op.name for op in OPERATIONS}
SHA = "89abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def hash_env(db_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        MENTIS_DB=str(db_path), MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="stdout-test", MENTIS_TOOLS="all"
    )
    return env


# --------------------------------------------------------------------------- the check


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def assert_jsonrpc(line: bytes) -> dict[str, Any]:
    """``line`` is exactly one JSON-RPC 2.0 request, notification or response (JSON, UTF-8)."""
    text = line.decode("utf-8")  # strict: invalid UTF-8 (e.g. an encoded lone surrogate) fails
    message = json.loads(text, parse_constant=_no_constants)
    assert isinstance(message, dict), f"not a JSON-RPC object: {text[:200]}"
    assert message.get("jsonrpc") == "2.0", f"no jsonrpc 2.0 marker: {text[:200]}"
    if "method" in message:
        assert isinstance(message["method"], str)
        assert "result" not in message and "error" not in message
        assert isinstance(message.get("params", {}), dict | list)
        if "id" in message:
            assert isinstance(message["id"], str | int) and not isinstance(message["id"], bool)
        assert set(message) <= {"jsonrpc", "method", "params", "id"}, text[:200]
    else:
        assert "id" in message, f"a response without an id: {text[:200]}"
        assert message["id"] is None or isinstance(message["id"], str | int)
        assert ("result" in message) != ("error" in message), text[:200]
        if "error" in message:
            error = message["error"]
            assert isinstance(error, dict)
            assert isinstance(error.get("code"), int) and not isinstance(error["code"], bool)
            assert isinstance(error.get("message"), str)
        assert set(message) <= {"jsonrpc", "id", "result", "error"}, text[:200]
    return message


def assert_all_jsonrpc(raw: bytes) -> list[dict[str, Any]]:
    assert raw.endswith(b"\n") or raw == b"", "stdout ends in a partial line"
    lines = raw.split(b"\n")[:-1] if raw else []
    assert all(line.strip() for line in lines), "blank line on stdout"
    return [assert_jsonrpc(line) for line in lines]


# --------------------------------------------------------------------------- a raw session


class RawSession:
    """Newline-delimited JSON-RPC over a real `mentis serve` process; keeps every stdout byte."""

    def __init__(self, process: Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self.stdout: ByteReceiveStream = process.stdout
        self.raw = bytearray()
        self._pending = bytearray()
        self._next_id = 0
        self.responses: dict[int | str | None, dict[str, Any]] = {}

    async def send_line(self, text: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(text.encode("utf-8") + b"\n")

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_line(json.dumps(message, ensure_ascii=False))

    async def _read_message(self) -> dict[str, Any]:
        while b"\n" not in self._pending:
            chunk = await self.stdout.receive()
            self.raw += chunk
            self._pending += chunk
        line, _, rest = bytes(self._pending).partition(b"\n")
        self._pending = bytearray(rest)
        return assert_jsonrpc(line)

    async def wait_for(self, request_id: int | str | None) -> dict[str, Any]:
        while request_id not in self.responses:
            message = await self._read_message()
            if "method" not in message:
                self.responses[message["id"]] = message
        return self.responses[request_id]

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.wait_for(self._next_id)

    async def call(self, tool: str, arguments: Any) -> dict[str, Any]:
        response = await self.request("tools/call", {"name": tool, "arguments": arguments})
        assert "result" in response, response
        return response["result"]

    async def drain(self) -> None:
        """Read stdout to EOF (after stdin was closed)."""
        async for chunk in self.stdout:
            self.raw += chunk


def _text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


@pytest.mark.anyio
async def test_a_raw_session_calling_every_tool_gets_only_jsonrpc_lines_on_stdout(
    hash_env: dict[str, str], tmp_path: Path
) -> None:
    stderr_path = tmp_path / "stderr.log"
    with anyio.fail_after(60), stderr_path.open("wb") as stderr:
        process = await anyio.open_process(
            [sys.executable, "-m", "mentis", "serve"], env=hash_env, stderr=stderr
        )
        async with process:
            s = RawSession(process)
            init = await s.request(
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw-jsonrpc-test", "version": "0"},
                },
            )
            assert "result" in init, init
            await s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

            listed = await s.request("tools/list")
            assert {t["name"] for t in listed["result"]["tools"]} == TOOLS

            # every tool, succeeding
            first = await s.call(
                "record_attempt",
                {
                    "repository": REPO,
                    "task_id": "checkout-rounding",
                    "task_title": "Cart total off",
                    "action": "applied the coupon before VAT",
                    "files": ["shop/cart.py"],
                    "observation": "totals match — €12.34 ✓ 😀",
                    "inference": "VAT after discount",
                    "check": {"command": "pytest", "status": "passed", "exit_code": 0, "output": "1 passed"},
                    "code_context": {
                        "commit": SHA,
                        "branch": "main",
                        "dirty": False,
                        "file_hashes": {"shop/cart.py": SHA},
                    },
                    "tags": ["billing"],
                },
            )
            assert not first.get("isError"), first
            attempt_id = first["structuredContent"]["attempt_id"]
            second = await s.call(
                "record_attempt",
                {
                    "repository": REPO,
                    "task_id": "checkout-rounding",
                    "action": "rounded lines",
                    "observation": "still off\nby a cent\ttab",
                    "check": {"command": "pytest", "status": "failed"},
                },
            )
            assert not second.get("isError"), second
            found = await s.call(
                "search",
                {"query": "cart total off by a cent", "current_file_hashes": {"shop/cart.py": "ab" * 20}},
            )
            assert found["structuredContent"]["tasks"], found
            rows = await s.call(
                "recall",
                {"sql": "select * from attempts where task_id = :t", "params": {"t": "checkout-rounding"}},
            )
            assert len(rows["structuredContent"]["rows"]) == 2
            history = await s.call("recall", {"repository": REPO, "task_id": "checkout-rounding"})
            assert len(history["structuredContent"]["rows"]) == 2
            marked = await s.call(
                "mark_conclusion_outdated",
                {
                    "repository": REPO,
                    "attempt_id": attempt_id,
                    "reason": "cart.py was rewritten",
                    "latest_commit": SHA,
                },
            )
            assert not marked.get("isError"), marked
            forgot = await s.call("forget_attempt", {"repository": REPO, "attempt_id": attempt_id})
            assert forgot["structuredContent"]["forgotten"] is True
            verified = await s.call("verify_integrity", {})
            assert verified["structuredContent"]["ok"] is True

            # every tool, failing
            failing = [
                (
                    "record_attempt",
                    {"repository": REPO, "task_id": "t", "action": "a", "observation": "o", "bogus": 1},
                ),
                (
                    "record_attempt",
                    {"repository": REPO, "task_id": "t", "action": "a", "observation": "x" * 70_000},
                ),
                ("search", {"query": "cart", "limit": 0}),
                ("search", {}),
                ("recall", {"sql": "delete from attempts"}),
                ("recall", {"sql": "select * from entries"}),
                ("recall", {}),
                (
                    "mark_conclusion_outdated",
                    {"repository": REPO, "attempt_id": attempt_id, "reason": "forgotten already"},
                ),
                ("forget_attempt", {"repository": REPO, "attempt_id": ""}),
                ("verify_integrity", {"bogus": True}),
                ("no_such_tool", {}),
                ("record_attempt", ["not", "an", "object"]),
                ("search", "a string"),
            ]
            for tool, arguments in failing:
                response = await s.request("tools/call", {"name": tool, "arguments": arguments})
                if "result" in response:
                    assert response["result"].get("isError") is True, (tool, response)
                    assert _text(response["result"]), response

            # protocol-level mistakes
            missing_name = await s.request("tools/call", {"arguments": {}})
            assert "error" in missing_name, missing_name
            unknown_method = await s.request("no/such/method")
            assert unknown_method["error"]["code"] == -32601
            await s.send({"jsonrpc": "2.0", "method": "notifications/no_such_thing"})
            await s.send_line("this is not json")
            await s.send_line('{"jsonrpc": "2.0", "id": "truncated", "method": "tools/li')
            await s.send_line(
                '{"jsonrpc":"2.0","id":"surrogate","method":"tools/call","params":'
                '{"name":"search","arguments":{"query":"bad \\ud800 text"}}}'
            )
            still_alive = await s.request("ping")
            assert still_alive.get("result") == {}, still_alive

            await process.stdin.aclose()  # type: ignore[union-attr]
            await s.drain()
            assert await process.wait() == 0

    messages = assert_all_jsonrpc(bytes(s.raw))
    assert len(messages) >= 12 + len(failing)
    log = stderr_path.read_text("utf-8", errors="replace")
    assert "serving MCP on stdio" in log  # the banner went to stderr, not stdout


@pytest.mark.anyio
async def test_invalid_json_on_stdin_is_answered_with_a_jsonrpc_parse_error(
    hash_env: dict[str, str], tmp_path: Path
) -> None:
    """JSON-RPC 2.0 §5.1: a line that is not JSON gets {"id": null, "error": {"code": -32700}},
    so a client is not left waiting. A request holding the JSON escape of a lone surrogate is
    such a line for the SDK's strict parser; its id is recovered, so that request is answered.
    (mcp 2.3.0's stdio transport drops such lines; `mentis.mcp.stdio.run_stdio` answers them.)"""
    with anyio.fail_after(60), (tmp_path / "stderr.log").open("wb") as stderr:
        process = await anyio.open_process(
            [sys.executable, "-m", "mentis", "serve"], env=hash_env, stderr=stderr
        )
        async with process:
            s = RawSession(process)
            await s.request(
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw-jsonrpc-test", "version": "0"},
                },
            )
            await s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            await s.send_line(
                '{"jsonrpc":"2.0","id":"surrogate","method":"tools/call","params":'
                '{"name":"search","arguments":{"query":"bad \\ud800 text"}}}'
            )
            await s.send_line("this is not json")
            await s.request("ping")
            await process.stdin.aclose()  # type: ignore[union-attr]
            await s.drain()
            await process.wait()
    messages = assert_all_jsonrpc(bytes(s.raw))
    answered = sorted((str(m["id"]), m["error"]["code"]) for m in messages if "error" in m)
    assert answered == [("None", -32700), ("surrogate", -32700)], f"server wrote {messages}"


# --------------------------------------------------------------------------- the official client

_TEE = r"""
import subprocess, sys
with open(sys.argv[1], "wb") as log:
    child = subprocess.Popen([sys.executable, "-m", "mentis", "serve"], stdout=subprocess.PIPE)
    for line in child.stdout:
        log.write(line)
        log.flush()
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    sys.exit(child.wait())
"""


@pytest.mark.anyio
async def test_a_client_session_calling_every_tool_sees_only_jsonrpc_on_the_servers_stdout(
    hash_env: dict[str, str], tmp_path: Path
) -> None:
    captured = tmp_path / "server-stdout.jsonl"
    params = StdioServerParameters(command=sys.executable, args=["-c", _TEE, str(captured)], env=hash_env)
    calls = 0
    with anyio.fail_after(60):
        async with Client(params) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            done = await client.call_tool(
                "record_attempt",
                {
                    "repository": REPO,
                    "task_id": "t1",
                    "action": "tried",
                    "observation": "saw ✓",
                    "check": {"command": "make test", "status": "passed"},
                },
            )
            assert not done.is_error, done.content
            attempt_id = done.structured_content["attempt_id"]  # type: ignore[index]
            script: list[tuple[str, dict[str, Any], bool]] = [
                ("search", {"query": "tried something"}, False),
                ("search", {"query": " "}, True),
                ("recall", {"repository": REPO, "task_id": "t1"}, False),
                ("recall", {"sql": "select count(*) as n from attempts"}, False),
                ("recall", {"sql": "pragma writable_schema=on"}, True),
                (
                    "mark_conclusion_outdated",
                    {"repository": REPO, "attempt_id": attempt_id, "reason": "moved on"},
                    False,
                ),
                (
                    "mark_conclusion_outdated",
                    {"repository": REPO, "attempt_id": attempt_id, "reason": "r", "latest_commit": "nope"},
                    True,
                ),
                (
                    "record_attempt",
                    {
                        "repository": REPO,
                        "task_id": "t1",
                        "action": "a",
                        "observation": "o",
                        "check": {"command": "x", "status": "ok"},
                    },
                    True,
                ),
                ("verify_integrity", {"repository": REPO}, False),
                ("forget_attempt", {"repository": REPO, "attempt_id": attempt_id}, False),
                ("forget_attempt", {"repository": REPO, "attempt_id": attempt_id}, True),
                ("verify_integrity", {"repository": "github.com/acme/none"}, True),
                ("no_such_tool", {}, True),
            ]
            for tool, arguments, fails in script:
                result = await client.call_tool(tool, arguments)
                assert result.is_error is fails, (tool, result.content)
                calls += 1
    messages = assert_all_jsonrpc(captured.read_bytes())
    responses = [m for m in messages if "method" not in m]
    assert len(responses) >= calls + 2  # + tools/list + record_attempt (+ the handshake)


def test_the_tee_used_above_passes_bytes_through_unchanged(tmp_path: Path) -> None:
    """The capture harness itself: what the child writes reaches both the log and the client."""
    log = tmp_path / "log"
    script = _TEE.replace(
        '[sys.executable, "-m", "mentis", "serve"]', '[sys.executable, "-c", "print(\'{\\"a\\": 1}\')"]'
    )
    out = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == log.read_bytes() == b'{"a": 1}\n'
