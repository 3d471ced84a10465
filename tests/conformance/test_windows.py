"""The causal conversational windows (``window_terms``: a thought of a session with the thought
just before it) on both stores: rows only for consecutive thoughts of one session and repository,
the same BM25 as a reference index over the pairs, both turns of a hit ranked by
``search_thoughts``, forgets seen by other processes (of either turn), rebuild, and the upgrade of
a store written before the table existed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput, ForgetThoughtInput, SearchThoughtsInput
from mentis.config import Settings
from mentis.errors import IntegrityError
from mentis.index import lexical
from mentis.retrieval import query_terms
from mentis.service.memory import Caller, Memory
from mentis.store.postgres import schema as postgres_schema
from mentis.store.sqlite import store as sqlite

from .helpers import REPOS

TURNS = [
    # (key, repository, session, content)
    ("a1", REPOS[0], "s-1", "Mel: we adopted a kraken from the aquarium"),
    ("a2", REPOS[0], "s-1", "Jon: what colour is its shell"),
    ("a3", REPOS[0], "s-1", "Mel: bright orange with spots"),
    ("b1", REPOS[0], "s-2", "Mel: the orange paint dried overnight"),  # another session: no window
    ("x1", REPOS[1], "s-2", "Ann: orange kraken spotted"),  # another repository: no window
    ("c1", REPOS[0], None, "Jon: kraken shells are orange"),  # no session: no window
    ("c2", REPOS[0], None, "Jon: never mind"),
]


def _fill(memory: Memory, caller: Caller) -> dict[str, str]:
    ids = {}
    for key, repo, session, content in TURNS:
        req = {"repository": repo, "type": "Finding", "content": content}
        if session is not None:
            req["session_id"] = session
        ids[key] = memory.append_thought(
            caller, parse(AppendThoughtInput, req), link_duplicates=False
        ).thought_id
    return ids


def _keys(memory: Memory, ids: dict[str, str]) -> dict[int, str]:
    by_id = {v: k for k, v in ids.items()}
    return {r: by_id[t] for t, r in memory.store.thought_rowids(list(ids.values())).items()}


def _windows(
    memory: Memory, ids: dict[str, str], query: str, scope: list[str] | None
) -> list[tuple[str, float]]:
    """The window hits of ``query``, each named by its later turn."""
    keys = _keys(memory, ids)
    return [(keys[r], round(s, 9)) for r, s in memory.store.window_lexical(query_terms(query), scope, 10)]


def _reference(query: str) -> list[tuple[str, float]]:
    """BM25 of ``query`` over the two windows of REPOS[0] ("a1 a2", "a2 a3"), by an index built here."""
    text = {k: c for k, _, _, c in TURNS}
    pairs = {"a2": (text["a1"], text["a2"]), "a3": (text["a2"], text["a3"])}
    vocab: dict[str, int] = {}
    index = lexical.LexicalIndex()
    index.add(
        [
            lexical.document_row(i, REPOS[0], list(p), (1.0, 1.0), vocab)
            for i, p in enumerate(pairs.values(), 1)
        ]
    )
    stems = [vocab[t] for w in query_terms(query) for t in lexical.analyzer().terms(w) if t in vocab]
    names = list(pairs)
    return [(names[r - 1], round(s, 9)) for r, s in index.search(stems, None, 10)]


def test_windows_are_consecutive_turns_of_one_session_scored_as_bm25_over_the_pair(
    memory: Memory, caller: Caller
) -> None:
    ids = _fill(memory, caller)
    found = _windows(memory, ids, "kraken shell orange", [REPOS[0]])
    assert found == _reference("kraken shell orange")
    assert sorted(k for k, _ in found) == ["a2", "a3"]  # b1, c1, c2: no window; x1 out of scope
    assert sorted(k for k, _ in _windows(memory, ids, "kraken orange", None)) == ["a2", "a3"]


def test_search_thoughts_ranks_both_turns_of_a_window_that_answers_across_them(
    memory: Memory, caller: Caller
) -> None:
    ids = _fill(memory, caller)
    res = memory.search_thoughts(
        caller, parse(SearchThoughtsInput, {"query": "what colour is the kraken", "repository": REPOS[0]})
    )
    got = [t.thought.thought_id for t in res.thoughts]
    assert ids["a1"] in got and ids["a2"] in got
    assert got.index(ids["a2"]) < got.index(ids["c2"]) and got.index(ids["a1"]) < got.index(ids["c2"])


@pytest.mark.parametrize("forgotten", ["a1", "a2", "a3"])
def test_a_forgotten_turn_leaves_every_window_holding_it_in_every_process(
    memory: Memory,
    caller: Caller,
    open_memory: Callable[[], Memory],
    raw_sql: Callable[[str], list[tuple[object, ...]]],
    forgotten: str,
) -> None:
    ids = _fill(memory, caller)
    other = open_memory()
    assert sorted(k for k, _ in _windows(other, ids, "kraken orange shell", None)) == ["a2", "a3"]
    keys = _keys(memory, ids)
    memory.forget_thought(
        caller, parse(ForgetThoughtInput, {"repository": REPOS[0], "thought_id": ids[forgotten]})
    )
    # a1 is in a2's window; a2 in both; a3 in its own
    left = {"a1": ["a3"], "a2": [], "a3": ["a2"]}[forgotten]
    del ids[forgotten]
    assert sorted(k for k, _ in _windows(memory, ids, "kraken orange shell", None)) == left
    assert sorted(k for k, _ in _windows(other, ids, "kraken orange shell", None)) == left
    rows = {keys[int(r)] for (r,) in raw_sql("SELECT rowid FROM window_terms")}  # type: ignore[call-overload]
    assert rows == set(left)


def test_rebuild_gives_the_same_window_answers(memory: Memory, caller: Caller) -> None:
    ids = _fill(memory, caller)
    memory.forget_thought(
        caller, parse(ForgetThoughtInput, {"repository": REPOS[0], "thought_id": ids["a1"]})
    )
    del ids["a1"]
    before = _windows(memory, ids, "kraken orange shell colour", None)
    memory.rebuild()
    assert _windows(memory, ids, "kraken orange shell colour", None) == before
    assert [k for k, _ in before] == ["a3"]


def _make_old(settings: Settings, raw_sql: Callable[[str], object]) -> str:
    """The store as a Mentis from before the windows left it; returns that schema version."""
    old = "7" if settings.uses_postgres else "3"
    raw_sql("DROP TABLE window_terms")
    raw_sql(f"UPDATE meta SET value = '{old}' WHERE key = 'schema_version'")
    return old


def test_an_older_store_gets_its_windows_indexed_when_it_opens(
    memory: Memory,
    caller: Caller,
    settings: Settings,
    open_memory: Callable[[], Memory],
    raw_sql: Callable[[str], list[tuple[object, ...]]],
) -> None:
    ids = _fill(memory, caller)
    before = _windows(memory, ids, "kraken orange shell", None)
    memory.close()
    _make_old(settings, raw_sql)
    upgraded = open_memory()
    current = postgres_schema.SCHEMA_VERSION if settings.uses_postgres else sqlite.SCHEMA_VERSION
    assert upgraded.store.get_meta("schema_version") == str(current)
    assert _windows(upgraded, ids, "kraken orange shell", None) == before


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
    text = "convert_from(body, 'UTF8')" if settings.uses_postgres else "CAST(body AS TEXT)"
    edit = (
        "convert_to(replace(convert_from(body, 'UTF8'), 'spots', 'SPOTS'), 'UTF8')"
        if settings.uses_postgres
        else "CAST(replace(CAST(body AS TEXT), 'spots', 'SPOTS') AS BLOB)"
    )
    raw_sql(f"UPDATE bodies SET body = {edit} WHERE {text} LIKE '%spots%'")
    with pytest.raises(IntegrityError):
        open_memory()
    assert raw_sql("SELECT value FROM meta WHERE key = 'schema_version'") == [(old,)]
    tables = (
        "SELECT count(*) FROM pg_tables WHERE tablename = 'window_terms'"
        if settings.uses_postgres
        else "SELECT count(*) FROM sqlite_master WHERE name = 'window_terms'"
    )
    assert raw_sql(tables) == [(0,)]
