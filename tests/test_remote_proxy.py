"""`mentis serve --remote`: a real proxy child on stdio in front of a real `mentis serve --http`
child (or, where the test neither stops, pauses nor restarts the server, the same app served in this
process), driven by the official MCP client. The proxy publishes the remote's tools, forwards every call
and hands back the remote's answer unchanged; a server that is down or refuses the token gives a
clear error, never a hang."""

from __future__ import annotations

import signal
import subprocess
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mcp import Client
from mcp.types import CallToolResult

from mentis.ledger import signing
from mentis.service.operations import OPERATIONS
from mentis.service.tokens import TokenStore

from .conftest import MENTIS, REPO
from .remote_support import (
    direct_client,
    error_text,
    http_server,
    http_server_process,
    keygen_here,
    ledger_rows,
    live_server,
    make_token,
    ok,
    proxy_params,
)

AGENT = "proxied-agent"
ATTEMPT = {
    "repository": REPO,
    "task_id": "cart-rounding",
    "task_title": "Cart total is off by a cent",
    "action": "Rounded the cart total once instead of per line",
    "files": ["shop/cart.py"],
    "observation": "The total now matches the invoice for every sample cart",
    "check": {"command": "pytest tests/test_cart.py", "status": "passed", "exit_code": 0},
}

WRITE_TOKEN_TOOLS = {op.name for op in OPERATIONS if not op.admin}
"""What a server serving every tool lists for a write token (admin tools are an admin token's)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def token(db_path: Path) -> str:
    return make_token(db_path, AGENT)


@pytest.fixture
def proxy_env(mentis_env: dict[str, str], token: str, tmp_path: Path) -> dict[str, str]:
    """The proxy's environment: the token in MENTIS_TOKEN, and no store of its own to fall back on."""
    env = {k: v for k, v in mentis_env.items() if k not in ("MENTIS_DB", "MENTIS_AGENT_ID")}
    env.update(MENTIS_TOKEN=token, MENTIS_HOME=str(tmp_path / "proxy-home"))
    return env


@pytest.mark.anyio
async def test_the_proxy_publishes_exactly_the_remote_tools_and_forwards_a_round_trip(
    mentis_env: dict[str, str], proxy_env: dict[str, str], token: str
) -> None:
    with anyio.fail_after(90):
        async with http_server(mentis_env) as url:
            async with direct_client(url, token) as direct:
                remote_tools = (await direct.list_tools()).tools
            async with Client(proxy_params(url, proxy_env)) as proxy:
                tools = (await proxy.list_tools()).tools
                assert [t.model_dump() for t in tools] == [t.model_dump() for t in remote_tools]
                assert {t.name for t in tools} == WRITE_TOKEN_TOOLS

                recorded = ok(await proxy.call_tool("record_attempt", ATTEMPT))
                assert recorded["status"] == "passed"
                found = ok(await proxy.call_tool("search", {"query": "cart total rounded wrong by a cent"}))
                assert [(t["task_id"], t["attempt"]["attempt_id"]) for t in found["tasks"]] == [
                    ("cart-rounding", recorded["attempt_id"])
                ]
                history = ok(
                    await proxy.call_tool("recall", {"repository": REPO, "task_id": "cart-rounding"})
                )
                columns = history["columns"]
                (row,) = history["rows"]
                assert row[columns.index("attempt_id")] == recorded["attempt_id"]
                assert row[columns.index("agent_id")] == AGENT  # the token's agent: the server decides
            async with direct_client(url, token) as direct:
                again = await direct.call_tool("recall", {"repository": REPO, "task_id": "cart-rounding"})
                assert ok(again) == history


@pytest.mark.anyio
async def test_a_tool_error_comes_back_from_the_proxy_exactly_as_the_remote_gave_it(
    mentis_env: dict[str, str], proxy_env: dict[str, str], db_path: Path, token: str
) -> None:
    calls = [
        ("recall", {"sql": "SELECT nope FROM nowhere"}),
        ("record_attempt", {**ATTEMPT, "colour": "blue"}),
        ("mark_conclusion_outdated", {"repository": REPO, "attempt_id": "0" * 32, "reason": "stale"}),
    ]
    with anyio.fail_after(90):
        async with live_server(db_path) as url:
            async with direct_client(url, token) as direct:
                expected = [await direct.call_tool(name, args) for name, args in calls]
            async with Client(proxy_params(url, proxy_env)) as proxy:
                got = [await proxy.call_tool(name, args) for name, args in calls]
    for want, have in zip(expected, got, strict=True):
        assert want.is_error and have.is_error
        assert [c.model_dump() for c in have.content] == [c.model_dump() for c in want.content]
    assert "[query]" in error_text(got[0])
    assert "colour: is not a known field" in error_text(got[1])
    assert "[not_found]" in error_text(got[2])


