"""One suite over both stores: every fixture here is parametrised over ``sqlite`` and ``postgres``,
so a test in this directory that takes ``memory``, ``settings`` (or any fixture built on them) runs
once per backend, with ids ``[sqlite]`` and ``[postgres]``. The service's behaviour tests live here
for that reason; a test that holds on one backend only builds its own store (``tmp_path``) instead.

The PostgreSQL cluster is started once per session (``tests/pg_server.py``) and each test gets a
fresh database in it. Without PostgreSQL binaries the postgres half is skipped with the reason,
unless ``MENTIS_REQUIRE_POSTGRES`` is set (CI), where it fails instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from mentis.config import Settings
from mentis.service.memory import Caller, Memory
from tests.backends import backend_settings


@pytest.fixture
def settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    return backend_settings(backend, tmp_path, request)


@pytest.fixture
def other_settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    """A second, empty store of the same backend (import and migrate targets)."""
    return backend_settings(backend, tmp_path / "other", request)


@pytest.fixture
def memory(open_memory: Callable[[], Memory]) -> Memory:
    return open_memory()


@pytest.fixture
def caller() -> Caller:
    return Caller(agent_id="conformance")


def run_sql(settings: Settings, sql: str) -> list[tuple[object, ...]]:
    """Run one SQL statement straight on a store's database, outside Mentis."""
    if settings.uses_postgres:
        import psycopg

        assert settings.database_url is not None
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            cur = conn.execute(sql)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []
    con = sqlite3.connect(settings.db_path, isolation_level=None)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@pytest.fixture
def raw_sql(settings: Settings) -> Callable[[str], list[tuple[object, ...]]]:
    """Run one SQL statement straight on the store's database, outside Mentis (to tamper)."""
    return lambda sql: run_sql(settings, sql)
