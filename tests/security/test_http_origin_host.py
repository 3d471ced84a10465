"""Finding 6 of the security review: Host and Origin are parsed strictly (scheme, host, port).

Before, the Origin check ignored the port (``http://localhost:31337``, another local web app, was
accepted) and ``Host: localhost:80@evil.com`` was read as ``localhost``. Every case runs against a
real server on loopback, and every refused write leaves the ledger as it was.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from mentis.http.tls import self_signed
from tests.http_support import LiveServer

WRITE = {"repository": "team-a/app", "task_id": "t", "action": "a", "observation": "o"}


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    with LiveServer(tmp_path / "mentis.db") as server:
        yield server


@pytest.fixture
def http(live: LiveServer) -> Iterator[httpx2.Client]:
    headers = {"Authorization": f"Bearer {live.token('write')}"}
    with httpx2.Client(base_url=live.url, headers=headers, timeout=30) as client:
        yield client


def refused_origins(port: int) -> list[str]:
    return [
        "http://localhost:31337",  # another web app on this machine
        "http://localhost",  # port 80
        f"https://localhost:{port}",  # served over http
        f"http://localhost:{port}/",
        f"http://localhost:{port}/path",
        f"http://user@localhost:{port}",
        f"http://localhost:{port}@evil.example",
        f"http://evil.example#@localhost:{port}",
        f"http://localhost:{port}.evil.example",
        f"ws://localhost:{port}",
        "null",
    ]


def refused_hosts(port: int) -> list[str]:
    return [
        "localhost:80@evil.example",
        f"localhost:{port}@evil.example",
        f"evil.example@localhost:{port}",
        "localhost:31337",
        "localhost",  # port 80
        f"localhost:{port}/x",
        f"localhost:{port} evil.example",
        "localhost:99999",
        f"[::1:{port}",
        f"localhost.:{port}",
        f"user:pw@localhost:{port}",
    ]


def test_an_origin_on_another_port_scheme_or_with_extra_parts_is_refused(
    live: LiveServer, http: httpx2.Client
) -> None:
    before = live.ledger()
    answers = {
        o: http.post("/v1/record_attempt", json=WRITE, headers={"Origin": o})
        for o in refused_origins(live.port)
    }
    assert {o: a.status_code for o, a in answers.items()} == {o: 403 for o in answers}
    assert {a.json()["error"]["code"] for a in answers.values()} == {"forbidden_origin"}
    assert live.ledger() == before


def test_a_host_that_is_not_exactly_an_allowed_host_and_the_served_port_is_refused(
    live: LiveServer, http: httpx2.Client
) -> None:
    before = live.ledger()
    answers = {
        h: http.post("/v1/record_attempt", json=WRITE, headers={"Host": h}) for h in refused_hosts(live.port)
    }
    assert {h: a.status_code for h, a in answers.items()} == {h: 421 for h in answers}
    assert {a.json()["error"]["code"] for a in answers.values()} == {"misdirected"}
    assert live.ledger() == before


def test_the_served_scheme_host_and_port_are_accepted(live: LiveServer, http: httpx2.Client) -> None:
    port = live.port
    cases = [
        {"Host": f"localhost:{port}"},
        {"Host": f"LocalHost:{port}"},
        {"Host": f"127.0.0.1:{port}"},
        {"Host": f"[::1]:{port}"},
        {"Host": f"[0:0::1]:{port}"},
        {"Origin": f"http://localhost:{port}"},
        {"Origin": f"HTTP://127.0.0.1:{port}"},
        {"Origin": f"http://[::1]:{port}"},
    ]
    statuses = [http.post("/v1/record_attempt", json=WRITE, headers=h).status_code for h in cases]
    assert statuses == [200] * len(cases)
    assert len(live.ledger()) == len(cases)


def test_an_https_server_refuses_an_http_origin_for_its_own_host_and_port(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path / "tls")
    with LiveServer(tmp_path / "mentis.db", tls_cert=cert, tls_key=key) as live:
        trusting = ssl.create_default_context(cafile=str(cert))
        with httpx2.Client(base_url=live.url, verify=trusting) as http:
            plain = http.get("/health", headers={"Origin": f"http://localhost:{live.port}"})
            secure = http.get("/health", headers={"Origin": f"https://localhost:{live.port}"})
            default_port = http.get("/health", headers={"Origin": "https://localhost"})
    assert (plain.status_code, secure.status_code, default_port.status_code) == (403, 200, 403)


def test_an_allowed_host_with_a_port_admits_that_port_only(tmp_path: Path) -> None:
    with (
        LiveServer(tmp_path / "mentis.db", allowed_hosts=("mentis.example:443",)) as live,
        httpx2.Client(base_url=live.url) as http,
    ):
        asks = {
            "mentis.example:443": http.get("/health", headers={"Host": "mentis.example:443"}),
            "served port": http.get("/health", headers={"Host": f"mentis.example:{live.port}"}),
            "origin 443": http.get("/health", headers={"Origin": "http://mentis.example:443"}),
        }
    assert {k: a.status_code for k, a in asks.items()} == {
        "mentis.example:443": 200,
        "served port": 421,
        "origin 443": 200,
    }