@pytest.mark.anyio
async def test_a_server_that_goes_down_gives_a_clear_error_and_the_proxy_reconnects_when_it_is_back(
    mentis_env: dict[str, str], proxy_env: dict[str, str]
) -> None:
    with anyio.fail_after(120):
        async with AsyncExitStack() as stack:
            async with http_server(mentis_env) as url:
                proxy = await stack.enter_async_context(Client(proxy_params(url, proxy_env)))
                assert ok(await proxy.call_tool("search", {"query": "cart total"}))["tasks"] == []
            down = await proxy.call_tool("search", {"query": "cart total"})
            text = error_text(down)
            assert text.startswith("Error executing tool search: [unavailable] the remote Mentis at "), text
            assert "cannot connect" in text, text
            port = url.rsplit(":", 1)[1].split("/")[0]
            async with http_server(mentis_env, f"127.0.0.1:{port}"):
                back = ok(await proxy.call_tool("search", {"query": "cart total"}))
                assert back["tasks"] == []


@pytest.mark.anyio
async def test_a_server_that_stops_answering_gives_an_error_within_the_timeout_not_a_hang(
    mentis_env: dict[str, str], proxy_env: dict[str, str]
) -> None:
    with anyio.fail_after(90):
        async with (
            http_server_process(mentis_env) as (url, server),
            Client(proxy_params(url, proxy_env, "--timeout", "3")) as proxy,
        ):
            assert ok(await proxy.call_tool("search", {"query": "cart total"}))["tasks"] == []
            server.send_signal(signal.SIGSTOP)  # the socket stays open; nothing answers
            try:
                with anyio.fail_after(30):
                    stuck = await proxy.call_tool("search", {"query": "cart total"})
            finally:
                server.send_signal(signal.SIGCONT)
            text = error_text(stuck)
            assert text.startswith("Error executing tool search: [unavailable] "), text
            assert "did not answer search within 3 s" in text or "no answer in time" in text, text
            back = await proxy.call_tool("search", {"query": "cart total"})
            assert ok(back)["tasks"] == []


@pytest.mark.anyio
async def test_a_token_revoked_while_the_proxy_runs_gives_a_clear_error_naming_the_token(
    mentis_env: dict[str, str], proxy_env: dict[str, str], db_path: Path
) -> None:
    tokens = TokenStore(db_path)
    try:
        secret, info = tokens.create(scope="write", repositories=("*",), agent="short-lived")
    finally:
        tokens.close()
    with anyio.fail_after(90):
        async with (
            live_server(db_path) as url,
            Client(proxy_params(url, {**proxy_env, "MENTIS_TOKEN": secret})) as proxy,
        ):
            assert ok(await proxy.call_tool("search", {"query": "cart total"}))["tasks"] == []
            done = await anyio.run_process([*MENTIS, "token", "revoke", info.id], env=mentis_env, check=False)
            assert done.returncode == 0, done.stderr
            refused = await proxy.call_tool("search", {"query": "cart total"})
    assert "[unavailable]" in error_text(refused) and "refused the token (HTTP 401)" in error_text(refused)


@pytest.mark.anyio
async def test_https_with_a_private_ca_works_with_ca_file_and_fails_clearly_without(
    mentis_env: dict[str, str], proxy_env: dict[str, str], tmp_path: Path
) -> None:
    from mentis.http.tls import self_signed

    cert, key = self_signed(tmp_path / "tls")
    with anyio.fail_after(90):
        async with http_server(
            mentis_env, "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key", str(key)
        ) as url:
            assert url.startswith("https://")
            untrusted = await anyio.run_process(
                [*MENTIS, "serve", "--remote", url], env=proxy_env, check=False
            )
            assert untrusted.returncode == 12
            assert b"TLS failed" in untrusted.stderr and b"--ca-file" in untrusted.stderr
            async with Client(proxy_params(url, proxy_env, "--ca-file", str(cert))) as proxy:
                assert ok(await proxy.call_tool("search", {"query": "cart total"}))["tasks"] == []


