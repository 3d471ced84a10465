# ruff: noqa: F811  (fixtures imported from tests.security.stores are parameters here)
"""Issue 24, the tamper drill's schema gap: a schema edit that still parses changed what the SQL
means without failing it (``rowid IXTEGER PRIMARY KEY`` is no longer the rowid, so a derived
table read back empty columns and reads failed with a raw KeyError). Open now compares every
table, index, view and trigger with the schema it expects and refuses a difference with a
StoreError naming the object, what was found, what was expected and how to recover; the
recovery it names works. Both stores.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mentis.api.attempts import MarkOutdatedInput, RecallInput, RecordAttemptInput, SearchInput
from mentis.cli import app
from mentis.config import Settings
from mentis.errors import StoreError
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.service.migrate import migrate
from tests.backends import backend_settings
from tests.security.stores import settings  # noqa: F401

REPO = "github.com/acme/shop"
AGENT = Caller(agent_id="schema-test")


def _fill(settings: Settings) -> list[Any]:
    """A few attempts, one of them corrected; returns what the reads answer."""
    memory = Memory.open(settings, HashEmbedder())
    try:
        ids = []
        for n in range(4):
            req = RecordAttemptInput(
                repository=REPO,
                task_id=f"t{n % 2}",
                action=f"retry the flaky test {n}",
                observation=f"seen {n}",
            )
            ids.append(memory.record_attempt(AGENT, req).attempt_id)
        memory.mark_conclusion_outdated(
            AGENT, MarkOutdatedInput(repository=REPO, attempt_id=ids[0], reason="stale")
        )
        return _answers(memory)
    finally:
        memory.close()


def _answers(memory: Memory) -> list[Any]:
    search = memory.search(AGENT, SearchInput(query="flaky test", limit=10)).model_dump(mode="json")
    recall = memory.recall(AGENT, RecallInput(sql="SELECT attempt_id, outdated FROM attempts ORDER BY 1"))
    return [search, recall.model_dump(mode="json")]


def _sql(settings: Settings, *statements: str) -> None:
    """Run statements straight on the store's database, outside Mentis."""
    if settings.uses_postgres:
        import psycopg

        assert settings.database_url is not None
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
        return
    con = sqlite3.connect(settings.db_path, isolation_level=None)
    try:
        for statement in statements:
            con.execute(statement)
    finally:
        con.close()


def _edit_a_derived_column(settings: Settings) -> None:
    if settings.uses_postgres:
        _sql(settings, "ALTER TABLE thought_idx ALTER COLUMN importance TYPE real")  # was double precision
        return
    _sql(
        settings,
        "PRAGMA writable_schema=ON",
        "UPDATE sqlite_master SET sql = replace(sql, 'rowid INTEGER PRIMARY KEY', "
        "'rowid IXTEGER PRIMARY KEY') WHERE name = 'correction_idx'",
    )


def test_a_derived_column_whose_type_was_edited_refuses_open_naming_it_and_the_named_fix_recovers(
    settings: Settings, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    expected = _fill(settings)
    _edit_a_derived_column(settings)
    table = "thought_idx" if settings.uses_postgres else "correction_idx"
    with pytest.raises(StoreError, match=table) as refused:
        Memory.open(settings, HashEmbedder())
    message = str(refused.value)
    assert "schema" in message and "derived tables" in message
    if settings.uses_postgres:
        assert "importance real NOT NULL" in message and "importance double precision NOT NULL" in message
        assert "mentis migrate" in message
        fresh = backend_settings("postgres", tmp_path / "fresh", request)
        migrate(settings, fresh, HashEmbedder())
        settings = fresh
    else:
        assert "IXTEGER" in message and "rowid INTEGER PRIMARY KEY" in message
        assert "mentis rebuild" in message
        memory = Memory.open(settings, HashEmbedder(), check_derived=False)
        try:
            memory.rebuild()
        finally:
            memory.close()
    memory = Memory.open(settings, HashEmbedder())
    try:
        assert _answers(memory) == expected
    finally:
        memory.close()


def test_mentis_rebuild_recovers_a_file_whose_derived_schema_was_edited(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, db_path=tmp_path / "mentis.db", embedder="hash")
    expected = _fill(settings)
    _edit_a_derived_column(settings)
    env = dict(os.environ, MENTIS_DB=str(settings.db_path), MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="cli")
    refused = CliRunner().invoke(app, ["verify-integrity"], env=env)
    assert refused.exit_code == StoreError.exit_code and "mentis rebuild" in refused.output
    rebuilt = CliRunner().invoke(app, ["rebuild"], env=env)
    assert rebuilt.exit_code == 0, rebuilt.output
    memory = Memory.open(settings, HashEmbedder())
    try:
        assert _answers(memory) == expected
    finally:
        memory.close()


def test_a_trigger_added_to_the_ledger_refuses_open_naming_it(settings: Settings) -> None:
    _fill(settings)
    if settings.uses_postgres:
        _sql(
            settings,
            "CREATE FUNCTION sneak() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
            "CREATE TRIGGER sneak BEFORE INSERT ON bodies FOR EACH ROW EXECUTE FUNCTION sneak()",
        )
    else:
        _sql(settings, "CREATE TRIGGER sneak BEFORE INSERT ON bodies BEGIN SELECT 1; END")
    with pytest.raises(StoreError, match="sneak") as refused:
        Memory.open(settings, HashEmbedder())
    assert "not Mentis's" in str(refused.value) and "restore the store from a backup" in str(refused.value)
    with pytest.raises(StoreError, match="sneak"):
        Memory.open(settings, HashEmbedder(), check_derived=False)  # a rebuild would not remove it


def test_an_index_redefined_on_a_derived_table_refuses_open(settings: Settings) -> None:
    _fill(settings)
    _sql(settings, "DROP INDEX attempt_task", "CREATE INDEX attempt_task ON attempt_idx(task_id)")
    with pytest.raises(StoreError, match="attempt_task"):
        Memory.open(settings, HashEmbedder())


def test_an_untouched_store_opens_again_and_again_with_its_schema_unchanged(settings: Settings) -> None:
    expected = _fill(settings)
    for _ in range(2):
        memory = Memory.open(settings, HashEmbedder())
        try:
            assert _answers(memory) == expected
        finally:
            memory.close()


def test_a_store_reindexed_with_a_model_of_another_size_opens_with_its_new_schema(settings: Settings) -> None:
    """Reindexing with a model of another size changes the vector columns' type (PostgreSQL):
    the recorded schema follows, so the store opens afterwards."""
    _fill(settings)
    wider = HashEmbedder(dim=2 * HashEmbedder().dim)
    memory = Memory.open(settings, wider, check_model=False, check_derived=False)
    try:
        memory.reindex()
    finally:
        memory.close()
    Memory.open(settings, wider).close()
