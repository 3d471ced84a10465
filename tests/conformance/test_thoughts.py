"""Typed thoughts: supersession, point-in-time reads, traversal, bundles, MEMORY.md, rejections."""

from __future__ import annotations

from typing import Any

import pytest

from mentis.api.attempts import MarkOutdatedInput, RecallInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.api.thoughts import (
    AppendThoughtInput,
    ContextBundleInput,
    ForgetThoughtInput,
    GetThoughtInput,
    MemoryMdExportInput,
    MemoryMdImportInput,
    RecentContextInput,
    SearchThoughtsInput,
    TraverseInput,
)
from mentis.errors import Conflict, InvalidInput, NotFound
from mentis.ledger.signing import now_iso
from mentis.service.memory import Caller, Memory
from tests.conftest import REPO


def think(memory: Memory, caller: Caller, content: str, **fields: Any) -> Any:
    data = {"repository": REPO, "type": "Decision", "content": content, **fields}
    return memory.append_thought(caller, parse(AppendThoughtInput, data))


def found(memory: Memory, caller: Caller, **fields: Any) -> list[str]:
    data = {"repository": REPO, **fields}
    return [
        s.thought.content for s in memory.search_thoughts(caller, parse(SearchThoughtsInput, data)).thoughts
    ]


def ledger(memory: Memory) -> list[str]:
    return [e.hash for e, _ in memory.store.iter_ledger()]


def test_a_superseded_thought_is_not_returned_by_default(memory: Memory, caller: Caller) -> None:
    old = think(memory, caller, "use sqlite for the cache")
    think(
        memory,
        caller,
        "use redis for the cache",
        relations=[{"kind": "Supersedes", "target_id": old.thought_id}],
    )
    assert found(memory, caller, query="cache store") == ["use redis for the cache"]


def test_include_invalidated_returns_the_superseded_thought_marked(memory: Memory, caller: Caller) -> None:
    old = think(memory, caller, "use sqlite for the cache")
    new = think(
        memory,
        caller,
        "use redis for the cache",
        relations=[{"kind": "Corrects", "target_id": old.thought_id}],
    )
    res = memory.search_thoughts(
        caller,
        parse(SearchThoughtsInput, {"repository": REPO, "query": "cache", "include_invalidated": True}),
    )
    by_content = {s.thought.content: s.thought for s in res.thoughts}
    assert by_content["use sqlite for the cache"].invalidated_by == [new.thought_id]
    assert by_content["use redis for the cache"].invalidated_by == []


def test_as_of_before_the_correction_returns_the_old_belief_and_after_it_does_not(
    memory: Memory, caller: Caller
) -> None:
    old = think(memory, caller, "the api limit is 100 requests per minute")
    between = now_iso()
    think(
        memory,
        caller,
        "the api limit is 500 requests per minute",
        relations=[{"kind": "Invalidates", "target_id": old.thought_id}],
    )
    after = now_iso()
    assert found(memory, caller, query="api limit", as_of=between) == [
        "the api limit is 100 requests per minute"
    ]
    assert found(memory, caller, query="api limit", as_of=after) == [
        "the api limit is 500 requests per minute"
    ]


def test_an_invalidation_counts_only_from_its_valid_at(memory: Memory, caller: Caller) -> None:
    old = think(memory, caller, "deploys run on fridays")
    think(
        memory,
        caller,
        "deploys never run on fridays",
        relations=[{"kind": "Supersedes", "target_id": old.thought_id, "valid_at": "2099-01-01T00:00:00Z"}],
    )
    assert "deploys run on fridays" in found(memory, caller, query="deploys fridays")
    later = found(memory, caller, query="deploys fridays", as_of="2099-06-01T00:00:00Z")
    assert later == ["deploys never run on fridays"]


def test_invalid_at_ends_the_invalidation(memory: Memory, caller: Caller) -> None:
    old = think(memory, caller, "the staging cluster is down")
    think(
        memory,
        caller,
        "the staging cluster is down for maintenance this week",
        relations=[
            {
                "kind": "Supersedes",
                "target_id": old.thought_id,
                "invalid_at": "2000-01-01T00:00:00Z",
                "valid_at": "1999-01-01T00:00:00Z",
            }
        ],
    )
    assert "the staging cluster is down" in found(memory, caller, query="staging cluster")


