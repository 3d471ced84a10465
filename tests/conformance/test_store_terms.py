"""The store protocol speaks terms, not SQL: query words for lexical search and a ThoughtQuery
for filtering thoughts, answered alike by both backends."""

from __future__ import annotations

import pytest

from mentis.memory import Caller, Memory
from mentis.model import AppendThoughtInput, parse
from mentis.store.base import ThoughtQuery
from tests.conformance.helpers import REPOS, record


def _thought(memory: Memory, caller: Caller, repo: str, content: str, **fields: object) -> int:
    out = memory.append_thought(
        caller,
        parse(AppendThoughtInput, {"repository": repo, "type": "Finding", "content": content, **fields}),
    )
    return memory.store.thought_rowids([out.thought_id])[out.thought_id]


def test_a_store_read_refuses_one_string_where_a_list_belongs(memory: Memory, caller: Caller) -> None:
    record(memory, caller)
    with pytest.raises(TypeError, match="query terms must be a list"):
        memory.store.lexical("checkout", None, 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="repositories must be a list"):
        memory.store.attempt_edges([1], REPOS[0], 10)  # type: ignore[arg-type]
    assert memory.store.lexical(["checkout", "checkout"], [REPOS[0]], 10) != []


def test_thought_query_conditions_all_hold_and_an_empty_scope_sees_nothing(
    memory: Memory, caller: Caller
) -> None:
    cached = _thought(memory, caller, REPOS[0], "the cache warms slowly", tags=["perf"], importance=0.9)
    _thought(memory, caller, REPOS[0], "the navbar overflows", tags=["css"], importance=0.9)
    elsewhere = _thought(memory, caller, REPOS[1], "the cache is cold", tags=["perf"], importance=0.2)

    store = memory.store
    assert store.filter_thoughts(None, ThoughtQuery(tags=("perf",)), 10) == [elsewhere, cached]
    assert store.filter_thoughts(None, ThoughtQuery(tags=("perf",), min_importance=0.5), 10) == [cached]
    assert store.filter_thoughts(None, ThoughtQuery(repositories=(REPOS[1],)), 10) == [elsewhere]
    assert store.filter_thoughts(None, ThoughtQuery(repositories=()), 10) == []
    assert store.filter_thoughts([cached, elsewhere], ThoughtQuery(types=("Finding",)), 10) == [
        cached,
        elsewhere,
    ]
    assert store.filter_thoughts([], ThoughtQuery(), 10) == []
