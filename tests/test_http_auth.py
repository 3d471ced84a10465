"""Tokens and scopes over HTTP: every refused call is refused on REST and MCP alike, leaks nothing
of another repository and writes nothing (the ledger's entry hashes are compared before and after)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mentis.api.attempts import RecordAttemptInput
from mentis.errors import ConfigError, Conflict, InvalidInput, NotFound
from mentis.http import HttpConfig
from mentis.service.memory import Caller
from mentis.service.operations import BY_NAME
from mentis.service.tokens import TokenStore

from .conftest import REPO
from .http_support import LiveServer, mcp_client

OTHER = "github.com/rival/secret"
MARKER = "zanzibar-credential-7731"
"""Text only repository OTHER holds: it must never appear in an answer to a token for REPO."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def live(db_path: Path) -> Iterator[LiveServer]:
    with LiveServer(db_path) as server:
        seed = Caller(agent_id="seed")
        for repo, text in ((REPO, "cart total rounded wrong"), (OTHER, f"cart total leaked {MARKER}")):
            server.memory.record_attempt(
                seed,
                RecordAttemptInput(
                    repository=repo, task_id="cart", action="round the cart total", observation=text
                ),
            )
        yield server


def other_attempt_id(live: LiveServer) -> str:
    rows = live.memory.store.task_history(OTHER, "cart")
    return rows[0].body.attempt_id


WRITE = {"repository": REPO, "task_id": "t", "action": "a", "observation": "o"}


def mcp_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "Bearer not-a-mentis-token",
        "Bearer mentis_000000000000_guessed",
    ],
    ids=["none", "empty-bearer", "basic", "garbage", "unknown-id"],
)
def test_a_request_without_a_valid_token_is_refused_with_401_on_every_route_but_health(
    live: LiveServer, authorization: str | None
) -> None:
    before = live.ledger()
    headers = {"Authorization": authorization} if authorization else {}
    with httpx2.Client(base_url=live.url, headers=headers) as http:
        answers = [
            http.post("/v1/record_attempt", json=WRITE),
            http.post("/v1/search", json={"query": "cart"}),
            http.get("/v1/openapi.json"),
            http.post(
                "/mcp",
                json=mcp_call("record_attempt", WRITE),
                headers={"Accept": "application/json, text/event-stream"},
            ),
            http.get("/no/such/route"),
        ]
        health = http.get("/health")
    for answer in answers:
        assert answer.status_code == 401, (answer.request.url, answer.text)
        assert answer.headers["www-authenticate"].startswith('Bearer realm="mentis"')
        assert answer.json()["error"]["code"] == "unauthorized"
        assert MARKER not in answer.text
    assert health.status_code == 200
    assert live.ledger() == before


def test_a_tokens_secret_is_checked_not_just_its_id(live: LiveServer) -> None:
    token = live.token("admin")
    forged = token[: -len(token.split("_", 2)[2])] + "A" * 43
    with httpx2.Client(base_url=live.url, headers={"Authorization": f"Bearer {forged}"}) as http:
        answer = http.post("/v1/verify_integrity", json={})
    assert answer.status_code == 401
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]


def test_expired_and_revoked_tokens_are_refused_and_say_why(live: LiveServer) -> None:
    expired = live.token("admin", expires_at=datetime.now(UTC) - timedelta(seconds=1))
    revoked = live.token("admin")
    live.tokens.revoke(revoked.split("_")[1])
    still_valid = live.token("admin", expires_at=datetime.now(UTC) + timedelta(days=1))
    before = live.ledger()
    for token, word in ((expired, "expired"), (revoked, "revoked")):
        with httpx2.Client(base_url=live.url, headers={"Authorization": f"Bearer {token}"}) as http:
            answer = http.post("/v1/record_attempt", json=WRITE)
        assert answer.status_code == 401
        assert word in answer.json()["error"]["message"]
    assert live.ledger() == before
    with httpx2.Client(base_url=live.url, headers={"Authorization": f"Bearer {still_valid}"}) as http:
        assert http.post("/v1/verify_integrity", json={}).status_code == 200