def test_filters_narrow_by_type_tag_importance_and_agent(memory: Memory, caller: Caller) -> None:
    think(memory, caller, "keep migrations reversible", type="Constraint", tags=["db"], importance=0.9)
    think(memory, caller, "migrations are slow on ci", type="Finding", tags=["ci"], importance=0.2)
    assert found(memory, caller, filters={"types": ["Constraint"]}) == ["keep migrations reversible"]
    assert found(memory, caller, filters={"tags": ["ci"]}) == ["migrations are slow on ci"]
    assert found(memory, caller, filters={"min_importance": 0.5}) == ["keep migrations reversible"]
    assert found(memory, caller, filters={"agents": ["someone-else"]}) == []
    assert found(memory, caller, filters={"text": "SLOW"}) == ["migrations are slow on ci"]


def test_a_near_duplicate_of_the_same_type_is_superseded_automatically(
    memory: Memory, caller: Caller
) -> None:
    first = think(memory, caller, "Use Redis for the session cache.")
    second = think(memory, caller, "use redis for the session cache")
    assert second.superseded == [first.thought_id]
    assert any("near-duplicate" in w for w in second.warnings)
    assert found(memory, caller, query="session cache") == ["use redis for the session cache"]
    other_type = think(memory, caller, "use redis for the session cache", type="Finding")
    assert other_type.superseded == []


def test_reasserting_a_rejected_thought_is_stored_with_a_warning(memory: Memory, caller: Caller) -> None:
    wrong = think(memory, caller, "the flaky test is caused by the connection pool", type="Hypothesis")
    think(
        memory,
        caller,
        "the flaky test is caused by timezone handling in fixtures",
        type="Finding",
        relations=[{"kind": "Invalidates", "target_id": wrong.thought_id}],
    )
    again = think(memory, caller, "The flaky test is caused by the connection pool!", type="Insight")
    assert [(r.rejected_id, r.match) for r in again.reasserts] == [(wrong.thought_id, "exact")]
    assert "timezone" in again.reasserts[0].reason
    assert any("re-asserts a conclusion rejected" in w for w in again.warnings)
    shown = memory.get_thought(caller, parse(GetThoughtInput, {"thought_id": again.thought_id}))
    assert shown.reasserts[0].rejected_id == wrong.thought_id


def test_an_attempt_reasserting_an_outdated_conclusion_is_stored_with_a_warning(
    memory: Memory, caller: Caller
) -> None:
    first = memory.record_attempt(
        caller,
        parse(
            RecordAttemptInput,
            {
                "repository": REPO,
                "task_id": "T",
                "action": "bumped pool size",
                "observation": "tests pass",
                "inference": "the pool size was the cause",
            },
        ),
    )
    memory.mark_conclusion_outdated(
        caller,
        parse(
            MarkOutdatedInput,
            {"repository": REPO, "attempt_id": first.attempt_id, "reason": "it failed again the next day"},
        ),
    )
    again = memory.record_attempt(
        caller,
        parse(
            RecordAttemptInput,
            {
                "repository": REPO,
                "task_id": "T2",
                "action": "bumped pool size again",
                "observation": "green",
                "inference": "The pool size was the cause.",
            },
        ),
    )
    assert [(r.rejected_id, r.rejected_kind, r.reason) for r in again.reasserts] == [
        (first.attempt_id, "attempt", "it failed again the next day")
    ]
    assert memory.recall(caller, parse(RecallInput, {"repository": REPO, "task_id": "T2"})).rows
    tasks = memory.search(caller, parse(SearchInput, {"query": "pool size again"})).tasks
    (task,) = [t for t in tasks if t.task_id == "T2"]
    assert task.attempt.reasserts[0].rejected_id == first.attempt_id


def test_traversal_follows_refs_and_relations_within_bounds(memory: Memory, caller: Caller) -> None:
    a = think(memory, caller, "root decision")
    b = think(memory, caller, "child finding", type="Finding", refs=[a.thought_id])
    c = think(
        memory,
        caller,
        "grandchild lesson",
        type="LessonLearned",
        relations=[{"kind": "DerivedFrom", "target_id": b.thought_id}],
    )
    one = memory.traverse_thoughts(caller, parse(TraverseInput, {"thought_id": a.thought_id, "depth": 1}))
    assert {n.thought_id for n in one.nodes} == {a.thought_id, b.thought_id}
    two = memory.traverse_thoughts(caller, parse(TraverseInput, {"thought_id": a.thought_id, "depth": 2}))
    assert {n.thought_id for n in two.nodes} == {a.thought_id, b.thought_id, c.thought_id}
    assert {(e.from_id, e.kind, e.to_id) for e in two.edges} == {
        (b.thought_id, "ref", a.thought_id),
        (c.thought_id, "DerivedFrom", b.thought_id),
    }
    capped = memory.traverse_thoughts(caller, parse(TraverseInput, {"thought_id": a.thought_id, "limit": 2}))
    assert (len(capped.nodes), capped.truncated) == (2, True)
    out_only = memory.traverse_thoughts(
        caller, parse(TraverseInput, {"thought_id": a.thought_id, "direction": "out"})
    )
    assert [n.thought_id for n in out_only.nodes] == [a.thought_id]