@pytest.mark.anyio
async def test_calls_over_the_tokens_rate_limit_get_a_clear_error_and_the_others_their_answers(
    mentis_env: dict[str, str], proxy_env: dict[str, str], db_path: Path
) -> None:
    results: list[CallToolResult] = []
    with anyio.fail_after(120):
        async with live_server(db_path) as url, Client(proxy_params(url, proxy_env)) as proxy:

            async def one(i: int) -> None:
                results.append(await proxy.call_tool("search", {"query": f"cart total {i}"}))

            async with anyio.create_task_group() as tg:
                for i in range(150):  # the server allows bursts of 60, then 20 per second per token
                    tg.start_soon(one, i)
    limited = [r for r in results if r.is_error]
    assert limited, "no call was rate limited"
    for r in limited:
        assert "refused the request (HTTP 429: too many requests for this token)" in error_text(r)
    assert all(ok(r)["tasks"] == [] for r in results if not r.is_error)
    assert len(results) - len(limited) >= 60


def test_a_refused_token_stops_the_proxy_at_start_with_a_clear_error(
    mentis_env: dict[str, str], proxy_env: dict[str, str], db_path: Path
) -> None:
    async def run() -> subprocess.CompletedProcess[bytes]:
        async with live_server(db_path) as url:
            env = {**proxy_env, "MENTIS_TOKEN": "mentis_not-a-real-token"}
            return await anyio.run_process([*MENTIS, "serve", "--remote", url], env=env, check=False)

    done = anyio.run(run)
    assert done.returncode == 12, done.stderr
    assert b"refused the token (HTTP 401)" in done.stderr
    assert done.stdout == b""


