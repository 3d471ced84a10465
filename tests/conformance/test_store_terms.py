"""The store protocol speaks terms, not SQL: query words for lexical search and a ThoughtQuery
for filtering thoughts, answered alike by both backends."""

from __future__ import annotations

import pytest

from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput
from mentis.service.memory import Caller, Memory
from mentis.store.protocol import ThoughtQuery
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


def _attempt_rowid(
    memory: Memory, caller: Caller, repo: str, task: str, files: list[str], tags: list[str]
) -> int:
    out = record(memory, caller, repo, task_id=task, files=files, tags=tags)
    keys = memory.store.attempt_keys(list(range(1, 100)))  # a fresh store's first rowids
    return next(rowid for rowid, key in keys.items() if key[2] == out.attempt_id)


def test_attempt_edges_link_tasks_files_and_tags_per_seed_within_scope(
    memory: Memory, caller: Caller
) -> None:
    shop, billing = REPOS
    a1 = _attempt_rowid(memory, caller, shop, "T-1", ["src/a.py"], ["flaky"])
    a2 = _attempt_rowid(memory, caller, shop, "T-1", ["src/z.py"], [])
    a3 = _attempt_rowid(memory, caller, shop, "T-2", ["src/a.py"], [])
    a4 = _attempt_rowid(memory, caller, shop, "T-3", ["src/y.py"], ["flaky"])
    a5 = _attempt_rowid(memory, caller, billing, "T-9", ["src/a.py"], ["flaky"])
    a6 = _attempt_rowid(memory, caller, shop, "T-4", ["src/a.py"], ["flaky"])

    edges = memory.store.attempt_edges([a1, a4], [shop], 10)
    # per seed: its task's attempts first (1.0, rowid order), then label links best first
    assert edges == [
        (a1, a2, 1.0),
        (a1, a6, 0.75),
        (a1, a3, 0.5),
        (a1, a4, 0.25),
        (a4, a1, 0.25),
        (a4, a6, 0.25),
    ]
    everywhere = memory.store.attempt_edges([a1], None, 10)
    assert (a1, a5, 0.75) in everywhere and len(everywhere) == 5
    assert memory.store.attempt_edges([a1], [shop], 2) == [(a1, a2, 1.0), (a1, a6, 0.75), (a1, a3, 0.5)]
    assert memory.store.attempt_edges([], None, 10) == []


def test_thought_edges_follow_refs_both_ways_and_shared_labels(memory: Memory, caller: Caller) -> None:
    shop = REPOS[0]
    t1 = _thought(memory, caller, shop, "the payment queue needs a timeout", concepts=["queue"], tags=["ops"])
    t2 = _thought(memory, caller, shop, "checkout retries twice before failing", concepts=["queue"])
    t3 = _thought(memory, caller, shop, "deploys happen on tuesdays", tags=["ops"])
    loaded = memory.store.load_thoughts([t1])
    t1_id = loaded[t1].body.thought_id
    t4 = _thought(memory, caller, shop, "the worker pool was resized for load", refs=[t1_id])
    edges = memory.store.thought_edges_between([t1, t4], [shop], 10)
    assert edges == [(t1, t4, 1.0), (t1, t2, 0.5), (t1, t3, 0.25), (t4, t1, 1.0)]