def test_context_bundle_groups_related_thoughts_under_each_seed(memory: Memory, caller: Caller) -> None:
    seed = think(memory, caller, "payment retries use exponential backoff")
    think(memory, caller, "backoff caps at 60 seconds", type="Constraint", refs=[seed.thought_id])
    res = memory.context_bundle(caller, parse(ContextBundleInput, {"query": "payment retries", "limit": 1}))
    (bundle,) = res.bundles
    assert bundle.seed.thought.thought_id == seed.thought_id
    assert [t.content for t in bundle.related] == ["backoff caps at 60 seconds"]


def test_recent_context_renders_a_catch_up_prompt_newest_first(memory: Memory, caller: Caller) -> None:
    for text in ("first step", "second step", "third step"):
        think(memory, caller, text, type="Checkpoint")
    res = memory.recent_context(caller, parse(RecentContextInput, {"repository": REPO, "limit": 2}))
    assert [t.content for t in res.thoughts] == ["third step", "second step"]
    assert res.prompt.splitlines()[1].startswith("- [Checkpoint] third step")


def test_memory_md_round_trips(memory: Memory, caller: Caller) -> None:
    think(
        memory, caller, "keep the api backwards compatible", type="Constraint", tags=["api"], importance=0.9
    )
    think(memory, caller, "line one\nline two with a \\ backslash", confidence=0.25, concepts=["style"])
    think(memory, caller, "retries fixed the flake", type="LessonLearned", task_id="T-9")
    exported = memory.export_memory_md(caller, parse(MemoryMdExportInput, {"repository": REPO}))
    assert exported.count == 3 and "## Constraint" in exported.markdown
    other = "github.com/acme/copy"
    memory.import_memory_md(
        caller, parse(MemoryMdImportInput, {"repository": other, "markdown": exported.markdown})
    )
    again = memory.export_memory_md(caller, parse(MemoryMdExportInput, {"repository": other}))
    assert again.markdown.split("\n", 1)[1] == exported.markdown.split("\n", 1)[1]


def test_get_thought_by_id_hash_and_seq_agree(memory: Memory, caller: Caller) -> None:
    t = think(memory, caller, "one thought")
    by_id = memory.get_thought(caller, parse(GetThoughtInput, {"thought_id": t.thought_id}))
    by_hash = memory.get_thought(caller, parse(GetThoughtInput, {"hash": t.ledger.hash}))
    by_seq = memory.get_thought(caller, parse(GetThoughtInput, {"repository": REPO, "seq": t.ledger.seq}))
    assert by_id == by_hash == by_seq
    with pytest.raises(NotFound):
        memory.get_thought(caller, parse(GetThoughtInput, {"thought_id": "nope"}))


