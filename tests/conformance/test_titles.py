"""The title index (``title_terms``: each attempt's task title alone) on both stores: the same
BM25 as a reference index over the titles, only titled attempts, the caller's scope, forgets seen
by other processes, rebuild, and the upgrade of a store written before the table existed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mentis.api.attempts import ForgetInput, SearchInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import IntegrityError
from mentis.index import lexical
from mentis.retrieval import query_terms
from mentis.service.memory import Caller, Memory
from mentis.store.postgres import schema as postgres_schema
from mentis.store.sqlite import store as sqlite

from .helpers import REPOS, record

TITLES = {
    "T-1": "kraken tentacle jams the checkout",
    "T-2": "checkout button misaligned",
    "T-3": "kraken logo too large",
}


def _fill(memory: Memory, caller: Caller) -> dict[str, str]:
    """Three titled tasks and one untitled attempt whose text holds the title words."""
    ids = {
        task: record(memory, caller, task_id=task, task_title=title).attempt_id
        for task, title in TITLES.items()
    }
    ids["T-4"] = record(
        memory, caller, task_id="T-4", task_title=None, action="kraken kraken checkout", observation="kraken"
    ).attempt_id
    record(memory, caller, REPOS[1], task_id="T-9", task_title="kraken kraken kraken")
    return ids


def _titles(memory: Memory, query: str, repositories: list[str] | None) -> list[tuple[str, float]]:
    hits = memory.store.title_lexical(query_terms(query), repositories, 10)
    keys = memory.store.attempt_keys([r for r, _ in hits])
    return [(keys[r][1], round(score, 9)) for r, score in hits]


def _reference(query: str) -> list[tuple[str, float]]:
    """BM25 of ``query`` over the three titles of REPOS[0] alone, by an index built here."""
    vocab: dict[str, int] = {}
    index = lexical.LexicalIndex()
    rows = [lexical.document_row(i, REPOS[0], [t], (1.0,), vocab) for i, t in enumerate(TITLES.values(), 1)]
    index.add(rows)
    stems = [vocab[t] for w in query_terms(query) for t in lexical.analyzer().terms(w) if t in vocab]
    names = list(TITLES)
    return [(names[r - 1], round(s, 9)) for r, s in index.search(stems, None, 10)]


def test_title_scores_are_bm25_over_the_titles_alone_within_the_scope(memory: Memory, caller: Caller) -> None:
    _fill(memory, caller)
    found = _titles(memory, "kraken checkout", [REPOS[0]])
    assert found == _reference("kraken checkout")
    assert [task for task, _ in found] == ["T-1", "T-2", "T-3"]  # T-4 has no title: no row
    assert [task for task, _ in _titles(memory, "kraken", None)] == ["T-9", "T-3", "T-1"]


def test_search_fuses_the_title_hits_of_the_querys_first_line(memory: Memory, caller: Caller) -> None:
    _fill(memory, caller)
    res = memory.search(
        caller,
        parse(SearchInput, {"query": "kraken logo\nit covers the whole header", "repository": REPOS[0]}),
    )
    parts = {t.task_id: t.score_parts for t in res.tasks}
    assert parts["T-3"].title_rank == 1 and parts["T-3"].title is not None
    assert parts["T-4"].title is None and parts["T-4"].title_rank is None
    assert res.tasks[0].task_id == "T-3"


def test_a_forgotten_attempts_title_leaves_every_process(
    memory: Memory, caller: Caller, open_memory: Callable[[], Memory]
) -> None:
    ids = _fill(memory, caller)
    other = open_memory()
    assert [t for t, _ in _titles(other, "kraken", [REPOS[0]])] == ["T-3", "T-1"]
    memory.forget_attempt(caller, parse(ForgetInput, {"repository": REPOS[0], "attempt_id": ids["T-1"]}))
    assert [t for t, _ in _titles(memory, "kraken", [REPOS[0]])] == ["T-3"]
    assert [t for t, _ in _titles(other, "kraken", [REPOS[0]])] == ["T-3"]


def test_rebuild_gives_the_same_title_answers(memory: Memory, caller: Caller) -> None:
    _fill(memory, caller)
    before = _titles(memory, "kraken checkout button", None)
    memory.rebuild()
    assert _titles(memory, "kraken checkout button", None) == before


def _make_old(settings: Settings, raw_sql: Callable[[str], object]) -> str:
    """The store as a Mentis from before the title index left it; returns that schema version."""
    old = "5" if settings.uses_postgres else "2"
    raw_sql("DROP TABLE title_terms")
    raw_sql(f"UPDATE meta SET value = '{old}' WHERE key = 'schema_version'")
    return old


def test_an_older_store_gets_its_titles_indexed_when_it_opens(
    memory: Memory,
    caller: Caller,
    settings: Settings,
    open_memory: Callable[[], Memory],
    raw_sql: Callable[[str], list[tuple[object, ...]]],
) -> None:
    _fill(memory, caller)
    before = _titles(memory, "kraken checkout", None)
    memory.close()
    _make_old(settings, raw_sql)
    upgraded = open_memory()
    current = postgres_schema.SCHEMA_VERSION if settings.uses_postgres else sqlite.SCHEMA_VERSION
    assert upgraded.store.get_meta("schema_version") == str(current)
    assert _titles(upgraded, "kraken checkout", None) == before


def test_an_upgrade_refuses_a_body_that_no_longer_matches_its_hash_and_writes_nothing(
    memory: Memory,
    caller: Caller,
    settings: Settings,
    open_memory: Callable[[], Memory],
    raw_sql: Callable[[str], list[tuple[object, ...]]],
) -> None:
    _fill(memory, caller)
    memory.close()
    old = _make_old(settings, raw_sql)
    edit = (
        "convert_to(replace(convert_from(body, 'UTF8'), 'logo', 'LOGO'), 'UTF8')"
        if settings.uses_postgres
        else "CAST(replace(CAST(body AS TEXT), 'logo', 'LOGO') AS BLOB)"
    )
    raw_sql(
        f"UPDATE bodies SET body = {edit} WHERE CAST(body AS TEXT) LIKE '%logo%'".replace(
            "CAST(body AS TEXT)",
            "convert_from(body, 'UTF8')" if settings.uses_postgres else "CAST(body AS TEXT)",
        )
    )
    with pytest.raises(IntegrityError):
        open_memory()
    assert raw_sql("SELECT value FROM meta WHERE key = 'schema_version'") == [(old,)]
    tables = (
        "SELECT count(*) FROM pg_tables WHERE tablename = 'title_terms'"
        if settings.uses_postgres
        else "SELECT count(*) FROM sqlite_master WHERE name = 'title_terms'"
    )
    assert raw_sql(tables) == [(0,)]
