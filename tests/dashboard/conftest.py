"""Fixtures for the dashboard: a seeded store, its token table, and a client on the whole app."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser
from starlette.testclient import TestClient

from mentis.config import Settings
from mentis.http import HttpConfig, build_app
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Memory
from mentis.service.tokens import TokenStore
from tests.dashboard.browser import Guarded, launch
from tests.dashboard.seed import Seeded, seed

SECRET = b"s" * 32
"""The session secret of the test apps, so a test can sign (or forge) a cookie itself."""
CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


@pytest.fixture
def seeded_memory(tmp_path: Path) -> Iterator[tuple[Memory, Seeded]]:
    db = tmp_path / "mentis.db"
    memory = Memory.open(Settings(home=tmp_path, db_path=db, embedder="hash"), HashEmbedder())
    try:
        yield memory, seed(memory)
    finally:
        memory.close()


@pytest.fixture
def tokens(tmp_path: Path) -> Iterator[TokenStore]:
    store = TokenStore(tmp_path / "mentis.db")
    yield store
    store.close()


@pytest.fixture
def memory(seeded_memory: tuple[Memory, Seeded]) -> Memory:
    return seeded_memory[0]


@pytest.fixture
def seeded(seeded_memory: tuple[Memory, Seeded]) -> Seeded:
    return seeded_memory[1]


@pytest.fixture
def client_for(memory: Memory, tokens: TokenStore) -> Iterator[Callable[..., TestClient]]:
    """A client on the whole HTTP app (token auth unless auth=False), on http://127.0.0.1."""
    clients: list[TestClient] = []

    def make(auth: bool = True) -> TestClient:
        app = build_app(memory, tokens if auth else None, HttpConfig(auth=auth, session_secret=SECRET))
        client = TestClient(app, base_url="http://127.0.0.1")
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def client(client_for: Callable[..., TestClient]) -> TestClient:
    return client_for()


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)


def login(client: TestClient, token: str) -> None:
    page = client.get("/dashboard/login")
    response = client.post(
        "/dashboard/login", data={"csrf": csrf_of(page.text), "token": token}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/dashboard/"


def make_token(tokens: TokenStore, scope: str = "admin", repos: tuple[str, ...] = ()) -> str:
    return tokens.create(scope=scope, repositories=repos, agent=f"{scope}-person")[0]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One chromium per test module (the browser tests')."""
    yield from launch()


@pytest.fixture
def guard(browser: Browser) -> Iterator[Guarded]:
    """A fresh guarded context per test; the test fails if the page asked for anything off the host."""
    guarded = Guarded(browser)
    yield guarded
    guarded.close()
    assert guarded.outside == [], "the dashboard asked for something off 127.0.0.1"
