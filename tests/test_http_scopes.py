"""Private scopes over HTTP (issue 26): a token's agent reads its session-private records only in
the session its requests name (``X-Mentis-Session``), another agent's token never, and a bad
session header is refused naming it, with nothing written."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from .conftest import REPO
from .http_support import LiveServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


NOTE = {"repository": REPO, "type": "Finding", "content": "the flaky payment test needs a warm cache"}


def test_a_session_private_thought_is_read_only_in_its_session_over_rest(db_path: Path) -> None:
    async def run() -> None:
        with LiveServer(db_path) as live:
            mine, theirs = live.token(agent="reader"), live.token(agent="other")
            async with live.client(mine) as http:
                wrote = await http.post(
                    "/v1/append_thought",
                    json={**NOTE, "visibility": "session"},
                    headers={"X-Mentis-Session": "s1"},
                )
                assert wrote.status_code == 200, wrote.text

                async def found(session: str | None) -> list[str]:
                    headers = {"X-Mentis-Session": session} if session else {}
                    res = await http.post(
                        "/v1/search_thoughts", json={"query": "flaky payment cache"}, headers=headers
                    )
                    assert res.status_code == 200, res.text
                    return [t["thought"]["content"] for t in res.json()["thoughts"]]

                assert await found("s1") == [NOTE["content"]]
                assert await found("s2") == []
                assert await found(None) == []
                before = live.ledger()
                bad = await http.post(
                    "/v1/append_thought", json=NOTE, headers={"X-Mentis-Session": "no spaces here"}
                )
                assert bad.status_code == 422
                assert bad.json()["error"]["field"] == "X-Mentis-Session"
                assert live.ledger() == before
            async with live.client(theirs) as http:
                res = await http.post(
                    "/v1/search_thoughts",
                    json={"query": "flaky payment cache"},
                    headers={"X-Mentis-Session": "s1"},
                )
                assert res.json()["thoughts"] == []

    anyio.run(run)