@pytest.mark.anyio
async def test_a_read_token_cannot_write_through_rest_or_mcp(live: LiveServer) -> None:
    token = live.token("read", (REPO,))
    aid = live.memory.store.task_history(REPO, "cart")[0].body.attempt_id
    writes = [
        ("record_attempt", WRITE),
        ("mark_conclusion_outdated", {"repository": REPO, "attempt_id": aid, "reason": "r"}),
        ("forget_attempt", {"repository": REPO, "attempt_id": aid}),
    ]
    before = live.ledger()
    with anyio.fail_after(30):
        async with live.client(token) as rest, mcp_client(live, token) as client:
            for name, arguments in writes:
                answer = await rest.post(f"/v1/{name}", json=arguments)
                assert (answer.status_code, answer.json()["error"]["code"]) == (403, "forbidden"), name
                result = await client.call_tool(name, arguments)
                assert result.is_error and "[forbidden]" in result.content[0].text  # type: ignore[union-attr]
            assert (await rest.post("/v1/search", json={"query": "cart"})).status_code == 200
    assert live.ledger() == before


def _read_paths(aid_b: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("search", {"query": f"cart total {MARKER}"}),
        ("search", {"query": "cart", "repository": OTHER}),
        ("recall", {"repository": OTHER, "task_id": "cart"}),
        ("recall", {"sql": "select * from attempts"}),
        ("recall", {"sql": "select * from tasks"}),
        ("recall", {"sql": "select * from corrections"}),
        ("recall", {"sql": "select repository, count(*) from attempts group by repository"}),
        ("recall", {"sql": "select * from tokens"}),
        ("verify_integrity", {}),
        ("verify_integrity", {"repository": OTHER}),
        ("stats", {}),
        ("stats", {"repository": OTHER}),
        ("mark_conclusion_outdated", {"repository": OTHER, "attempt_id": aid_b, "reason": "r"}),
        ("mark_conclusion_outdated", {"repository": REPO, "attempt_id": aid_b, "reason": "r"}),
        ("forget_attempt", {"repository": OTHER, "attempt_id": aid_b}),
        ("record_attempt", {**WRITE, "repository": OTHER}),
    ]


@pytest.mark.anyio
async def test_a_token_for_one_repository_never_sees_or_touches_another_through_any_path(
    live: LiveServer,
) -> None:
    token = live.token("write", ("github.com/acme/*",))
    paths = _read_paths(other_attempt_id(live))
    before = live.ledger()
    with anyio.fail_after(30):
        async with live.client(token) as rest, mcp_client(live, token) as client:
            for name, arguments in paths:
                answer = await rest.post(f"/v1/{name}", json=arguments)
                result = await client.call_tool(name, arguments)
                texts = [answer.text, str(result.structured_content), str(result.content)]
                assert all(MARKER not in t and OTHER not in t.replace(repr(OTHER), "") for t in texts), name
                assert answer.status_code in (200, 400, 403, 404), (name, answer.text)
            searched = (await rest.post("/v1/search", json={"query": "cart total"})).json()
            assert {t["repository"] for t in searched["tasks"]} == {REPO}
            rows = (await rest.post("/v1/recall", json={"sql": "select repository from attempts"})).json()
            assert rows["rows"] == [[REPO]]
            chains = (await rest.post("/v1/verify_integrity", json={})).json()["chains"]
            assert [c["chain"] for c in chains] == [REPO]
            stats = (await rest.post("/v1/stats", json={})).json()
            assert [r["repository"] for r in stats["by_repository"]] == [REPO]
            assert (stats["attempts"], stats["store_bytes"]) == (1, None)
    assert live.ledger() == before


THOUGHT_READS = [
    ("search_thoughts", {"query": f"rival {MARKER}"}),
    ("search_thoughts", {"query": "rival", "repository": OTHER}),
    ("get_thought", {"thought_id": "{thought}"}),
    ("get_thought", {"thought_id": "{thought}", "repository": OTHER}),
    ("traverse_thoughts", {"thought_id": "{thought}", "direction": "both"}),
    ("context_bundle", {"query": f"rival {MARKER}"}),
    ("context_bundle", {"query": "rival", "repository": OTHER}),
    ("recent_context", {"repository": OTHER}),
    ("export_memory_md", {"repository": OTHER}),
    ("recall", {"sql": "select * from thoughts"}),
    ("append_thought", {"repository": OTHER, "type": "Finding", "content": "planted"}),
    ("import_memory_md", {"repository": OTHER, "markdown": "# planted"}),
]
"""Thought operations that name or could reach repository OTHER (those that exist are run)."""


def _fill(value: Any, thought: str) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, thought) for k, v in value.items()}
    return thought if value == "{thought}" else value


