"""Rebuild, export/import and migration on both stores: same answers, same hashes."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable

import pytest

from mentis.config import Settings
from mentis.embed import HashEmbedder
from mentis.errors import Conflict
from mentis.memory import Caller, Memory
from mentis.migrate import migrate

from .helpers import fill, ledger, search, sql

QUERIES = ("cache stampede under load", "navbar overflows", "payment queue timed out")


def answers(memory: Memory, caller: Caller) -> list[object]:
    out: list[object] = [search(memory, caller, q) for q in QUERIES]
    out.append(
        sql(memory, caller, "select attempt_id, task_id, outdated from attempts order by attempt_id").rows
    )
    out.append(sql(memory, caller, "select * from tasks order by repository, task_id").rows)
    return out


def test_rebuild_gives_the_same_answers(memory: Memory, caller: Caller) -> None:
    fill(memory, caller)
    before, hashes = answers(memory, caller), ledger(memory)
    assert memory.rebuild() == len(hashes)
    assert answers(memory, caller) == before
    assert ledger(memory) == hashes


def test_export_then_import_into_a_fresh_store_keeps_hashes_and_answers(
    memory: Memory, caller: Caller, other_settings: Settings
) -> None:
    fill(memory, caller)
    out = io.BytesIO()
    memory.export(caller, out)
    target = Memory.open(other_settings, HashEmbedder())
    try:
        target.import_(caller, out.getvalue().splitlines())
        assert ledger(target) == ledger(memory)
        assert answers(target, caller) == answers(memory, caller)
        with pytest.raises(Conflict):
            target.import_(caller, out.getvalue().splitlines())
    finally:
        target.close()


@pytest.fixture
def postgres_settings(request: pytest.FixtureRequest, tmp_path: object) -> Callable[[], Settings]:
    def make() -> Settings:
        cluster = request.getfixturevalue("pg_cluster")
        return Settings(
            home=tmp_path,
            db_path=tmp_path / "unused.db",
            embedder="hash",
            database_url=cluster.new_database(),
        )  # type: ignore[operator]

    return make


def test_migrating_to_the_other_backend_and_back_keeps_every_hash_and_answer(
    memory: Memory,
    caller: Caller,
    settings: Settings,
    postgres_settings: Callable[[], Settings],
    tmp_path: object,
) -> None:
    fill(memory, caller)
    expected, hashes = answers(memory, caller), ledger(memory)
    memory.close()
    if settings.uses_postgres:
        there = Settings(home=tmp_path, db_path=tmp_path / "there.db", embedder="hash")  # type: ignore[operator]
        back = postgres_settings()
    else:
        there = postgres_settings()
        back = Settings(home=tmp_path, db_path=tmp_path / "back.db", embedder="hash")  # type: ignore[operator]
    assert migrate(settings, there, HashEmbedder()) == len(hashes)
    assert migrate(there, back, HashEmbedder()) == len(hashes)
    for s in (there, back):
        m = Memory.open(s, HashEmbedder())
        try:
            assert (ledger(m), answers(m, caller)) == (hashes, expected)
        finally:
            m.close()
    with pytest.raises(Conflict):
        migrate(settings, back, HashEmbedder())


def test_the_migrate_command_copies_a_store_and_reports_it(
    memory: Memory,
    caller: Caller,
    settings: Settings,
    postgres_settings: Callable[[], Settings],
    tmp_path: object,
) -> None:
    fill(memory, caller)
    hashes = ledger(memory)
    memory.close()
    spec = settings.database_url or f"sqlite:{settings.db_path}"
    target = (
        Settings(home=tmp_path, db_path=tmp_path / "cli.db", embedder="hash")
        if settings.uses_postgres
        else postgres_settings()
    )  # type: ignore[operator]
    to = target.database_url or f"sqlite:{target.db_path}"
    done = subprocess.run(
        [sys.executable, "-m", "mentis", "migrate", "--from", spec, "--to", to],
        capture_output=True,
        text=True,
        timeout=120,
        env={"MENTIS_EMBEDDER": "hash", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"migrated {len(hashes)} ledger entries" in done.stderr
    m = Memory.open(target, HashEmbedder())
    try:
        assert ledger(m) == hashes
    finally:
        m.close()
