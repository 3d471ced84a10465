"""Shared fixtures: real SQLite files in tmp_path, the deterministic embedder for unit tests and
the real all-MiniLM-L6-v2 model (loaded once per session) for end-to-end tests."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mentis.config import Settings
from mentis.providers.embed import Embedder, HashEmbedder
from mentis.service.memory import Caller, Memory
from tests.http_support import LiveServer
from tests.pg_server import Cluster, throwaway_cluster
from tests.transports import AGENT, TRANSPORTS, Call

pytest_plugins = ("tests.backends",)
"""The ``backend`` and ``open_memory`` fixtures of both stores (tests/conformance, tests/security)."""

REPO = "github.com/acme/shop"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "mentis.db"


@pytest.fixture
def settings(db_path: Path) -> Settings:
    return Settings(home=db_path.parent, db_path=db_path, embedder="hash")


@pytest.fixture
def memory(settings: Settings) -> Iterator[Memory]:
    m = Memory.open(settings, HashEmbedder())
    yield m
    m.close()


_clusters: list[Cluster] = []
"""The session's cluster, once a test asked for it (so that ``drop_test_databases`` never starts one)."""


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """One throwaway PostgreSQL cluster for the session; tests take fresh databases in it."""
    with throwaway_cluster() as cluster:
        _clusters.append(cluster)
        yield cluster
        _clusters.remove(cluster)


@pytest.fixture(autouse=True)
def drop_test_databases() -> Iterator[None]:
    """Drops the databases a test made in the session's cluster once its other fixtures are gone."""
    yield
    for cluster in _clusters:
        cluster.drop_created()


@pytest.fixture(scope="session")
def real_embedder() -> Embedder:
    from mentis.providers.embed.local import LocalEmbedder

    return LocalEmbedder.load()


@pytest.fixture
def real_memory(settings: Settings, real_embedder: Embedder) -> Iterator[Memory]:
    m = Memory.open(settings, real_embedder)
    yield m
    m.close()


@pytest.fixture
def caller() -> Caller:
    return Caller(agent_id="test-agent")


@pytest.fixture
def mentis_env(db_path: Path) -> dict[str, str]:
    """Environment for a `mentis` subprocess on this test's store (hash embedder)."""
    env = dict(os.environ)
    env.update(MENTIS_DB=str(db_path), MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="test-agent")
    return env


MENTIS = [sys.executable, "-m", "mentis"]


@pytest.fixture(params=TRANSPORTS)
def call(request: pytest.FixtureRequest, db_path: Path) -> Iterator[Call]:
    """Runs an operation by its operations.py name through one transport (MCP over HTTP, REST, the
    CLI) on a live server's store: ``call("search", {...})`` -> ``("ok", result)`` or ``(code, message)``.
    ``call.direct(...)`` is the service's own answer; ``call.live.memory`` the service, for seeding."""
    env = dict(os.environ, MENTIS_DB=str(db_path), MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID=AGENT)
    env.pop("MENTIS_DATABASE_URL", None)
    with LiveServer(db_path) as live:
        yield Call(str(request.param), live, env)
