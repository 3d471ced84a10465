"""HTTP limits and checks: the error table, body size, malformed requests, Host/Origin (DNS rebinding),
per-token rate limits and the request timeout. Every refused request writes nothing."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest

from mentis.http.middleware import TokenBucket, parse_authority

from .conftest import REPO
from .http_support import LiveServer

WRITE = {"repository": REPO, "task_id": "t", "action": "a", "observation": "o"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def live(db_path: Path) -> Iterator[LiveServer]:
    with LiveServer(db_path, max_body_bytes=4096) as server:
        yield server


@pytest.fixture
def http(live: LiveServer) -> Iterator[httpx2.Client]:
    headers = {"Authorization": f"Bearer {live.token('admin')}"}
    with httpx2.Client(base_url=live.url, headers=headers, timeout=30) as client:
        yield client


def test_malformed_requests_get_json_errors_with_the_right_status(
    live: LiveServer, http: httpx2.Client
) -> None:
    before = live.ledger()
    json_type = {"Content-Type": "application/json"}
    cases = [
        (
            http.post("/v1/record_attempt", content=b'{"repository": ', headers=json_type),
            400,
            "malformed_json",
        ),
        (http.post("/v1/record_attempt", content=b"", headers=json_type), 400, "malformed_json"),
        (http.post("/v1/record_attempt", content=b"\xff\xfe", headers=json_type), 400, "malformed_json"),
        (http.post("/v1/record_attempt", content=b'"\\ud800"', headers=json_type), 400, "malformed_json"),
        (http.post("/v1/record_attempt", json=[WRITE]), 422, "invalid_input"),
        (http.post("/v1/record_attempt", json={**WRITE, "bogus": 1}), 422, "invalid_input"),
        (
            http.post("/v1/record_attempt", content=b"{}", headers={"Content-Type": "text/plain"}),
            415,
            "unsupported_media_type",
        ),
        (http.post("/v1/no_such_operation", json={}), 404, "no_such_route"),
        (http.get("/v1/record_attempt"), 405, "method_not_allowed"),
        (http.post("/v1/recall", json={"sql": "delete from attempts"}), 400, "query"),
    ]
    for response, status, code in cases:
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), response.text
        assert response.json()["error"]["message"]
    assert cases[-2][0].headers["allow"] == "POST"
    assert cases[5][0].json()["error"]["field"] == "bogus"
    assert live.ledger() == before


def test_a_field_over_its_limit_is_refused_by_the_model_with_the_field_named(db_path: Path) -> None:
    with LiveServer(db_path.with_name("big.db")) as big:
        headers = {"Authorization": f"Bearer {big.token('admin')}"}
        with httpx2.Client(base_url=big.url, headers=headers) as client:
            answer = client.post("/v1/record_attempt", json={**WRITE, "observation": "x" * 70_000})
        assert big.ledger() == []
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "observation"
    assert "65536" in answer.json()["error"]["message"].replace(",", "")


def test_a_body_over_the_limit_is_refused_with_413_whether_declared_or_streamed(
    live: LiveServer, http: httpx2.Client
) -> None:
    before = live.ledger()
    big = {**WRITE, "observation": "x" * 5000}

    def chunks() -> Iterator[bytes]:
        yield b'{"repository": "github.com/acme/shop", "observation": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    declared = http.post("/v1/record_attempt", json=big)
    streamed = http.post("/v1/record_attempt", content=chunks(), headers={"Content-Type": "application/json"})
    over_mcp = http.post("/mcp", json={**PING, "params": {"pad": "x" * 5000}}, headers=MCP_HEADERS)
    for answer in (declared, streamed, over_mcp):
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"]["code"] == "body_too_large"
    assert live.ledger() == before


@pytest.mark.parametrize("path", ["/health", "/v1/openapi.json", "/v1/search", "/mcp"])
def test_a_foreign_host_or_origin_is_refused_on_every_route(
    live: LiveServer, http: httpx2.Client, path: str
) -> None:
    def ask(**headers: str) -> httpx2.Response:
        if path in ("/health", "/v1/openapi.json"):
            return http.get(path, headers=headers)
        body = PING if path == "/mcp" else {"query": "cart"}
        return http.post(path, json=body, headers={**MCP_HEADERS, **headers})

    assert ask(Host="attacker.example").status_code == 421
    assert ask(Host=f"attacker.example:{live.port}").status_code == 421
    assert ask(Origin="http://attacker.example").status_code == 403
    assert ask(Origin="null").status_code == 403
    assert ask(Origin="file://localhost").status_code == 403
    for ok in (
        {"Host": f"localhost:{live.port}"},
        {"Host": f"[::1]:{live.port}"},
        {"Origin": f"http://localhost:{live.port}"},
        {"Origin": f"http://127.0.0.1:{live.port}"},
    ):
        assert ask(**ok).status_code == 200, ok


def test_an_extra_allowed_host_is_served(db_path: Path) -> None:
    with (
        LiveServer(db_path, allowed_hosts=("mentis.internal:443", "mentis.local")) as live,
        httpx2.Client(base_url=live.url) as c,
    ):
        assert c.get("/health", headers={"Host": "mentis.internal:443"}).status_code == 200
        assert c.get("/health", headers={"Host": f"mentis.local:{live.port}"}).status_code == 200
        assert c.get("/health", headers={"Host": "mentis.local:443"}).status_code == 421
        assert c.get("/health", headers={"Host": "other.internal"}).status_code == 421


def test_host_headers_are_read_as_exactly_host_and_port() -> None:
    assert [
        parse_authority(h) for h in ("LocalHost:9471", "[::1]:80", "[::1]", "a.b", "::1", "", "a:b:c")
    ] == [
        ("localhost", 9471),
        ("::1", 80),
        ("::1", None),
        ("a.b", None),
        None,
        None,
        None,
    ]


def test_a_token_over_its_rate_gets_429_with_retry_after_and_other_tokens_do_not(db_path: Path) -> None:
    with LiveServer(db_path, rate_per_second=0.01, rate_burst=3) as live:
        busy, calm = live.token("admin"), live.token("admin")
        with httpx2.Client(base_url=live.url, headers={"Authorization": f"Bearer {busy}"}) as http:
            answers = [http.post("/v1/verify_integrity", json={}) for _ in range(5)]
            health = [http.get("/health").status_code for _ in range(5)]
        with httpx2.Client(base_url=live.url, headers={"Authorization": f"Bearer {calm}"}) as http:
            other = http.post("/v1/verify_integrity", json={})
    assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
    assert int(answers[3].headers["retry-after"]) >= 1
    assert answers[3].json()["error"]["code"] == "rate_limited"
    assert health == [200] * 5
    assert other.status_code == 200


def test_a_token_bucket_refills_at_its_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=2.0, burst=2, clock=lambda: now[0])
    assert [bucket.take("a"), bucket.take("a")] == [0.0, 0.0]
    assert bucket.take("a") == pytest.approx(0.5)
    assert bucket.take("b") == 0.0
    now[0] = 0.5
    assert bucket.take("a") == 0.0
    assert bucket.take("a") > 0


def test_a_request_past_the_timeout_gets_504_and_the_server_keeps_serving(db_path: Path) -> None:
    with LiveServer(db_path, request_timeout_s=0.5) as live:
        headers = {"Authorization": f"Bearer {live.token('admin')}"}
        with httpx2.Client(base_url=live.url, headers=headers, timeout=30) as http:
            blocker = sqlite3.connect(db_path, isolation_level=None)
            blocker.execute("BEGIN IMMEDIATE")  # another process holding the write lock
            try:
                stuck = http.post("/v1/record_attempt", json=WRITE)
            finally:
                blocker.execute("ROLLBACK")
                blocker.close()
            after = http.post("/v1/record_attempt", json=WRITE)
            verified = http.post("/v1/verify_integrity", json={}).json()
    assert (stuck.status_code, stuck.json()["error"]["code"]) == (504, "timeout")
    assert after.status_code == 200
    assert verified["ok"] is True


@pytest.mark.anyio
async def test_a_request_waiting_on_the_database_does_not_stall_the_event_loop(db_path: Path) -> None:
    with LiveServer(db_path) as live:
        token = live.token("admin")
        blocker = sqlite3.connect(db_path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the write below waits in its worker thread
        async with live.client(token) as http, anyio.create_task_group() as tg:
            stuck: list[httpx2.Response] = []

            async def write() -> None:
                stuck.append(await http.post("/v1/record_attempt", json=WRITE))

            tg.start_soon(write)
            with anyio.fail_after(5):
                for _ in range(20):
                    assert (await http.get("/health")).status_code == 200
                    assert (await http.get("/v1/openapi.json")).status_code == 200
            assert stuck == []
            blocker.execute("ROLLBACK")
            blocker.close()
        assert stuck[0].status_code == 200