def test_a_server_that_is_down_at_start_stops_the_proxy_with_a_clear_error(proxy_env: dict[str, str]) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run(
        [*MENTIS, "serve", "--remote", f"http://127.0.0.1:{port}/mcp"],
        env=proxy_env,
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 12, done.stderr
    assert b"is unavailable: cannot connect" in done.stderr
    assert done.stdout == b""


@pytest.mark.parametrize(
    ("args", "env_token", "message"),
    [
        (["--token", "abc"], True, b"--token is refused"),
        ([], False, b"--remote needs a token"),
        (["--token-file", "/nonexistent/token"], False, b"cannot read the token file"),
        (["--http"], True, b"--remote serves stdio"),
    ],
    ids=["token-on-command-line", "no-token", "unreadable-token-file", "with-http"],
)
def test_the_proxy_refuses_a_token_it_should_not_take_or_cannot_find(
    proxy_env: dict[str, str], args: list[str], env_token: bool, message: bytes
) -> None:
    env = dict(proxy_env) if env_token else {k: v for k, v in proxy_env.items() if k != "MENTIS_TOKEN"}
    done = subprocess.run(
        [*MENTIS, "serve", "--remote", "http://127.0.0.1:9/mcp", *args],
        env=env,
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode in (2, 10), done.stderr
    assert message in done.stderr
    assert done.stdout == b""


def test_plain_http_to_another_host_is_refused_so_the_token_never_crosses_a_network_in_clear(
    proxy_env: dict[str, str],
) -> None:
    done = subprocess.run(
        [*MENTIS, "serve", "--remote", "http://mentis.example.com/mcp"],
        env=proxy_env,
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 10
    assert b"plain http would send the token in clear text" in done.stderr


# --------------------------------------------------------------------------- signing through the proxy


@pytest.fixture
def alice_key(db_path: Path, tmp_path: Path) -> Ed25519PrivateKey:
    """AGENT registered with a real Ed25519 key on the server's store, as `mentis agent keygen` does."""
    return keygen_here(db_path, AGENT, tmp_path / "alice.pem")


@pytest.mark.anyio
async def test_writes_through_the_proxy_are_signed_with_the_local_key_and_verify(
    mentis_env: dict[str, str], proxy_env: dict[str, str], token: str, db_path: Path, tmp_path: Path,
    alice_key: Ed25519PrivateKey,
) -> None:  # fmt: skip
    env = {**proxy_env, "MENTIS_SIGNING_KEY": str(tmp_path / "alice.pem"), "MENTIS_AGENT_ID": AGENT}
    key_id = signing.key_id_of(alice_key.public_key())
    with anyio.fail_after(120):
        async with live_server(db_path) as url:
            async with direct_client(url, token) as direct:
                unsigned = await direct.call_tool("record_attempt", ATTEMPT)
                assert "has a key in the agent registry; its writes must be signed" in error_text(unsigned)
            async with Client(proxy_params(url, env)) as proxy:
                recorded = ok(await proxy.call_tool("record_attempt", ATTEMPT))
                assert recorded["status"] == "passed" and recorded["ledger"]["seq"] == 0
                outdated = ok(
                    await proxy.call_tool(
                        "mark_conclusion_outdated",
                        {
                            "repository": REPO,
                            "attempt_id": recorded["attempt_id"],
                            "reason": "VAT rules changed",
                        },
                    )
                )
                assert outdated["corrections_count"] == 1
                thought = {"repository": REPO, "type": "Decision", "content": "Round the total once"}
                noted = ok(await proxy.call_tool("append_thought", thought))
                found = ok(await proxy.call_tool("search", {"query": "cart total rounding"}))
                assert found["tasks"][0]["attempt"]["correction"]["reason"] == "VAT rules changed"
                refused = await proxy.call_tool("record_attempt", {**ATTEMPT, "colour": "blue"})
                assert error_text(refused) == (
                    "Error executing tool record_attempt: [invalid_input] "
                    "invalid input: colour: is not a known field"
                )  # as a direct call says it, though it was prepare_write that refused
                many = await proxy.call_tool(
                    "import_memory_md", {"repository": REPO, "markdown": "## Decision\n- a\n"}
                )
                assert "one signature covers one entry" in error_text(many)
    rows = [r for r in ledger_rows(db_path) if r[0] == REPO]
    assert [(r[2], r[3]) for r in rows] == [
        ("attempt", recorded["attempt_id"]),
        ("correction", rows[1][3]),
        ("thought", noted["thought_id"]),
    ]
    streams = set()
    for chain, _seq, kind, id_, at, agent, body_hash, row_key, sig in rows:
        assert (agent, row_key) == (AGENT, key_id)
        fields = signing.Unsigned(chain, kind, id_, at, agent, body_hash)
        assert signing.verify_envelope(fields, key_id, sig, alice_key.public_key())
        streams.add(signing.Envelope.parse(sig).stream)
    assert len(streams) == 1  # one stream, in order: statements 0, 1, 2
    assert [signing.Envelope.parse(r[8]).n for r in rows] == [0, 1, 2]
    done = subprocess.run(
        [*MENTIS, "verify-integrity", "--json"], env=mentis_env, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.anyio
async def test_a_key_for_another_agent_than_the_tokens_is_refused_before_anything_is_signed(
    mentis_env: dict[str, str], proxy_env: dict[str, str], db_path: Path, tmp_path: Path,
    alice_key: Ed25519PrivateKey,
) -> None:  # fmt: skip
    env = {**proxy_env, "MENTIS_SIGNING_KEY": str(tmp_path / "alice.pem"), "MENTIS_AGENT_ID": "someone-else"}
    with anyio.fail_after(90):
        async with live_server(db_path) as url, Client(proxy_params(url, env)) as proxy:
            refused = await proxy.call_tool("record_attempt", ATTEMPT)
    assert "[forbidden]" in error_text(refused)
    assert "MENTIS_AGENT_ID says this key signs for 'someone-else'" in error_text(refused)
    assert [r for r in ledger_rows(db_path) if r[0] == REPO] == []


@pytest.mark.anyio
async def test_the_proxys_stdout_carries_only_jsonrpc_and_an_unreadable_line_gets_a_parse_error(
    mentis_env: dict[str, str], proxy_env: dict[str, str], db_path: Path, tmp_path: Path
) -> None:
    from .test_stdout_is_jsonrpc import RawSession, assert_all_jsonrpc

    with anyio.fail_after(90), (tmp_path / "proxy-stderr.log").open("wb") as stderr:
        async with live_server(db_path) as url:
            process = await anyio.open_process(
                [*MENTIS, "serve", "--remote", url, "--tools", "all"], env=proxy_env, stderr=stderr
            )
            async with process:
                s = RawSession(process)
                init = await s.request(
                    "initialize",
                    {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "raw-proxy-test", "version": "0"},
                    },
                )
                assert "result" in init, init
                await s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
                listed = await s.request("tools/list")
                assert {t["name"] for t in listed["result"]["tools"]} == WRITE_TOKEN_TOOLS
                await s.send_line("{not json")
                parse_error = await s.wait_for(None)
                assert parse_error["error"]["code"] == -32700
                recorded = await s.call("record_attempt", ATTEMPT)
                assert recorded["structuredContent"]["status"] == "passed"
                failed = await s.call("recall", {"sql": "SELECT nope"})
                assert failed["isError"] is True
                assert process.stdin is not None
                await process.stdin.aclose()
                await s.drain()
    assert_all_jsonrpc(bytes(s.raw))
    assert b"serving MCP on stdio, forwarding" in (tmp_path / "proxy-stderr.log").read_bytes()


@pytest.mark.anyio
async def test_a_proxy_signing_with_an_unregistered_or_revoked_key_is_refused_and_nothing_is_written(
    mentis_env: dict[str, str], proxy_env: dict[str, str], db_path: Path, tmp_path: Path,
    alice_key: Ed25519PrivateKey,
) -> None:  # fmt: skip
    stranger = signing.write_private_key(Ed25519PrivateKey.generate(), tmp_path / "stranger.pem")
    key_id = signing.key_id_of(alice_key.public_key())
    with anyio.fail_after(120):
        async with live_server(db_path) as url:
            env = {**proxy_env, "MENTIS_SIGNING_KEY": str(stranger)}
            async with Client(proxy_params(url, env)) as proxy:
                unknown = await proxy.call_tool("record_attempt", ATTEMPT)
                assert "is not in the agent registry" in error_text(unknown)
                assert [r for r in ledger_rows(db_path) if r[0] == REPO] == []

            env = {**proxy_env, "MENTIS_SIGNING_KEY": str(tmp_path / "alice.pem")}
            async with Client(proxy_params(url, env)) as proxy:
                before = ok(await proxy.call_tool("record_attempt", ATTEMPT))  # signed before the revocation
                revoke = [
                    *MENTIS,
                    "agent",
                    "revoke-key",
                    "--agent",
                    AGENT,
                    "--key-id",
                    key_id,
                    "--reason",
                    "laptop lost",
                ]
                done = await anyio.run_process(revoke, env=mentis_env, check=False)
                assert done.returncode == 0, done.stderr
                revoked = await proxy.call_tool("record_attempt", {**ATTEMPT, "task_id": "after-revocation"})
                assert f"key {key_id} was revoked" in error_text(revoked)
    rows = [r for r in ledger_rows(db_path) if r[0] == REPO]
    assert [r[3] for r in rows] == [before["attempt_id"]]
    fields = signing.Unsigned(rows[0][0], *rows[0][2:7])
    assert signing.verify_envelope(fields, key_id, rows[0][8], alice_key.public_key())
    verified = subprocess.run(
        [*MENTIS, "verify-integrity", "--signatures"], env=mentis_env, capture_output=True, timeout=120
    )
    assert verified.returncode == 0, verified.stderr  # the signature made before the revocation stays valid


# --------------------------------------------------------------------------- the response cap


def _peak_rss(pid: int) -> int:
    """The peak resident memory of process ``pid`` so far, in bytes (Linux's VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


@pytest.mark.anyio
async def test_an_answer_over_the_cap_is_a_clear_tool_error_and_the_proxy_reads_and_holds_no_more(
    mentis_env: dict[str, str], proxy_env: dict[str, str], db_path: Path, tmp_path: Path
) -> None:
    from .hostile_remote import Tamper, hostile_server
    from .test_stdout_is_jsonrpc import RawSession, assert_all_jsonrpc

    mib, huge = 1 << 20, 128 << 20
    with anyio.fail_after(120), (tmp_path / "proxy-stderr.log").open("wb") as stderr:
        async with (
            live_server(db_path) as url,
            hostile_server(url, Tamper(huge={"search": huge})) as hostile,
        ):
            command = [*MENTIS, "serve", "--remote", hostile.url, "--max-response-mb", "8", "--tools", "all"]
            process = await anyio.open_process(command, env=proxy_env, stderr=stderr)
            async with process:
                s = RawSession(process)
                init = await s.request(
                    "initialize",
                    {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "0"},
                    },
                )
                assert "result" in init, init
                await s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
                assert (await s.call("stats", {}))["isError"] is False
                before = _peak_rss(process.pid)
                refused = await s.call("search", {"query": "cart total"})
                after = _peak_rss(process.pid)
                still = await s.call("stats", {})
                assert process.stdin is not None
                await process.stdin.aclose()
                await s.drain()
    assert refused["isError"] is True
    assert refused["content"][0]["text"].startswith(
        "Error executing tool search: [too_large] the remote Mentis at "
    ), refused
    assert (
        "its answer is larger than 8 MiB; this proxy reads at most 8 MiB of one answer (--max-response-mb)"
        in refused["content"][0]["text"]
    )
    assert still["isError"] is False, still  # only that call failed; the session goes on
    (sent,) = hostile.huge_sent
    assert sent < 40 * mib, (
        f"the server handed on {sent / mib:.0f} MiB of {huge / mib:.0f}: the reader did not stop"
    )
    assert after - before < 48 * mib, f"the proxy's peak memory grew by {(after - before) / mib:.0f} MiB"
    assert_all_jsonrpc(bytes(s.raw))
