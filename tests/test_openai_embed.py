"""The OpenAI-compatible embedder against a real local HTTP server speaking the wire format."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mentis.api.attempts import RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import ConfigError, EmbeddingError
from mentis.providers.embed import Embedder, HashEmbedder, load_embedder
from mentis.providers.embed.openai import DEFAULT_DIM, DEFAULT_MODEL, OpenAIEmbedder
from mentis.providers.http import OPENROUTER_BASE_URL, OpenAIClient
from mentis.service.memory import Caller, Memory

from .conftest import REPO
from .fake_openai import FakeOpenAI

DIM = 8
# Assembled at run time so no secret-shaped literal sits in the repository.
KEY = "sk-or-v1-" + "0f1e2d3c4b5a6978" * 4
OPAQUE_KEY = "local-dev-key-do-not-leak-42"
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5f6" * 3
DB_PASSWORD = "Hunter2Hunter2xyz"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(dim=DIM) as server:
        yield server
    assert server.errors == []


@pytest.fixture
def waits() -> list[float]:
    """The backoff waits the client asked for (it is handed ``waits.append`` as its sleep)."""
    return []


@pytest.fixture
def embedder(fake: FakeOpenAI, waits: list[float]) -> Iterator[OpenAIEmbedder]:
    with OpenAIEmbedder(fake.url, DEFAULT_MODEL, DIM, KEY, timeout=5, batch=4, sleep=waits.append) as e:
        yield e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_embedder_implements_the_protocol(embedder: OpenAIEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert (embedder.model_id, embedder.dim) == ("openai:voyageai/voyage-4", DIM)


def test_vectors_are_unit_rows_in_input_order(embedder: OpenAIEmbedder, fake: FakeOpenAI) -> None:
    texts = ["migration lock timeout", "css grid overflow", "flaky test on CI"]
    vectors = embedder.embed(texts)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, HashEmbedder(DIM).embed(texts), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert fake.bodies() == [{"model": DEFAULT_MODEL, "input": texts, "encoding_format": "float"}]
    assert fake.requests[0].path == "/v1/embeddings"


def test_reply_out_of_order_is_sorted_by_index(embedder: OpenAIEmbedder, fake: FakeOpenAI) -> None:
    fake.behaviour = "reordered"
    texts = ["alpha beta", "gamma delta", "epsilon"]
    np.testing.assert_allclose(embedder.embed(texts), HashEmbedder(DIM).embed(texts), atol=1e-6)


def test_texts_are_sent_in_batches(embedder: OpenAIEmbedder, fake: FakeOpenAI) -> None:
    texts = [f"text number {i}" for i in range(10)]
    vectors = embedder.embed(texts)
    assert [len(body["input"]) for body in fake.bodies()] == [4, 4, 2]
    np.testing.assert_allclose(vectors, HashEmbedder(DIM).embed(texts), atol=1e-6)


def test_no_texts_sends_no_request(embedder: OpenAIEmbedder, fake: FakeOpenAI) -> None:
    assert embedder.embed([]).shape == (0, DIM)
    assert fake.requests == []


def test_empty_text_is_sent_as_a_space(embedder: OpenAIEmbedder, fake: FakeOpenAI) -> None:
    embedder.embed([""])
    assert fake.bodies()[0]["input"] == [" "]


def test_one_connection_is_reused_across_calls(embedder: OpenAIEmbedder, fake: FakeOpenAI) -> None:
    embedder.embed(["one"])
    embedder.embed(["two"])
    embedder.embed(["three"])
    assert len({r.client_port for r in fake.requests}) == 1


def test_secrets_in_texts_never_leave_the_machine(embedder: OpenAIEmbedder, fake: FakeOpenAI) -> None:
    embedder.embed(
        [
            f"pushed with GITHUB_TOKEN={GITHUB_TOKEN}",
            f"DATABASE_URL=postgres://shop:{DB_PASSWORD}@db:5432/shop",
        ]
    )
    sent = fake.sent()
    assert GITHUB_TOKEN not in sent
    assert DB_PASSWORD not in sent
    assert fake.bodies()[0]["input"] == [
        "pushed with GITHUB_TOKEN=[REDACTED:github_token]",
        "DATABASE_URL=postgres://shop:[REDACTED:url_password]@db:5432/shop",
    ]


def test_api_key_is_sent_only_in_the_authorization_header(embedder: OpenAIEmbedder, fake: FakeOpenAI) -> None:
    embedder.embed(["a", "b", "c", "d", "e"])
    assert len(fake.requests) == 2
    for request in fake.requests:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        assert KEY not in request.body.decode()
        assert KEY not in request.path
        assert [k for k, v in request.headers.items() if KEY in v] == ["authorization"]


def test_no_api_key_sends_no_authorization_header(fake: FakeOpenAI) -> None:
    with OpenAIEmbedder(fake.url, "m", DIM, None) as e:
        e.embed(["x"])
    assert "authorization" not in fake.requests[0].headers


@pytest.mark.parametrize(
    ("behaviour", "fragment"),
    [
        ("http_500", "HTTP 500: upstream model crashed after 3 tries"),
        ("http_429", "HTTP 429: rate limited, slow down after 3 tries"),
        ("html", "HTTP 502: <html><body>502 Bad Gateway</body></html> after 3 tries"),
        ("malformed_json", "HTTP 200 with a reply that is not JSON"),
        ("error_200", "HTTP 200 with an error: No endpoints found for this model"),
        ("wrong_dim", "the provider returned 9 dimensions, expected exactly 8"),
        ("nan", "non-finite numbers"),
        ("wrong_count", "the reply holds 1 vectors for 2 texts"),
        ("missing_data", "the reply has no 'data' list"),
        ("string_values", "holds a value that is not a number"),
    ],
)
def test_provider_failure_is_an_embedding_error_with_its_reason(
    embedder: OpenAIEmbedder, fake: FakeOpenAI, behaviour: str, fragment: str
) -> None:
    fake.behaviour = behaviour
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed(["first text", "second text"])
    assert caught.value.code == "embedding"
    assert fragment in caught.value.message
    assert caught.value.message.startswith(f"embedding provider {DEFAULT_MODEL!r} at {fake.url} failed: ")


def test_dimension_must_be_exact_not_just_large_enough(fake: FakeOpenAI) -> None:
    with (
        OpenAIEmbedder(fake.url, "m", DIM - 1, None) as short,
        OpenAIEmbedder(fake.url, "m", DIM + 1, None) as long,
    ):
        for e in (short, long):
            with pytest.raises(EmbeddingError, match="dimensions, expected exactly"):
                e.embed(["x"])


def test_nothing_is_returned_when_a_later_batch_fails(embedder: OpenAIEmbedder, fake: FakeOpenAI) -> None:
    fake.script = ["ok", "nan"]
    with pytest.raises(EmbeddingError, match="non-finite"):
        embedder.embed([f"t{i}" for i in range(8)])
    assert len(fake.requests) == 2


def test_hung_provider_times_out_without_retrying(fake: FakeOpenAI) -> None:
    fake.behaviour = "hang"
    started = time.monotonic()
    with OpenAIEmbedder(fake.url, "m", DIM, None, timeout=0.5) as e, pytest.raises(EmbeddingError) as caught:
        e.embed(["x"])
    assert "timed out after 0.5s (ReadTimeout)" in caught.value.message
    assert time.monotonic() - started < fake.hang_seconds  # the client gave up, not the fake
    assert len(fake.requests) == 1


def test_refused_connection_is_an_embedding_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with OpenAIEmbedder(url, "m", DIM, KEY) as e, pytest.raises(EmbeddingError) as caught:
        e.embed(["x"])
    assert f"could not connect to {url}/embeddings" in caught.value.message
    assert KEY not in caught.value.message


def test_connection_closed_without_a_reply_is_an_embedding_error(
    embedder: OpenAIEmbedder, fake: FakeOpenAI
) -> None:
    fake.behaviour = "drop"
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed(["x"])
    assert (
        "failed: RemoteProtocolError: Server disconnected without sending a response" in caught.value.message
    )


def test_oversized_reply_is_refused(fake: FakeOpenAI) -> None:
    client = OpenAIClient(fake.url, None, timeout=5, fail=EmbeddingError, max_reply_bytes=100)
    try:
        with pytest.raises(EmbeddingError, match="the reply is larger than 100 bytes"):
            client.post("embeddings", {"model": "m", "input": ["x" * 10]})
    finally:
        client.close()


def test_server_errors_are_retried_twice_with_backoff(
    embedder: OpenAIEmbedder, fake: FakeOpenAI, waits: list[float]
) -> None:
    fake.script = ["http_500", "http_429"]
    assert embedder.embed(["x"]).shape == (1, DIM)
    assert len(fake.requests) == 3
    assert waits == [0.5, 1.0]


def test_retry_after_is_honoured_up_to_the_cap(
    embedder: OpenAIEmbedder, fake: FakeOpenAI, waits: list[float]
) -> None:
    fake.behaviour = "http_429"
    fake.retry_after = "2"
    with pytest.raises(EmbeddingError, match="HTTP 429"):
        embedder.embed(["x"])
    fake.retry_after = "120"
    with pytest.raises(EmbeddingError, match="HTTP 429"):
        embedder.embed(["x"])
    assert waits == [2.0, 2.0, 4.0, 4.0]
    assert len(fake.requests) == 6


def test_client_errors_are_not_retried(
    embedder: OpenAIEmbedder, fake: FakeOpenAI, waits: list[float]
) -> None:
    fake.behaviour = "http_400_echo"
    with pytest.raises(EmbeddingError, match="HTTP 400: bad request"):
        embedder.embed([f"token {GITHUB_TOKEN}"])
    assert (len(fake.requests), waits) == (1, [])


@pytest.mark.parametrize("key", [KEY, OPAQUE_KEY])
def test_api_key_echoed_by_the_provider_is_redacted(fake: FakeOpenAI, key: str) -> None:
    fake.behaviour = "http_401"
    with OpenAIEmbedder(fake.url, "m", DIM, key) as e, pytest.raises(EmbeddingError) as caught:
        e.embed(["x"])
    assert key not in caught.value.message
    assert "HTTP 401: invalid credentials: Bearer [REDACTED:" in caught.value.message
    assert "(the provider refused the API key)" in caught.value.message


def test_secret_in_the_provider_message_is_redacted(embedder: OpenAIEmbedder, fake: FakeOpenAI) -> None:
    fake.behaviour = "http_500"
    fake.error_message = f"cannot reach postgres://svc:{DB_PASSWORD}@10.0.0.5/db"
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed(["x"])
    assert DB_PASSWORD not in caught.value.message
    assert "postgres://svc:[REDACTED:url_password]@10.0.0.5/db" in caught.value.message


def test_base_url_must_be_http() -> None:
    with pytest.raises(ConfigError, match="not an http"):
        OpenAIEmbedder("ftp://example.com/v1", "m", DIM, KEY)


def test_from_env_defaults_to_the_openrouter_preset() -> None:
    with OpenAIEmbedder.from_env({"OPENROUTER_API_KEY": KEY}) as e:
        assert (e.base_url, e.model, e.dim) == (OPENROUTER_BASE_URL, DEFAULT_MODEL, DEFAULT_DIM)


def test_from_env_needs_a_key_unless_the_url_is_loopback() -> None:
    with pytest.raises(ConfigError, match="set MENTIS_EMBED_API_KEY or OPENROUTER_API_KEY"):
        OpenAIEmbedder.from_env({})
    with OpenAIEmbedder.from_env({"MENTIS_EMBED_BASE_URL": "http://127.0.0.1:9/v1"}) as e:
        assert e.base_url == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(("name", "value"), [("MENTIS_EMBED_DIM", "0"), ("MENTIS_EMBED_TIMEOUT", "soon")])
def test_from_env_rejects_a_bad_number(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        OpenAIEmbedder.from_env({"OPENROUTER_API_KEY": KEY, name: value})


def test_load_embedder_openai_reads_the_environment(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MENTIS_EMBEDDER", "openai")
    monkeypatch.setenv("MENTIS_EMBED_BASE_URL", fake.url)
    monkeypatch.setenv("MENTIS_EMBED_MODEL", "acme/embed-small")
    monkeypatch.setenv("MENTIS_EMBED_DIM", str(DIM))
    monkeypatch.setenv("MENTIS_EMBED_API_KEY", OPAQUE_KEY)
    monkeypatch.setenv("OPENROUTER_API_KEY", KEY)
    embedder = load_embedder(Settings.from_env())
    assert isinstance(embedder, OpenAIEmbedder)
    with embedder:
        assert embedder.embed(["x"]).shape == (1, DIM)
    assert fake.bodies()[0]["model"] == "acme/embed-small"
    assert fake.requests[0].headers["authorization"] == f"Bearer {OPAQUE_KEY}"


def _record(memory: Memory, observation: str) -> Any:
    data = {"repository": REPO, "task_id": "T-1", "action": "ran the migration", "observation": observation}
    return memory.record_attempt(Caller(agent_id="test-agent"), parse(RecordAttemptInput, data))


def test_memory_embeds_through_the_provider_and_a_failure_writes_nothing(
    tmp_path: Path, embedder: OpenAIEmbedder, fake: FakeOpenAI
) -> None:
    settings = Settings(home=tmp_path, db_path=tmp_path / "mentis.db", embedder="openai")
    memory = Memory.open(settings, embedder)
    try:
        _record(memory, f"lock timeout; pushed with {GITHUB_TOKEN}")
        found = memory.search(Caller(agent_id="test-agent"), parse(SearchInput, {"query": "lock timeout"}))
        assert [t.task_id for t in found.tasks] == ["T-1"]
        fake.behaviour = "http_500"
        with pytest.raises(EmbeddingError):
            _record(memory, "another attempt")
        assert len(list(memory.store.iter_ledger())) == 1
    finally:
        memory.close()
    assert GITHUB_TOKEN not in fake.sent()
