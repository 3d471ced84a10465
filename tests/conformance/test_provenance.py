"""Provenance (issue 27): a thought's ``source_episode`` and ``entity_type`` are inside its entry
hash, on both stores; the entity-type registry is a system chain; search, filters and ``recall``
take both; bad input names its field and writes nothing."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from mentis.api.common import SourceEpisode, parse
from mentis.api.entity_types import ListEntityTypesInput, UpsertEntityTypeInput
from mentis.api.review import AcceptProposalInput
from mentis.api.thoughts import AppendThoughtInput, GetThoughtInput, SearchThoughtsInput
from mentis.config import Settings
from mentis.errors import Forbidden, IntegrityError, InvalidInput
from mentis.ledger.links import ENTITY_TYPES_CHAIN, body_links
from mentis.providers.embed import HashEmbedder
from mentis.service.entity_types import BUILTIN
from mentis.service.memory import Caller, Memory
from mentis.service.migrate import migrate
from mentis.store.postgres import schema as postgres_schema
from mentis.store.sqlite import store as sqlite_store
from tests.conftest import REPO

from .helpers import ledger, sql

Raw = Callable[[str], list[tuple[object, ...]]]
EPISODE = {
    "transcript": "/home/u/.claude/projects/shop/s-42.jsonl",
    "session_id": "s-42",
    "from_line": 7,
    "to_line": 19,
}
WRITER = Caller(agent_id="writer")


def think(memory: Memory, caller: Caller, content: str, **fields: Any) -> Any:
    data = {"repository": REPO, "type": "Finding", "content": content, **fields}
    return memory.append_thought(caller, parse(AppendThoughtInput, data))


def upsert(memory: Memory, caller: Caller, name: str, description: str) -> Any:
    return memory.upsert_entity_type(
        caller, parse(UpsertEntityTypeInput, {"name": name, "description": description})
    )


def found(memory: Memory, caller: Caller, **fields: Any) -> list[str]:
    data = {"repository": REPO, **fields}
    return [
        s.thought.content for s in memory.search_thoughts(caller, parse(SearchThoughtsInput, data)).thoughts
    ]


def types(memory: Memory, caller: Caller) -> dict[str, Any]:
    listed = memory.list_entity_types(caller, ListEntityTypesInput()).entity_types
    return {t.name: t for t in listed}


def test_a_thought_keeps_its_entity_type_and_source_episode_and_reads_show_them(
    memory: Memory, caller: Caller
) -> None:
    written = think(
        memory, caller, "the cart service rounds each line", entity_type="service", source_episode=EPISODE
    )
    got = memory.get_thought(caller, GetThoughtInput(thought_id=written.thought_id))
    assert got.entity_type == "service"
    assert got.source_episode == EPISODE
    (stored,) = [b for e, b in memory.store.iter_ledger() if e.id == written.thought_id]
    assert stored is not None and b'"entity_type":"service"' in stored and b'"from_line":7' in stored


def test_a_thought_without_provenance_has_neither_field_in_its_body(memory: Memory, caller: Caller) -> None:
    written = think(memory, caller, "plain finding")
    (stored,) = [b for e, b in memory.store.iter_ledger() if e.id == written.thought_id]
    assert stored is not None and b"entity_type" not in stored and b"source_episode" not in stored
    got = memory.get_thought(caller, GetThoughtInput(thought_id=written.thought_id))
    assert (got.entity_type, got.source_episode) == (None, None)


def test_search_thoughts_filters_by_entity_type_and_source_session_with_and_without_a_query(
    memory: Memory, caller: Caller
) -> None:
    upsert(memory, caller, "queue", "a message queue")
    think(memory, caller, "cache misses spike after deploy", entity_type="service", source_episode=EPISODE)
    think(memory, caller, "cache keys include the locale", entity_type="file")
    think(memory, caller, "cache of the queue consumer is cold", entity_type="queue",
          source_episode={**EPISODE, "session_id": "s-43"})  # fmt: skip
    assert found(memory, caller, filters={"entity_types": ["service"]}) == ["cache misses spike after deploy"]
    assert sorted(found(memory, caller, query="cache", filters={"entity_types": ["file", "queue"]})) == [
        "cache keys include the locale",
        "cache of the queue consumer is cold",
    ]
    assert found(memory, caller, query="cache", filters={"source_session": "s-43"}) == [
        "cache of the queue consumer is cold"
    ]
    assert found(memory, caller, filters={"entity_types": ["person"]}) == []


def test_recall_reads_entity_type_and_source_from_the_thoughts_view(memory: Memory, caller: Caller) -> None:
    think(memory, caller, "the search API pages by offset", entity_type="api", source_episode=EPISODE)
    think(memory, caller, "no provenance here")
    out = sql(
        memory,
        caller,
        "select content, entity_type, source_session, source_episode from thoughts where entity_type = :t",
        t="api",
    )
    assert len(out.rows) == 1
    content, entity_type, session, episode = out.rows[0]
    assert (content, entity_type, session) == ("the search API pages by offset", "api", "s-42")
    assert '"from_line":7' in episode.replace(" ", "")


# ---------------------------------------------------------------- the registry


def test_the_builtin_types_are_listed_without_any_ledger_entry(memory: Memory, caller: Caller) -> None:
    listed = types(memory, caller)
    assert set(BUILTIN) <= set(listed) and all(listed[n].builtin for n in BUILTIN)
    assert ledger(memory) == []


def test_upsert_appends_one_entry_to_the_registry_chain_and_the_type_is_then_usable(
    memory: Memory, caller: Caller
) -> None:
    with pytest.raises(InvalidInput) as refused:
        think(memory, caller, "kafka lag grows at night", entity_type="queue")
    assert refused.value.field == "entity_type" and "upsert_entity_type" in refused.value.message
    result = upsert(memory, WRITER, "queue", "a message queue or topic")
    assert [(c, s) for c, s, _ in ledger(memory)] == [(ENTITY_TYPES_CHAIN, 0)]
    assert result.ledger.seq == 0 and result.entity_type.updated_by == "writer"
    assert types(memory, caller)["queue"].description == "a message queue or topic"
    think(memory, caller, "kafka lag grows at night", entity_type="queue")
    again = upsert(memory, WRITER, "queue", "a message queue or topic")  # same text: nothing new
    assert again.ledger == result.ledger and len(ledger(memory)) == 2


def test_only_an_admin_may_change_the_description_of_an_existing_type(memory: Memory) -> None:
    upsert(memory, WRITER, "queue", "a message queue")
    before = ledger(memory)
    for name in ("queue", "service"):  # registered, built in
        with pytest.raises(Forbidden, match="admin"):
            upsert(memory, WRITER, name, "something else")
    assert ledger(memory) == before
    admin = Caller(agent_id="root", admin=True)
    upsert(memory, admin, "service", "a deployed service")
    listed = types(memory, WRITER)
    assert (listed["service"].description, listed["service"].builtin, listed["service"].updated_by) == (
        "a deployed service",
        True,
        "root",
    )


def test_a_read_only_caller_may_list_but_not_upsert(memory: Memory) -> None:
    reader = Caller(agent_id="reader", can_write=False)
    with pytest.raises(Forbidden):
        upsert(memory, reader, "queue", "a message queue")
    assert "queue" not in types(memory, reader) and ledger(memory) == []


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": "Service", "description": "x"}, "name"),
        ({"name": "1st", "description": "x"}, "name"),
        ({"name": "a" * 65, "description": "x"}, "name"),
        ({"name": "has space", "description": "x"}, "name"),
        ({"name": "queue", "description": "   "}, "description"),
        ({"name": "queue"}, "description"),
        ({"name": "queue", "description": "x", "extra": 1}, "extra"),
    ],
)
def test_a_bad_upsert_names_its_field_and_writes_nothing(
    memory: Memory, caller: Caller, data: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        memory.upsert_entity_type(caller, parse(UpsertEntityTypeInput, data))
    assert refused.value.field == field
    assert ledger(memory) == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"entity_type": "Not A Name"}, "entity_type"),
        ({"entity_type": "unregistered"}, "entity_type"),
        ({"source_episode": {**EPISODE, "to_line": 3}}, "source_episode"),
        ({"source_episode": {**EPISODE, "from_line": 0}}, "source_episode.from_line"),
        (
            {"source_episode": {k: v for k, v in EPISODE.items() if k != "session_id"}},
            "source_episode.session_id",
        ),
        ({"source_episode": {**EPISODE, "turn": 3}}, "source_episode.turn"),
        ({"source_episode": "s-42"}, "source_episode"),
        ({"source_episode": {**EPISODE, "transcript": ""}}, "source_episode.transcript"),
    ],
)
def test_bad_provenance_on_a_thought_names_its_field_and_writes_nothing(
    memory: Memory, caller: Caller, fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        think(memory, caller, "a finding", **fields)
    assert refused.value.field == field
    assert ledger(memory) == []


# ---------------------------------------------------------------- inside the hash


def _replace_in_body(raw_sql: Raw, backend: str, where: str, old: str, new: str) -> None:
    if backend == "postgres":
        raw_sql(
            f"UPDATE bodies SET body = convert_to(replace(convert_from(body, 'UTF8'), '{old}', '{new}'), "
            f"'UTF8') WHERE {where}"
        )
    else:
        raw_sql(
            f"UPDATE bodies SET body = CAST(replace(CAST(body AS TEXT), '{old}', '{new}') AS BLOB) "
            f"WHERE {where}"
        )


@pytest.mark.parametrize(
    ("old", "new"), [('"entity_type":"service"', '"entity_type":"library"'), ('"to_line":19', '"to_line":91')]
)
def test_changing_a_stored_thoughts_provenance_makes_open_refuse(
    memory: Memory,
    caller: Caller,
    raw_sql: Raw,
    open_memory: Callable[[], Memory],
    backend: str,
    old: str,
    new: str,
) -> None:
    think(memory, caller, "the cart service rounds each line", entity_type="service", source_episode=EPISODE)
    memory.close()
    _replace_in_body(
        raw_sql, backend, f"rowid = (SELECT rowid FROM entries WHERE chain = '{REPO}' AND seq = 0)", old, new
    )
    with pytest.raises(IntegrityError) as refused:
        open_memory().search_thoughts(caller, parse(SearchThoughtsInput, {"repository": REPO}))
    assert (refused.value.chain, refused.value.seq) == (REPO, 0)


def test_changing_a_registry_entry_makes_open_refuse(
    memory: Memory, caller: Caller, raw_sql: Raw, open_memory: Callable[[], Memory], backend: str
) -> None:
    upsert(memory, caller, "queue", "a message queue")
    memory.close()
    where = f"rowid = (SELECT rowid FROM entries WHERE chain = '{ENTITY_TYPES_CHAIN}' AND seq = 0)"
    _replace_in_body(raw_sql, backend, where, "a message queue", "a message stream")
    with pytest.raises(IntegrityError, match=ENTITY_TYPES_CHAIN):
        open_memory()


# ---------------------------------------------------------------- rebuild, export, import, migrate


def _provenance_answers(memory: Memory, caller: Caller) -> list[object]:
    return [
        sorted((t.name, t.description) for t in types(memory, caller).values()),
        found(memory, caller, filters={"entity_types": ["queue"]}),
        found(memory, caller, query="lag", filters={"source_session": "s-42"}),
        sql(
            memory, caller, "select content, entity_type, source_session from thoughts order by content"
        ).rows,
    ]


def _fill(memory: Memory, caller: Caller) -> None:
    upsert(memory, caller, "queue", "a message queue")
    think(memory, caller, "consumer lag grows at night", entity_type="queue", source_episode=EPISODE)
    think(memory, caller, "lag alerts page the wrong team", entity_type="service")


def test_rebuild_keeps_the_registry_and_the_provenance_filters(memory: Memory, caller: Caller) -> None:
    _fill(memory, caller)
    before = _provenance_answers(memory, caller)
    assert before[1] == ["consumer lag grows at night"] and before[2] == ["consumer lag grows at night"]
    memory.rebuild()
    assert _provenance_answers(memory, caller) == before


def test_export_import_and_migrate_carry_the_registry_and_the_provenance(
    memory: Memory, caller: Caller, settings: Settings, other_settings: Settings, tmp_path: Path
) -> None:
    _fill(memory, caller)
    expected, hashes = _provenance_answers(memory, caller), ledger(memory)
    out = io.BytesIO()
    memory.export(caller, out, None)
    target = Memory.open(other_settings, HashEmbedder())
    try:
        admin = Caller(agent_id="root", admin=True)  # the registry's chain is a system chain
        assert target.import_(admin, out.getvalue().splitlines()) == len(hashes)
        assert (ledger(target), _provenance_answers(target, caller)) == (hashes, expected)
    finally:
        target.close()
    memory.close()
    there = Settings(home=tmp_path, db_path=tmp_path / "there.db", embedder="hash")  # type: ignore[call-arg]
    assert migrate(settings, there, HashEmbedder()) == len(hashes)
    moved = Memory.open(there, HashEmbedder())
    try:
        assert (ledger(moved), _provenance_answers(moved, caller)) == (hashes, expected)
    finally:
        moved.close()


def test_an_older_store_opens_with_an_empty_registry_and_the_new_recall_columns(
    memory: Memory,
    caller: Caller,
    settings: Settings,
    open_memory: Callable[[], Memory],
    raw_sql: Raw,
) -> None:
    """A store from before provenance (SQLite schema 10, PostgreSQL 14): no registry table, and on
    PostgreSQL a thoughts view without the new columns; opening it upgrades both."""
    think(memory, caller, "an old finding")
    memory.close()
    raw_sql("DROP TABLE entity_types")
    if settings.uses_postgres:
        raw_sql("DROP VIEW mentis_recall.thoughts")
    raw_sql(f"UPDATE meta SET value = '{14 if settings.uses_postgres else 10}' WHERE key = 'schema_version'")
    upgraded = open_memory()
    current = postgres_schema.SCHEMA_VERSION if settings.uses_postgres else sqlite_store.SCHEMA_VERSION
    assert upgraded.store.get_meta("schema_version") == str(current)
    rows = sql(upgraded, caller, "select content, entity_type, source_session from thoughts").rows
    assert rows == [["an old finding", None, None]]
    upsert(upgraded, caller, "queue", "a message queue")
    think(upgraded, caller, "a new finding", entity_type="queue")
    assert found(upgraded, caller, filters={"entity_types": ["queue"]}) == ["a new finding"]


def test_an_accepted_thought_proposal_carries_its_source_episode_into_the_thought(
    memory: Memory, caller: Caller
) -> None:
    draft = parse(AppendThoughtInput, {"repository": REPO, "type": "LLMExtracted", "content": "round once"})
    (queued,) = memory.propose(caller, [(draft, SourceEpisode(**EPISODE))]).queued
    done = memory.accept_proposal(caller, AcceptProposalInput(proposal_id=queued.proposal_id))
    got = memory.get_thought(caller, GetThoughtInput(thought_id=done.record_id))
    assert got.source_episode == EPISODE
    assert found(memory, caller, filters={"source_session": "s-42"}) == ["round once"]


# ---------------------------------------------------------------- the ledger's rule for the registry chain


@pytest.mark.parametrize(
    ("chain", "kind", "body", "why"),
    [
        (
            ENTITY_TYPES_CHAIN,
            "entity_type",
            {"name": "queue", "description": "q", "by": "a", "at": "t"},
            None,
        ),
        (REPO, "entity_type", {"name": "queue", "description": "q"}, "only entity types stand there"),
        (ENTITY_TYPES_CHAIN, "thought", {"repository": ENTITY_TYPES_CHAIN}, "only entity types stand there"),
        (ENTITY_TYPES_CHAIN, "entity_type", {"name": "Queue", "description": "q"}, "valid type name"),
        (ENTITY_TYPES_CHAIN, "entity_type", {"name": "queue", "description": 3}, "valid type name"),
    ],
)
def test_an_entity_type_entry_stands_only_in_its_system_chain_and_names_a_valid_type(
    chain: str, kind: str, body: dict[str, Any], why: str | None
) -> None:
    found = body_links(chain, kind, "id-1", orjson.dumps(body))
    if why is None:
        assert found == []
    else:
        assert isinstance(found, str) and why in found
