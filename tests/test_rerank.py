"""The LLM usefulness reranker against a real local server speaking chat completions."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from mentis.config import PROVIDER_VARIABLES, Settings
from mentis.errors import ConfigError, MentisError, RerankFailed
from mentis.providers.http import OPENROUTER_BASE_URL
from mentis.providers.rerank import (
    DEFAULT_MODEL,
    MAX_CHARS,
    SYSTEM_PROMPT,
    Reranker,
    RerankItem,
    apply_rerank,
    load_reranker,
    parse_scores,
)

from .fake_openai import FakeOpenAI

KEY = "sk-or-v1-" + "a1b2c3d4e5f60789" * 4
OPAQUE_KEY = "rerank-key-do-not-leak-7"
GITHUB_TOKEN = "ghp_" + "Z9y8X7w6V5u4" * 3

CANDIDATES = [
    RerankItem("github.com/acme/shop#T-db", "migration lock timeout on postgres; retried with a longer lock"),
    RerankItem("github.com/acme/shop#T-css", "navbar overflow in css grid"),
    RerankItem("github.com/acme/shop#T-ci", "flaky lock test on CI, timeout raised"),
]
QUERY = "postgres migration lock timeout"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server
    assert server.errors == []


@pytest.fixture
def reranker(fake: FakeOpenAI) -> Iterator[Reranker]:
    with Reranker(fake.url, api_key=KEY, timeout=5) as r:
        yield r


def user_message(body: dict[str, Any]) -> Any:
    return json.loads(body["messages"][1]["content"])


def test_scores_come_back_in_candidate_order(reranker: Reranker, fake: FakeOpenAI) -> None:
    assert reranker.rerank(QUERY, CANDIDATES) == [1.0, 0.0, 0.5]
    (body,) = fake.bodies()
    assert fake.requests[0].path == "/v1/chat/completions"
    assert body["model"] == DEFAULT_MODEL
    assert body["temperature"] == 0
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert user_message(body) == {
        "query": QUERY,
        "candidates": [{"id": str(n), "text": c.text} for n, c in enumerate(CANDIDATES, start=1)],
    }


def test_model_scores_are_returned_as_given(reranker: Reranker, fake: FakeOpenAI) -> None:
    fake.scores = {"1": 0.25, "2": 1, "3": 0}
    assert reranker.rerank(QUERY, CANDIDATES) == [0.25, 1.0, 0.0]


def test_reply_inside_a_code_fence_is_accepted(reranker: Reranker, fake: FakeOpenAI) -> None:
    fake.behaviour = "fenced"
    assert reranker.rerank(QUERY, CANDIDATES) == [1.0, 0.0, 0.5]


def test_no_candidates_sends_no_request(reranker: Reranker, fake: FakeOpenAI) -> None:
    assert reranker.rerank(QUERY, []) == []
    assert fake.requests == []


def test_texts_are_scrubbed_and_cut_and_keys_never_sent(reranker: Reranker, fake: FakeOpenAI) -> None:
    long_text = f"pushed with token {GITHUB_TOKEN}. " + "lock timeout again. " * 400
    reranker.rerank(f"why does {GITHUB_TOKEN} fail", [RerankItem("repo#T-secret-task-key", long_text)])
    sent = fake.sent()
    assert GITHUB_TOKEN not in sent
    assert "repo#T-secret-task-key" not in sent
    message = user_message(fake.bodies()[0])
    assert message["query"] == "why does [REDACTED:github_token] fail"
    assert len(message["candidates"][0]["text"]) <= MAX_CHARS + len("[REDACTED:github_token]")
    assert message["candidates"][0]["text"].startswith("pushed with token [REDACTED:github_token]. lock")


def test_api_key_is_sent_only_in_the_authorization_header(reranker: Reranker, fake: FakeOpenAI) -> None:
    reranker.rerank(QUERY, CANDIDATES)
    (request,) = fake.requests
    assert [k for k, v in request.headers.items() if KEY in v] == ["authorization"]
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in request.body.decode()


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("http_500", "HTTP 500: upstream model crashed"),
        ("http_429", "HTTP 429: rate limited, slow down"),
        ("html", "HTTP 502: <html><body>502 Bad Gateway</body></html>"),
        ("malformed_json", """HTTP 200 with a reply that is not JSON: '{"data": [{"embedding": [0.1,'"""),
        ("error_200", "HTTP 200 with an error: No endpoints found for this model"),
        ("missing_choices", "the reply has no choices"),
        ("empty_content", "the reply has no message content"),
        ("prose", "the reply is not a JSON object: 'The first candidate looks the most useful to me.'"),
        ("non_numeric_score", "candidate 1 has a score that is not a number"),
        ("out_of_range_score", "candidate 1 has score 7, outside 0..1"),
        ("nan_score", "candidate 1 has score nan, outside 0..1"),
        ("missing_id", "1 of 3 candidates have no score (ids [3])"),
        ("duplicate_id", "candidate id 1 is scored twice"),
        ("unknown_id", "unknown candidate id 'task-that-was-never-sent'"),
    ],
)
def test_any_failure_fails_the_whole_rerank_with_a_reason(
    reranker: Reranker, fake: FakeOpenAI, behaviour: str, reason: str
) -> None:
    fake.behaviour = behaviour
    with pytest.raises(RerankFailed) as caught:
        reranker.rerank(QUERY, CANDIDATES)
    assert isinstance(caught.value, MentisError)
    assert caught.value.code == "rerank_failed"
    assert caught.value.reason == reason
    assert caught.value.message == f"rerank failed: {reason}"
    assert len(fake.requests) == 1  # no retry by default: the search falls back at once


def test_hung_model_times_out(fake: FakeOpenAI) -> None:
    fake.behaviour = "hang"
    with Reranker(fake.url, api_key=KEY, timeout=0.5) as r, pytest.raises(RerankFailed) as caught:
        r.rerank(QUERY, CANDIDATES)
    assert caught.value.reason == "timed out after 0.5s (ReadTimeout)"


def test_refused_connection_fails_the_rerank() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Reranker(f"http://127.0.0.1:{port}/v1", api_key=KEY) as r, pytest.raises(RerankFailed) as caught:
        r.rerank(QUERY, CANDIDATES)
    assert caught.value.reason.startswith(f"could not connect to http://127.0.0.1:{port}/v1/chat/completions")


@pytest.mark.parametrize("key", [KEY, OPAQUE_KEY])
def test_reason_never_holds_the_api_key(fake: FakeOpenAI, key: str) -> None:
    fake.behaviour = "http_401"
    with Reranker(fake.url, api_key=key) as r, pytest.raises(RerankFailed) as caught:
        r.rerank(QUERY, CANDIDATES)
    assert key not in caught.value.message
    assert caught.value.reason.startswith("HTTP 401: invalid credentials: Bearer [REDACTED:")


def test_retries_are_opt_in(fake: FakeOpenAI) -> None:
    waits: list[float] = []
    fake.script = ["http_429"]
    with Reranker(fake.url, api_key=KEY, retries=1, sleep=waits.append) as r:
        assert r.rerank(QUERY, CANDIDATES) == [1.0, 0.0, 0.5]
    assert (len(fake.requests), waits) == (2, [0.5])


def reply(content: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": content}}]}


def test_numeric_ids_and_integer_scores_are_accepted() -> None:
    content = json.dumps({"scores": [{"id": 2, "score": 1}, {"id": " 1 ", "score": 0.5}]})
    assert parse_scores(reply(content), 2) == [0.5, 1.0]


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({"id": "1", "score": True}, "candidate 1 has a score that is not a number"),
        ({"id": "1", "score": "0.8"}, "candidate 1 has a score that is not a number"),
        ({"id": "1", "score": -0.1}, "candidate 1 has score -0.1, outside 0..1"),
        ({"id": "0", "score": 0.5}, "unknown candidate id '0'"),
        ({"id": True, "score": 0.5}, "unknown candidate id 'True'"),
        ({"score": 0.5}, "unknown candidate id 'None'"),
    ],
)
def test_bad_score_entry_is_refused(entry: dict[str, Any], reason: str) -> None:
    with pytest.raises(RerankFailed) as caught:
        parse_scores(reply(json.dumps({"scores": [entry]})), 1)
    assert caught.value.reason == reason


def test_reply_without_a_scores_list_is_refused() -> None:
    with pytest.raises(RerankFailed) as caught:
        parse_scores(reply('{"ranking": [1, 2]}'), 2)
    assert caught.value.reason == "the reply has no 'scores' list"


def test_apply_rerank_orders_by_score_and_breaks_ties_by_fused_rank() -> None:
    assert apply_rerank(["a", "b", "c", "d"], [0.2, 0.9, 0.2, 0.9]) == ["b", "d", "a", "c"]
    assert apply_rerank(["a", "b", "c"], [0.5, 0.5, 0.5]) == ["a", "b", "c"]
    assert apply_rerank([], []) == []


def test_apply_rerank_refuses_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="2 scores for 3 candidates"):
        apply_rerank(["a", "b", "c"], [0.1, 0.2])


def settings_from(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Settings:
    """Settings read (by mentis.config, as in a real process) from exactly ``env``'s provider variables."""
    for name in [n for n in os.environ if n.startswith((*PROVIDER_VARIABLES, "MENTIS_RERANKER"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings.from_env()


def test_reranker_is_off_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_reranker(settings_from(monkeypatch, {})) is None
    assert (
        load_reranker(settings_from(monkeypatch, {"MENTIS_RERANKER": "off", "OPENROUTER_API_KEY": KEY}))
        is None
    )
    with pytest.raises(ConfigError, match="unknown reranker 'cohere'"):
        load_reranker(settings_from(monkeypatch, {"MENTIS_RERANKER": "cohere"}))


def test_openai_reranker_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    reranker = load_reranker(
        settings_from(monkeypatch, {"MENTIS_RERANKER": "openai", "OPENROUTER_API_KEY": KEY})
    )
    assert reranker is not None
    with reranker:
        assert (reranker.base_url, reranker.model) == (OPENROUTER_BASE_URL, DEFAULT_MODEL)
    with pytest.raises(ConfigError, match="set MENTIS_RERANK_API_KEY or OPENROUTER_API_KEY"):
        load_reranker(settings_from(monkeypatch, {"MENTIS_RERANKER": "openai"}))


def test_rerank_against_the_environment_configured_server(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {
        "MENTIS_RERANKER": "openai",
        "MENTIS_RERANK_BASE_URL": fake.url,
        "MENTIS_RERANK_MODEL": "acme/judge",
        "MENTIS_RERANK_API_KEY": OPAQUE_KEY,
        "MENTIS_RERANK_TIMEOUT": "3",
    }
    reranker = load_reranker(settings_from(monkeypatch, env))
    assert reranker is not None
    with reranker:
        assert reranker.rerank(QUERY, CANDIDATES) == [1.0, 0.0, 0.5]
    assert fake.bodies()[0]["model"] == "acme/judge"
    assert fake.requests[0].headers["authorization"] == f"Bearer {OPAQUE_KEY}"
