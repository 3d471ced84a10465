"""The HTTP transport of ``mentis serve --remote``: every answer read with a byte bound.

A server that answers with more than the proxy will hold (a hostile one, or a broken one streaming
without end) must not take the agent's machine with it: a 300 MB answer once took the proxy from
101 MB to 1.69 GB of memory and was handed on to the harness. :class:`CappedTransport` sits under
the MCP client's ``httpx2`` client and reads at most ``limit`` bytes of any response:

- a JSON answer to a request (what ``mentis serve --http`` gives: stateless, JSON responses) is
  read up to the limit; past it, the connection is closed and the request is answered instead with
  a JSON-RPC error of code :data:`TOO_LARGE`, so that call alone fails and the session goes on;
- any other body (a server-sent event stream) is counted as it is read and ends in
  :class:`CapExceeded` at the limit, which the MCP client reports as that stream's failure.

The proxy asks for uncompressed answers (``Accept-Encoding: identity``) and treats a compressed one
as too large: its length on the wire does not bound its size in memory.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx2

MiB = 1 << 20
MAX_RESPONSE_MB = 16
"""The most the proxy reads of one answer, in MiB (``--max-response-mb``). Mentis's bounded answers
are far below it (a recall result is at most 512,000 bytes, a skill's text 1 MiB, each carried
twice: as text and as structured content); it keeps a broken or hostile server from exhausting the
agent's machine. ``export_memory_md`` of a very large repository can pass it: raise it for that."""
TOO_LARGE = -32090
"""The JSON-RPC error code of an answer the transport would not read (from the range JSON-RPC
leaves to implementations; it never travels on the wire)."""


class CapExceeded(httpx2.SSEError):
    """A streamed answer went past the transport's byte limit."""


def too_large_message(limit: int, why: str) -> str:
    return (
        f"{why}; this proxy reads at most {limit / MiB:g} MiB of one answer (--max-response-mb): ask "
        "for less (a smaller limit, one task, a narrower query) or raise that bound"
    )


class _Counted(httpx2.AsyncByteStream):
    """A response body that raises :class:`CapExceeded` once more than ``limit`` bytes went by, or
    at once when it is ``refused`` unread."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, refused: str | None) -> None:
        self.inner, self.limit, self.refused, self.seen = inner, limit, refused, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.refused is not None:
            await self.inner.aclose()
            raise CapExceeded(too_large_message(self.limit, self.refused))
        async for chunk in self.inner:
            self.seen += len(chunk)
            if self.seen > self.limit:
                await self.inner.aclose()
                raise CapExceeded(
                    too_large_message(self.limit, f"its answer went past {self.limit / MiB:g} MiB")
                )
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def _request_id(request: httpx2.Request) -> int | str | None:
    """The JSON-RPC id of the request ``request`` posts, if it posts one."""
    if request.method != "POST":
        return None
    try:
        message = json.loads(request.content)
    except (ValueError, httpx2.RequestNotRead):
        return None
    found = message.get("id") if isinstance(message, dict) and "method" in message else None
    return found if isinstance(found, int | str) and not isinstance(found, bool) else None


class CappedTransport(httpx2.AsyncBaseTransport):
    """``inner`` with every response body bounded by ``limit`` bytes (see the module docstring)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self.inner, self.limit = inner, limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)  # an async transport's response
        why = self._refusal(response.headers)
        request_id = _request_id(request)
        json_answer = response.headers.get("content-type", "").lower().startswith("application/json")
        if request_id is None or not json_answer:
            response.stream = _Counted(stream, self.limit, why)
            return response
        body = bytearray()
        try:
            if why is None:
                async for chunk in stream:
                    body += chunk
                    if len(body) > self.limit:
                        why = f"its answer is larger than {self.limit / MiB:g} MiB"
                        break
        finally:
            await stream.aclose()
        if why is not None:
            error = {"code": TOO_LARGE, "message": too_large_message(self.limit, why)}
            refusal = {"jsonrpc": "2.0", "id": request_id, "error": error}
            return httpx2.Response(200, json=refusal, request=request)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() != "transfer-encoding"]
        return httpx2.Response(response.status_code, headers=headers, content=bytes(body), request=request)

    def _refusal(self, headers: httpx2.Headers) -> str | None:
        """Why an answer is refused unread (its declared length, or a compression), else None."""
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            return (
                f"its answer is compressed ({encoding}) though the proxy asks for none: its size is unknown"
            )
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            return f"its answer is {int(declared):,} bytes"
        return None

    async def aclose(self) -> None:
        await self.inner.aclose()


def env_proxy(url: str) -> str | None:
    """The HTTP proxy the environment names for ``url`` (HTTPS_PROXY or HTTP_PROXY by scheme, else
    ALL_PROXY; none when NO_PROXY covers its host), as an httpx client would take it: a client
    given its own transport does not look."""
    parts = urlsplit(url)
    found = urllib.request.getproxies()
    proxy = found.get(parts.scheme) or found.get("all")
    if proxy is None or (parts.hostname and urllib.request.proxy_bypass(parts.hostname)):
        return None
    return proxy
