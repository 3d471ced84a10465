"""The proxy's HTTP transport reads at most its limit of any answer: what it passes on, what it turns
into an error for that request alone, and how much it pulls off the wire before it stops. The
network under it is httpx2's MockTransport, answering as a server would, with bodies that count the
bytes the transport pulled. (test_remote_proxy.py runs the cap end to end against a real server.)"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator

import httpx2
import pytest

from mentis.mcp.remote_http import TOO_LARGE, CapExceeded, CappedTransport, env_proxy

LIMIT = 1 << 20
URL = "http://127.0.0.1:9471/mcp"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Body(httpx2.AsyncByteStream):
    """A response body of ``size`` bytes in ``chunk``-byte pieces, counting what was pulled."""

    def __init__(self, size: int, chunk: int = 1 << 16, fill: bytes = b"a") -> None:
        self.size, self.chunk, self.fill, self.pulled, self.closed = size, chunk, fill, 0, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.pulled < self.size:
            piece = self.fill * min(self.chunk, self.size - self.pulled)
            self.pulled += len(piece)
            yield piece

    async def aclose(self) -> None:
        self.closed = True


def _client(answer: httpx2.Response) -> httpx2.AsyncClient:
    inner = httpx2.MockTransport(lambda request: answer)
    return httpx2.AsyncClient(transport=CappedTransport(inner, LIMIT))


def _call(request_id: int = 7) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {}}).encode()


@pytest.mark.anyio
async def test_an_answer_within_the_limit_comes_through_unchanged() -> None:
    text = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": []}}).encode()
    answer = httpx2.Response(201, headers={"content-type": "application/json"}, content=text)
    async with _client(answer) as client:
        got = await client.post(URL, content=_call())
    assert (got.status_code, got.content) == (201, text)


@pytest.mark.anyio
async def test_an_answer_over_the_limit_is_a_jsonrpc_error_for_its_request_and_no_more_is_read() -> None:
    body = Body(100 * LIMIT)
    answer = httpx2.Response(200, headers={"content-type": "application/json"}, stream=body)
    async with _client(answer) as client:
        got = await client.post(URL, content=_call(request_id=42))
    error = got.json()
    assert (got.status_code, error["id"], error["error"]["code"]) == (200, 42, TOO_LARGE)
    assert error["error"]["message"].startswith(
        "its answer is larger than 1 MiB; this proxy reads at most 1 MiB"
    )
    assert LIMIT < body.pulled <= LIMIT + body.chunk and body.closed


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({"content-length": str(LIMIT + 1)}, f"its answer is {LIMIT + 1:,} bytes"),
        ({"content-encoding": "gzip"}, "its answer is compressed (gzip) though the proxy asks for none"),
    ],
    ids=["declared-length", "compressed"],
)
@pytest.mark.anyio
async def test_an_answer_too_large_by_its_headers_is_refused_unread(
    headers: dict[str, str], why: str
) -> None:
    body = Body(LIMIT + 1 if "content-length" in headers else 0)
    answer = httpx2.Response(200, headers={"content-type": "application/json", **headers}, stream=body)
    async with _client(answer) as client:
        got = await client.post(URL, content=_call())
    assert got.json()["error"]["message"].startswith(why)
    assert body.pulled == 0 and body.closed


@pytest.mark.anyio
async def test_a_small_compressed_answer_is_refused_too_since_it_could_expand_without_bound() -> None:
    packed = gzip.compress(b'{"jsonrpc": "2.0", "id": 7, "result": {}}')
    answer = httpx2.Response(
        200, headers={"content-type": "application/json", "content-encoding": "gzip"}, content=packed
    )
    async with _client(answer) as client:
        got = await client.post(URL, content=_call())
    assert got.json()["error"]["code"] == TOO_LARGE


@pytest.mark.anyio
async def test_a_stream_that_goes_past_the_limit_ends_in_an_error_where_it_passes_it() -> None:
    body = Body(100 * LIMIT)
    answer = httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=body)
    read = 0
    async with _client(answer) as client, client.stream("POST", URL, content=_call()) as got:
        with pytest.raises(CapExceeded, match="its answer went past"):
            async for chunk in got.aiter_raw():
                read += len(chunk)
    assert read <= LIMIT < body.pulled <= LIMIT + body.chunk


def test_the_environments_proxy_is_kept_for_the_remote_unless_no_proxy_covers_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("https://mentis.example.com/mcp") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    assert env_proxy("https://mentis.example.com/mcp") == "http://proxy.corp:3128"
    assert env_proxy("http://127.0.0.1:9471/mcp") is None
    monkeypatch.setenv("NO_PROXY", "example.com")
    assert env_proxy("https://mentis.example.com/mcp") is None
