"""Private scopes on the dashboard over plain HTTP on a real SQLite store: a private attempt or
thought carries a badge saying who may read it, only its readers see it, and its writer (or an
admin) widens it with the publish form; a narrowing, an unknown visibility or another agent's
record is refused naming the field, and nothing is written."""

from __future__ import annotations

import html
from collections.abc import Callable
from urllib.parse import urlencode

from starlette.testclient import TestClient

from mentis.api.attempts import RecordAttemptInput
from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore
from tests.dashboard.conftest import csrf_of, login, make_token
from tests.dashboard.seed import SHOP

ALICE = Caller(agent_id="alice-agent")
TASK = f"/dashboard/task?{urlencode({'repository': SHOP, 'task_id': 'cache-warmup'})}"


def _ledger(memory: Memory) -> list[str]:
    return [e.hash for e, _ in memory.store.iter_ledger()]


def _private_attempt(memory: Memory) -> str:
    data = {
        "repository": SHOP,
        "task_id": "cache-warmup",
        "action": "warmed the product cache before the load test",
        "observation": "p95 fell from 900 ms to 120 ms",
        "visibility": "agent",
    }
    return memory.record_attempt(ALICE, parse(RecordAttemptInput, data)).attempt_id


def _token(tokens: TokenStore, agent: str) -> str:
    return tokens.create(scope="write", repositories=("github.com/acme/*",), agent=agent)[0]


def test_a_private_attempt_shows_its_badge_to_its_writer_only_until_published(
    client_for: Callable[..., TestClient], tokens: TokenStore, memory: Memory
) -> None:
    attempt_id = _private_attempt(memory)
    bob = client_for()
    login(bob, _token(tokens, "bob-agent"))
    assert bob.get(TASK).status_code == 404  # bob may not read it: there is no such task for him

    alice = client_for()
    login(alice, _token(tokens, "alice-agent"))
    page = alice.get(TASK)
    assert page.status_code == 200
    assert "private: agent" in page.text and 'action="/dashboard/publish"' in page.text
    published = alice.post(
        "/dashboard/publish",
        data={
            "csrf": csrf_of(page.text),
            "repository": SHOP,
            "record_id": attempt_id,
            "visibility": "repository",
            "task_id": "cache-warmup",
        },
        follow_redirects=False,
    )
    assert published.status_code == 303
    assert published.headers["location"] == f"{TASK}#a-{attempt_id}"
    seen = bob.get(TASK)
    assert seen.status_code == 200 and attempt_id in seen.text
    assert "private: agent" not in seen.text and 'action="/dashboard/publish"' not in seen.text


def test_a_private_thought_shows_its_badge_and_an_admin_may_publish_it(
    client: TestClient, tokens: TokenStore, memory: Memory
) -> None:
    data = {
        "repository": SHOP,
        "type": "Finding",
        "content": "the cache key ignores the locale",
        "visibility": "agent",
    }
    thought_id = memory.append_thought(ALICE, parse(AppendThoughtInput, data)).thought_id
    login(client, make_token(tokens, "admin"))
    url = f"/dashboard/thought?{urlencode({'id': thought_id})}"
    page = client.get(url)
    assert "private: agent" in page.text
    done = client.post(
        "/dashboard/publish",
        data={
            "csrf": csrf_of(page.text),
            "repository": SHOP,
            "record_id": thought_id,
            "visibility": "repository",
        },
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == url
    assert "private: agent" not in client.get(url).text
    assert memory.visibilities(ALICE, [thought_id]) == {thought_id: "repository"}


def test_bad_publish_input_names_its_field_and_writes_nothing(
    client_for: Callable[..., TestClient], tokens: TokenStore, memory: Memory
) -> None:
    attempt_id = _private_attempt(memory)
    alice = client_for()
    login(alice, _token(tokens, "alice-agent"))
    bob = client_for()
    login(bob, _token(tokens, "bob-agent"))
    before = _ledger(memory)
    for who, data, status, field in [
        (alice, {"visibility": "session"}, 422, "visibility"),  # narrowing
        (alice, {"visibility": "world"}, 422, "visibility"),
        (alice, {"visibility": "repository", "record_id": "no-such-record"}, 404, "no-such-record"),
        (alice, {"visibility": "repository", "repository": "github.com/umbrella/vault"}, 403, "repository"),
        (bob, {"visibility": "repository"}, 404, attempt_id),  # bob cannot read it: there is none for him
    ]:
        page = who.get("/dashboard/").text
        form = {"csrf": csrf_of(page), "repository": SHOP, "record_id": attempt_id, "task_id": "cache-warmup"}
        answer = who.post("/dashboard/publish", data={**form, **data})
        assert answer.status_code == status, (data, answer.status_code, answer.text[-500:])
        assert field in html.unescape(answer.text), (data, answer.text[-500:])
    assert alice.post("/dashboard/publish", data={"record_id": attempt_id}).status_code == 403  # no CSRF
    assert _ledger(memory) == before