@pytest.mark.anyio
async def test_a_token_for_one_repository_never_reads_or_writes_anothers_thoughts(live: LiveServer) -> None:
    cases = [(name, arguments) for name, arguments in THOUGHT_READS if name in BY_NAME]
    if not any(name == "append_thought" for name, _ in cases):
        pytest.skip("no thought operations in this build")
    with anyio.fail_after(30):
        async with live.client(live.token("admin")) as admin:
            planted = await admin.post(
                "/v1/append_thought",
                json={"repository": OTHER, "type": "Finding", "content": f"rival plan {MARKER}"},
            )
            assert planted.status_code == 200, planted.text
        thought = planted.json()["thought_id"]
        token = live.token("write", ("github.com/acme/*",))
        before = live.ledger()
        async with live.client(token) as rest, mcp_client(live, token) as client:
            for name, arguments in cases:
                filled = _fill(arguments, thought)
                answer = await rest.post(f"/v1/{name}", json=filled)
                result = await client.call_tool(name, filled)
                texts = [answer.text, str(result.structured_content), str(result.content)]
                assert all(MARKER not in t for t in texts), (name, texts)
                assert answer.status_code in (200, 400, 403, 404, 422), (name, answer.text)
        assert live.ledger() == before


def test_an_admin_token_sees_every_repository(live: LiveServer) -> None:
    with httpx2.Client(base_url=live.url, headers={"Authorization": f"Bearer {live.token('admin')}"}) as http:
        chains = http.post("/v1/verify_integrity", json={}).json()["chains"]
        rows = http.post("/v1/recall", json={"sql": "select repository from attempts order by 1"}).json()
        tokens = http.post("/v1/recall", json={"sql": "select * from tokens"})
    assert sorted(c["chain"] for c in chains) == sorted([REPO, OTHER])
    assert rows["rows"] == [[REPO], [OTHER]]
    assert (tokens.status_code, tokens.json()["error"]["code"]) == (
        400,
        "query",
    )  # credentials stay out of reach


def test_the_token_table_holds_only_salted_hashes_never_a_token(db_path: Path) -> None:
    store = TokenStore(db_path)
    token, info = store.create(scope="write", repositories=("github.com/acme/*",), agent="bob")
    other, _ = store.create(scope="write", repositories=("github.com/acme/*",), agent="bob")
    raw = sqlite3.connect(db_path).execute("SELECT * FROM tokens").fetchall()
    store.close()
    dumped = repr(raw)
    secret = token.split("_", 2)[2]
    assert secret not in dumped and token not in dumped
    assert raw[0][4] != raw[1][4] and raw[0][5] != raw[1][5]  # per-token salt, so different digests
    assert [t.to_json().keys() for t in TokenStore(db_path).list()] == [info.to_json().keys()] * 2
    assert "token" not in info.to_json()
    assert other != token


def test_token_rules_are_checked_when_it_is_created(db_path: Path) -> None:
    store = TokenStore(db_path)
    with pytest.raises(InvalidInput, match="scope"):
        store.create(scope="root", repositories=(REPO,))
    with pytest.raises(InvalidInput, match="--repo"):
        store.create(scope="read")
    with pytest.raises(InvalidInput, match="whitespace"):
        store.create(scope="read", repositories=(" github.com/x",))
    _, admin = store.create(scope="admin", repositories=(REPO,))
    assert admin.caller() == Caller(agent_id=admin.agent, can_write=True, repositories=None, admin=True)
    _, read = store.create(scope="read", repositories=(REPO, "github.com/acme/*"), agent="r")
    assert read.caller() == Caller(agent_id="r", can_write=False, repositories=(REPO, "github.com/acme/*"))
    store.revoke(read.id)
    with pytest.raises(Conflict):
        store.revoke(read.id)
    with pytest.raises(NotFound):
        store.revoke("ffffffffffff")
    assert store.lookup("mentis_" + read.id + "_wrong") is None
    store.close()


def test_no_auth_is_refused_on_an_address_that_is_not_loopback() -> None:
    for host in ("0.0.0.0", "192.168.1.20", "example.org", "::"):
        with pytest.raises(ConfigError, match="loopback"):
            HttpConfig(host=host, auth=False)
    for host in ("127.0.0.1", "127.8.0.1", "::1", "localhost"):
        assert HttpConfig(host=host, auth=False).auth is False


def test_without_auth_on_loopback_every_call_is_the_local_agent_and_unscoped(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MENTIS_AGENT_ID", raising=False)
    with LiveServer(db_path, auth=False) as live, httpx2.Client(base_url=live.url) as http:
        done = http.post("/v1/record_attempt", json=WRITE)
        rows = http.post("/v1/recall", json={"sql": "select agent_id from attempts"}).json()["rows"]
    assert done.status_code == 200
    assert rows == [["http-anonymous"]]
