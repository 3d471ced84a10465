# ruff: noqa: F811  (fixtures imported from tests.security.stores are parameters here)
"""Issue 24, the tamper drill's derived-row gaps, on both stores.

- A derived index row (a vector, a lexical row, a stem) edited outside Mentis changed scores and
  which records made a ranked list, silently. Each now carries a checksum bound to its ledger row
  (``store/derived_check.py``), checked where it is loaded or used: the edit is refused, naming the
  table and the row, and ``mentis rebuild`` restores the answers.
- An edited relation edge showed an ``invalidated_by`` id no thought ever named. An edge is now
  checked against its thought's body whenever a read uses it (and a thought's own edges must be
  all there when it is traversed from): a forged, re-pointed or dropped edge is refused.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from mentis.api.attempts import RecordAttemptInput, SearchInput
from mentis.api.thoughts import (
    AppendThoughtInput,
    GetThoughtInput,
    Relation,
    SearchThoughtsInput,
    TraverseInput,
)
from mentis.config import Settings
from mentis.errors import IntegrityError
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from tests.security.stores import settings  # noqa: F401

REPO = "github.com/acme/shop"
AGENT = Caller(agent_id="derived-rows", admin=True)
"""An admin reads every partition, so an edited row is read wherever it was moved (a non-admin
reads only its own scope keys: a row moved out of them is no candidate of its search at all)."""


def _sql(settings: Settings, *statements: str) -> None:
    """Statements run straight on the store's database, outside Mentis."""
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


def _attempts(settings: Settings) -> list[str]:
    memory = Memory.open(settings, HashEmbedder())
    try:
        texts = ["rerun the flaky checkout test", "pin the cache client", "bump the deploy timeout"]
        return [
            memory.record_attempt(
                AGENT, RecordAttemptInput(repository=REPO, task_id=f"t{n}", action=text, observation=text)
            ).attempt_id
            for n, text in enumerate(texts)
        ]
    finally:
        memory.close()


SEARCHES = ["flaky checkout test", "deploy timeout", "cache client"]


def _searches(memory: Memory, queries: list[str] = SEARCHES) -> list[Any]:
    return [memory.search(AGENT, SearchInput(query=q, limit=10)).model_dump(mode="json") for q in queries]


def _rebuilt_answers(settings: Settings, queries: list[str] = SEARCHES) -> list[Any]:
    memory = Memory.open(settings, HashEmbedder(), check_derived=False)
    try:
        memory.rebuild()
        return _searches(memory, queries)
    finally:
        memory.close()


def _refused(settings: Settings, table: str, queries: list[str] = SEARCHES) -> None:
    """The searches refuse, naming ``table``."""
    memory = Memory.open(settings, HashEmbedder())
    try:
        with pytest.raises(IntegrityError, match=f"does not match its checksum \\({table}, row"):
            _searches(memory, queries)
    finally:
        memory.close()


@pytest.fixture
def expected(settings: Settings) -> list[Any]:
    _attempts(settings)
    memory = Memory.open(settings, HashEmbedder())
    try:
        return _searches(memory, [*SEARCHES, "zzzfoo checkout"])
    finally:
        memory.close()


def test_a_vector_copied_from_another_record_is_refused_and_rebuild_restores_the_ranking(
    settings: Settings, expected: list[Any]
) -> None:
    # the first attempt's vector becomes the last one's: a valid-looking row, wrong for its body
    _sql(
        settings,
        "UPDATE vectors SET vec = (SELECT vec FROM vectors ORDER BY rowid DESC LIMIT 1) "
        "WHERE rowid = (SELECT min(rowid) FROM vectors)",
    )
    _refused(settings, "vectors")
    assert _rebuilt_answers(settings, [*SEARCHES, "zzzfoo checkout"]) == expected


