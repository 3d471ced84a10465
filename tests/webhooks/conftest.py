"""Webhook fixtures: both stores (``settings`` is parametrised over sqlite and postgres, as in
tests/conformance), a real HTTP receiver on loopback that checks every signature with the
Standard Webhooks 1.0.0 algorithm, and helpers to subscribe and to run the deliverer."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from mentis.api.webhooks import CreateWebhookInput, CreateWebhookResult
from mentis.config import Settings
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore
from mentis.service.webhook_rules import WebhookSettings
from mentis.service.webhooks import Deliverer
from tests.backends import backend_settings

FAST = {
    "MENTIS_WEBHOOK_BACKOFF_S": "0.01",
    "MENTIS_WEBHOOK_MAX_ATTEMPTS": "3",
    "MENTIS_WEBHOOK_TIMEOUT_S": "5",
}
ADMIN = Caller(agent_id="ops", admin=True)
REPO = "github.com/acme/shop"


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The receiver's check, written from the specification (not from Mentis's code): HMAC-SHA256
    keyed with the base64-decoded secret over ``{webhook-id}.{webhook-timestamp}.{body}``, base64,
    prefixed ``v1,``, any of the space-separated signatures, compared in constant time."""
    key = base64.b64decode(secret.split("_", 1)[1])
    content = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    return any(
        sig.startswith("v1,") and hmac.compare_digest(sig[3:], expected)
        for sig in headers["webhook-signature"].split(" ")
    )


class Receiver:
    """A real HTTP server on 127.0.0.1 (a thread): answers ``fail`` requests with 500 (or with
    a redirect to ``redirect``) and then 204, recording every request."""

    def __init__(self, fail: int = 0, redirect: str | None = None) -> None:
        self.fail, self.redirect = fail, redirect
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.secret = ""
        self.got = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with outer.got:
                    outer.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    failing = len(outer.requests) <= outer.fail
                    outer.got.notify_all()
                if failing and outer.redirect:
                    self.send_response(302)
                    self.send_header("location", outer.redirect)
                else:
                    self.send_response(500 if failing else 204)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self) -> list[dict[str, Any]]:
        """Every body received, each after its signature verified."""
        for headers, body in self.requests:
            assert verify(self.secret, headers, body), headers
        return [orjson.loads(body) for _, body in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def make_receiver() -> Iterator[Callable[..., Receiver]]:
    made: list[Receiver] = []

    def make(**kwargs: Any) -> Receiver:
        made.append(Receiver(**kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture
def settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    return dataclasses.replace(backend_settings(backend, tmp_path, request), webhooks=FAST)


@pytest.fixture
def memory(open_memory: Callable[[], Memory]) -> Memory:
    return open_memory()


@pytest.fixture
def tokens(settings: Settings) -> Iterator[TokenStore]:
    store = TokenStore.open(settings)
    yield store
    store.close()


@pytest.fixture
def deliverer(memory: Memory, tokens: TokenStore, settings: Settings) -> Iterator[Deliverer]:
    d = Deliverer(memory.store, tokens, WebhookSettings.of(settings))
    yield d
    d.close()


def subscribe(
    memory: Memory, tokens: TokenStore, receiver: Receiver, repos: tuple[str, ...] = ("*",), **fields: Any
) -> CreateWebhookResult:
    """A subscription of ``receiver`` (all events unless ``events`` is given) bounded by a new read
    token over ``repos``; the receiver learns its secret."""
    _, token = tokens.create(scope="read", repositories=repos)
    data = {"url": receiver.url, "events": ["attempt.recorded"], "token_id": token.id, **fields}
    made = memory.create_webhook(ADMIN, CreateWebhookInput(**data))
    receiver.secret = made.secret
    return made


def drain(deliverer: Deliverer, within_s: float = 30.0) -> None:
    """Run the deliverer until no delivery is pending (a retry is due ~10 ms after a failure; a
    row another deliverer holds is pending until it settles), failing after ``within_s``."""
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not deliverer.run_once():
            pending = deliverer.store.outbox_rows(None, "pending", 1)
            if not pending:
                return
            time.sleep(0.01)
    raise AssertionError("deliveries still pending")
