"""The two store backends as fixtures, shared by tests/conformance and tests/security: ``backend``
is parametrised over ``sqlite`` and ``postgres``; a directory's ``settings`` fixture builds its
store with :func:`backend_settings`, and ``open_memory`` opens Memories on it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Memory
from tests.pg_server import Cluster

BACKENDS = ("sqlite", "postgres")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def backend_settings(backend: str, home: Path, request: pytest.FixtureRequest) -> Settings:
    """A store of ``backend`` in ``home``: its SQLite file there, or a fresh database in the
    session's PostgreSQL cluster (``pg_cluster`` of tests/conftest.py), its schema already made
    for the hash embedder's vectors (``Cluster.new_migrated_database``; the migrations from an
    empty database run where a test makes its own with ``new_database``)."""
    base = Settings(home=home, db_path=home / "mentis.db", embedder="hash")
    if backend == "sqlite":
        return base
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    return dataclasses.replace(base, database_url=cluster.new_migrated_database(HashEmbedder().dim))


@pytest.fixture
def open_memory(settings: Settings) -> Iterator[Callable[[], Memory]]:
    """Opens (and at teardown closes) a Memory on this test's store; each open verifies it."""
    opened: list[Memory] = []

    def open_() -> Memory:
        m = Memory.open(settings, HashEmbedder())
        opened.append(m)
        return m

    yield open_
    for m in opened:
        m.close()