def test_a_vector_moved_to_another_repository_is_refused(settings: Settings, expected: list[Any]) -> None:
    _sql(
        settings,
        "UPDATE vectors SET repository = 'github.com/acme/other' "
        "WHERE rowid = (SELECT min(rowid) FROM vectors)",
    )
    _refused(settings, "vectors")


def test_an_edited_lexical_row_is_refused_and_rebuild_restores_the_ranking(
    settings: Settings, expected: list[Any]
) -> None:
    _sql(
        settings,
        "UPDATE attempt_terms SET len = len + 40 WHERE rowid = (SELECT min(rowid) FROM attempt_terms)",
    )
    _refused(settings, "attempt_terms")
    assert _rebuilt_answers(settings, [*SEARCHES, "zzzfoo checkout"]) == expected


def test_an_edited_stem_is_refused_when_a_query_uses_it(settings: Settings, expected: list[Any]) -> None:
    """The stem of "flaky" renamed: a query for the new text would have matched the flaky attempt."""
    _sql(settings, "UPDATE lex_vocab SET term = 'zzzfoo' WHERE term = 'flaki'")
    _refused(settings, "lex_vocab", ["zzzfoo checkout"])
    assert _rebuilt_answers(settings, [*SEARCHES, "zzzfoo checkout"]) == expected


# ---------------------------------------------------------------- relation edges


def _thoughts(settings: Settings) -> tuple[str, str, str]:
    """An old decision, a newer one that supersedes it, and an unrelated finding."""
    memory = Memory.open(settings, HashEmbedder())
    try:

        def append(content: str, **fields: Any) -> str:
            req = AppendThoughtInput(repository=REPO, type="Decision", content=content, **fields)
            return memory.append_thought(AGENT, req).thought_id

        old = append("use a pool of 10 connections")
        new = append("use a pool of 20 connections", relations=[Relation(kind="Supersedes", target_id=old)])
        other = append("the cache client needs a timeout")
        return old, new, other
    finally:
        memory.close()


def _reads(memory: Memory, ids: tuple[str, str, str]) -> list[Any]:
    out: list[Any] = []
    for tid in ids:
        out.append(memory.get_thought(AGENT, GetThoughtInput(thought_id=tid)).model_dump(mode="json"))
        out.append(memory.traverse_thoughts(AGENT, TraverseInput(thought_id=tid)).model_dump(mode="json"))
    found = memory.search_thoughts(AGENT, SearchThoughtsInput(query="pool connections", limit=10))
    out.append(found.model_dump(mode="json", exclude={"as_of"}))
    return out


@pytest.mark.parametrize(
    "edit",
    [
        "re-pointed",  # the drill's edit: every edge now names an id no thought has
        "forged",  # a Supersedes edge no body names: the finding would show invalidated_by
        "dropped",  # the decision's edge deleted: the old decision would show as current
    ],
)
def test_an_edited_relation_edge_is_refused_and_rebuild_restores_the_reads(
    settings: Settings, edit: str
) -> None:
    ids = _thoughts(settings)
    _, new, other = ids
    memory = Memory.open(settings, HashEmbedder())
    try:
        before = _reads(memory, ids)
        assert before[0]["invalidated_by"] == [new]
    finally:
        memory.close()
    statement = {
        "re-pointed": "UPDATE thought_edge SET to_id = 'gone-' || to_id",
        "forged": "INSERT INTO thought_edge(from_rowid, from_id, kind, to_id, valid_at, invalid_at, "
        f"created_at) SELECT from_rowid, from_id, 'Supersedes', '{other}', NULL, NULL, created_at "
        "FROM thought_edge",
        "dropped": "DELETE FROM thought_edge",
    }[edit]
    _sql(settings, statement)
    memory = Memory.open(settings, HashEmbedder())
    try:
        with pytest.raises(IntegrityError, match="derived index row"):
            _reads(memory, ids)
    finally:
        memory.close()
    memory = Memory.open(settings, HashEmbedder(), check_derived=False)
    try:
        memory.rebuild()
        assert _reads(memory, ids) == before
    finally:
        memory.close()
