"""The HTTP client shared by the OpenAI-compatible providers (embeddings and the reranker).

:class:`OpenAIClient` posts JSON to ``{base_url}/{path}`` over one ``httpx.Client`` (connections
are reused) and returns the parsed reply. Every failure, HTTP status, timeout, refused
connection, oversized or malformed reply, is raised as the caller's error type with a short
reason that has passed the secret scrubber and never holds the API key. The key travels only
in the ``Authorization: Bearer`` header.

Time is bounded: ``timeout`` applies to each connect, read and write, and a reply that is
still arriving ``timeout`` seconds after the request was sent is abandoned, so one try takes at
most about twice ``timeout``. 429 and 5xx replies are retried at most ``retries`` times, after
``backoff * 2**n`` seconds or the reply's ``Retry-After`` (both capped at ``max_wait``).
"""

from __future__ import annotations

import email.utils
import functools
import ipaddress
import json
import logging
import math
import ssl
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from mentis.errors import ConfigError, MentisError
from mentis.providers.scrub import scrub_text

logger = logging.getLogger(__name__)

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
MAX_REPLY_BYTES = 64 * 1024 * 1024
"""Largest reply read (a batch of 64 vectors of 1024 floats is about 1.5 MB of JSON)."""
MAX_DETAIL = 300
"""Characters of a provider's error message kept in a reason."""


class OpenAIClient:
    """POST JSON to an OpenAI-compatible API; failures raise ``fail(reason)``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float,
        fail: Callable[[str], MentisError],
        retries: int = 2,
        backoff: float = 0.5,
        max_wait: float = 4.0,
        sleep: Callable[[float], None] = time.sleep,
        max_reply_bytes: int = MAX_REPLY_BYTES,
        refused: str = "the provider refused the API key",
    ) -> None:
        self.base_url = check_base_url(base_url)
        self.timeout = timeout
        self._api_key = api_key or None
        self._fail = fail
        self._retries = retries
        self._backoff = backoff
        self._max_wait = max_wait
        self._sleep = sleep
        self._max_reply_bytes = max_reply_bytes
        self._refused = refused
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._client = httpx.Client(
            headers=headers, timeout=timeout, follow_redirects=False, verify=_ssl_context()
        )

    def close(self) -> None:
        self._client.close()

    def redact(self, text: str) -> str:
        """``text`` scrubbed of secrets and of the API key, cut to :data:`MAX_DETAIL` characters."""
        if self._api_key:
            text = text.replace(self._api_key, "[REDACTED:api_key]")
        text = " ".join(scrub_text(text).split())
        return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        """The parsed JSON reply to ``POST {base_url}/{path}``, after at most ``retries`` retries."""
        url = f"{self.base_url}/{path.lstrip('/')}"
        for attempt in range(self._retries + 1):
            status, headers, content = self._send(url, body)
            if status < 400:
                reply = self._parse(status, content)
                # OpenRouter reports some upstream failures as HTTP 200 with an "error" object.
                if isinstance(reply, dict) and "error" in reply and not {"data", "choices"} & reply.keys():
                    raise self._fail(self.redact(f"HTTP {status} with an error: {self._detail(content)}"))
                return reply
            reason = f"HTTP {status}: {self._detail(content)}"
            if status in (401, 403):
                reason += f" ({self._refused})"
            if (status == 429 or status >= 500) and attempt < self._retries:
                wait = self._wait(attempt, headers.get("retry-after"))
                logger.info("%s; retrying in %.2fs", self.redact(reason), wait)
                self._sleep(wait)
                continue
            if attempt:
                reason += f" after {attempt + 1} tries"
            raise self._fail(self.redact(reason))
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, url: str, body: Mapping[str, Any]) -> tuple[int, httpx.Headers, bytes]:
        started = time.monotonic()
        try:
            with self._client.stream("POST", url, json=body) as response:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > self._max_reply_bytes:
                        raise self._fail(f"the reply is larger than {self._max_reply_bytes} bytes")
                    if time.monotonic() - started > self.timeout:
                        raise self._fail(f"timed out after {self.timeout:g}s (reply still arriving)")
                    chunks.append(chunk)
                return response.status_code, response.headers, b"".join(chunks)
        except httpx.TimeoutException as exc:
            raise self._fail(f"timed out after {self.timeout:g}s ({type(exc).__name__})") from exc
        except httpx.ConnectError as exc:
            raise self._fail(self.redact(f"could not connect to {url}: {exc}")) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise self._fail(self.redact(f"request to {url} failed: {type(exc).__name__}: {exc}")) from exc

    def _parse(self, status: int, content: bytes) -> Any:
        try:
            return json.loads(content)
        except ValueError as exc:  # UnicodeDecodeError is a ValueError
            start = content[:120].decode("utf-8", "replace")
            raise self._fail(self.redact(f"HTTP {status} with a reply that is not JSON: {start!r}")) from exc

    def _detail(self, content: bytes) -> str:
        """The provider's own error message: ``error.message``, ``error``, ``message`` or the body."""
        text = content.decode("utf-8", "replace")
        try:
            payload = json.loads(text)
        except ValueError:
            return text.strip() or "(empty reply)"
        if isinstance(payload, dict):
            error = payload.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                return str(error["message"])
            if isinstance(error, str):
                return error
            if isinstance(payload.get("message"), str):
                return str(payload["message"])
        return text.strip()

    def _wait(self, attempt: int, retry_after: str | None) -> float:
        wait = self._backoff * float(2**attempt)
        if retry_after:
            parsed = _retry_after_seconds(retry_after)
            if parsed is not None:
                wait = parsed
        return max(0.0, min(wait, self._max_wait))


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle takes ~80 ms; every client of the process shares one context
    # (httpx's default one: certifi, or SSL_CERT_FILE / SSL_CERT_DIR when set).
    return httpx.create_ssl_context()


def _retry_after_seconds(value: str) -> float | None:
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return seconds if math.isfinite(seconds) else None


def check_base_url(base_url: str) -> str:
    """``base_url`` without a trailing slash; it must be an http(s) URL with a host."""
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"provider base URL {scrub_text(base_url)!r} is not an http(s) URL; "
            f"set it like {OPENROUTER_BASE_URL!r}"
        )
    return base_url.strip().rstrip("/")


def is_loopback(base_url: str) -> bool:
    """Whether ``base_url`` points at this machine (:func:`loopback_host`)."""
    return loopback_host(urlsplit(base_url).hostname or "")


def loopback_host(host: str) -> bool:
    """Whether ``host`` (a URL's hostname) is ``localhost`` or a loopback address (127.0.0.0/8,
    ::1): where a token may travel over plain http."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{name}={raw!r} is not a positive number; unset it or give e.g. {default:g}")
    return value


def env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} is not a positive integer; unset it or give e.g. {default}")
    return value


def env_api_key(env: Mapping[str, str], names: tuple[str, ...], base_url: str) -> str | None:
    """The first of ``names`` set in ``env``; none set is an error unless the URL is loopback."""
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    if is_loopback(base_url):
        return None
    raise ConfigError(f"no API key for {base_url}; set {' or '.join(names)}")


__all__ = [
    "OPENROUTER_BASE_URL",
    "OpenAIClient",
    "check_base_url",
    "env_api_key",
    "env_float",
    "env_int",
    "is_loopback",
    "loopback_host",
]