def test_thoughts_and_relations_views_answer_recall_sql(memory: Memory, caller: Caller) -> None:
    a = think(memory, caller, "a", importance=0.75)
    think(memory, caller, "b", relations=[{"kind": "Supports", "target_id": a.thought_id}])
    rows = memory.recall(
        caller, parse(RecallInput, {"sql": "select content, importance from thoughts order by content"})
    )
    assert rows.rows == [["a", 0.75], ["b", 0.5]]
    rel = memory.recall(caller, parse(RecallInput, {"sql": "select kind, to_id from relations"}))
    assert rel.rows == [["Supports", a.thought_id]]


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "Opinion"},
        {"role": "Boss"},
        {"confidence": 1.5},
        {"importance": -0.1},
        {"confidence": "high"},
        {"refs": ["no-such-id"]},
        {"relations": [{"kind": "Supersedes", "target_id": "no-such-id"}]},
        {"relations": [{"kind": "Replaces", "target_id": "x"}]},
        {
            "thought_id": "0b4f2a3e-1111-4222-8333-444455556666",
            "relations": [{"kind": "Supports", "target_id": "0b4f2a3e-1111-4222-8333-444455556666"}],
        },
        {
            "relations": [
                {
                    "kind": "Supports",
                    "target_id": "x",
                    "valid_at": "2026-02-01T00:00:00Z",
                    "invalid_at": "2026-01-01T00:00:00Z",
                }
            ]
        },
        {"content": ""},
        {"colour": "red"},
    ],
    ids=[
        "type",
        "role",
        "confidence",
        "importance",
        "confidence-text",
        "ref",
        "relation-target",
        "relation-kind",
        "self-relation",
        "window",
        "empty",
        "unknown-field",
    ],
)
def test_bad_thoughts_are_rejected_with_nothing_written(
    memory: Memory, caller: Caller, fields: dict[str, Any]
) -> None:
    think(memory, caller, "existing")
    before = ledger(memory)
    with pytest.raises(InvalidInput):
        extra = dict(fields)
        think(memory, caller, extra.pop("content", "new"), **extra)
    assert ledger(memory) == before


def test_a_reused_thought_id_is_a_conflict(memory: Memory, caller: Caller) -> None:
    tid = "0b4f2a3e-1111-4222-8333-444455556666"
    think(memory, caller, "first", thought_id=tid)
    with pytest.raises(Conflict):
        think(memory, caller, "second", thought_id=tid)


def test_rebuild_keeps_thought_answers(memory: Memory, caller: Caller) -> None:
    old = think(memory, caller, "use sqlite", type="Decision")
    think(memory, caller, "use postgres", relations=[{"kind": "Invalidates", "target_id": old.thought_id}])
    before = found(memory, caller, query="database choice", include_invalidated=True)
    rejections = len(memory.store.rejections(REPO))
    memory.rebuild()
    assert found(memory, caller, query="database choice", include_invalidated=True) == before
    assert len(memory.store.rejections(REPO)) == rejections == 1


def test_a_turn_whose_session_neighbour_answers_the_rest_of_the_question_outranks_a_lone_match(
    memory: Memory, caller: Caller
) -> None:
    """search_thoughts scores a turn with the turns said just before and after it in its session;
    the same thoughts without sessions (another repository, same statistics) rank the lone match first."""
    turns = [
        ("the staging deploy reads its credentials from a file", "s1"),
        ("that file is kept in the vault under infra", "s1"),
        ("credentials for staging deploy expire every month", "s2"),
        ("lunch is at noon on fridays", "s2"),
    ]
    for content, session in turns:
        think(memory, caller, content, session_id=session)
    for content, _ in turns:
        think(memory, caller, content, repository="github.com/acme/no-sessions")
    question = "staging deploy credentials: where are they kept"
    assert found(memory, caller, query=question, limit=1) == [turns[0][0]]
    alone = found(memory, caller, query=question, limit=1, repository="github.com/acme/no-sessions")
    assert alone == [turns[2][0]]


def test_session_neighbours_are_adjacent_thoughts_of_the_same_repository_and_session(
    memory: Memory, caller: Caller
) -> None:
    other = "github.com/acme/x"
    contents = [
        (REPO, "s1", "first turn of one"),
        (REPO, "s1", "second turn of one"),
        (REPO, "s2", "a turn of another session"),
        (REPO, "s1", "third turn of one, after the other session"),
        (other, "s1", "same session name in another repository"),
    ]
    ids = [think(memory, caller, c, session_id=s, repository=repo).thought_id for repo, s, c in contents]
    rows = memory.store.thought_rowids(ids)
    r = [rows[i] for i in ids]
    assert r == sorted(r)
    neighbours = memory.thoughts.session_neighbours
    assert neighbours(r, None) == {r[0]: [r[1]], r[1]: [r[0]]}
    assert neighbours(r, [REPO]) == {r[0]: [r[1]], r[1]: [r[0]]}
    # a thought written later is found (rows that were no thought yet are not remembered as such)
    later = think(memory, caller, "the next turn there", session_id="s1", repository=other).thought_id
    assert neighbours([r[4]], None) == {r[4]: [memory.store.thought_rowids([later])[later]]}
    # a forgotten thought is nobody's neighbour any more, though its session was seen before
    memory.forget_thought(caller, parse(ForgetThoughtInput, {"repository": REPO, "thought_id": ids[1]}))
    assert neighbours(r[:4], None) == {}
