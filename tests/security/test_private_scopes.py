"""Private scopes, enforced (issue 26): another agent's private records change no answer and no score.

A reader (agent ``reader`` in session ``s1``, no admin) asks two stores of one backend the same
questions: one holding the repository's records and the reader's own private ones, and one that
also holds another agent's agent- and session-private records, and the reader's own records of
another session, on the same tasks, files, tags and concepts, full of the words the reader probes
for. Every answer and every score part must be identical: search, search_thoughts, recall (a
task's history and the SQL views), stats, context bundles and recent context.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import MarkOutdatedInput, RecallInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.api.scopes import PublishInput
from mentis.api.stats import StatsInput
from mentis.api.thoughts import (
    AppendThoughtInput,
    ContextBundleInput,
    GetThoughtInput,
    RecentContextInput,
    SearchThoughtsInput,
    TraverseInput,
)
from mentis.config import Settings
from mentis.errors import InvalidInput, NotFound
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory

REPO = "team/app"
WRITER = Caller(agent_id="writer")
READER = Caller(agent_id="reader", session_id="s1")
READER_LATER = Caller(agent_id="reader", session_id="s2")
OTHER = Caller(agent_id="other", session_id="o1")
ADMIN = Caller(agent_id="operator", admin=True)
QUERIES = (
    "hunter2",
    "checkout times out waiting for the payment queue",
    "cache stampede under load in src/app.py",
    "flaky",
)


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Memory, Memory]]:
    """(alone, crowded): two stores of one backend."""
    opened = []
    for name in ("alone", "crowded"):
        base = Settings(home=tmp_path / name, db_path=tmp_path / name / "mentis.db", embedder="hash")
        if request.param == "postgres":
            base = dataclasses.replace(
                base, database_url=request.getfixturevalue("pg_cluster").new_database()
            )
        opened.append(Memory.open(base, HashEmbedder()))
    yield opened[0], opened[1]
    for m in opened:
        m.close()


def _attempt(memory: Memory, caller: Caller, i: int, **fields: Any) -> str:
    data = {
        "repository": REPO,
        "task_id": f"T-{i % 4}",
        "task_title": f"payment checkout {i % 4}",
        "action": f"step {i}: retried the payment fixture",
        "observation": f"checkout test {i} timed out waiting for the payment queue",
        "files": ["src/app.py", f"src/mod{i % 3}.py"],
        "tags": ["flaky"],
        **fields,
    }
    return memory.record_attempt(caller, parse(RecordAttemptInput, data)).attempt_id


def _thought(memory: Memory, caller: Caller, i: int, content: str, **fields: Any) -> str:
    data = {
        "repository": REPO,
        "type": "Finding",
        "content": content,
        "concepts": ["cache", f"c{i % 3}"],
        "tags": ["flaky"],
        "session_id": caller.session_id,
        **fields,
    }
    return memory.append_thought(caller, parse(AppendThoughtInput, data)).thought_id


def _readable(memory: Memory, i: int) -> None:
    """What the reader may read: the repository's records and its own private ones of session s1."""
    _attempt(memory, WRITER, i)
    _thought(memory, WRITER, i, f"cache stampede {i} under load")
    if i % 3 == 0:
        _attempt(memory, READER, i, visibility="agent", observation=f"my own note {i} on the queue")
        _thought(memory, READER, i, f"my session note {i}: cache in src/app.py", visibility="session")


def _hidden(memory: Memory, i: int) -> None:
    """What the reader may not read, on its tasks, files, tags and concepts, with its probe words."""
    for caller, visibility in ((OTHER, "agent"), (OTHER, "session"), (READER_LATER, "session")):
        _attempt(
            memory,
            caller,
            i,
            visibility=visibility,
            task_title=f"hunter2 secret title {i}",
            observation=f"hunter2 is the password {i}; checkout payment queue times out",
        )
        _thought(
            memory,
            caller,
            i,
            f"hunter2 cache stampede {i} under load in src/app.py",
            visibility=visibility,
            relations=[],
        )


def _fill(alone: Memory, crowded: Memory) -> None:
    for i in range(9):
        _readable(alone, i)
    for i in range(9):  # the hidden records come before, between and after, so rowids interleave
        _hidden(crowded, i)
        _readable(crowded, i)
    _hidden(crowded, 99)


def _answers(memory: Memory, reader: Caller) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for query in QUERIES:
        for repository in (None, REPO):
            found = memory.search(reader, parse(SearchInput, {"query": query, "repository": repository}))
            out[f"search {query} {repository}"] = [
                (
                    t.task_id,
                    t.title,
                    t.score,
                    t.score_parts.model_dump(),
                    t.attempt.observation,
                    t.attempt_count,
                    len(t.matched_attempt_ids),
                )
                for t in found.tasks
            ]
            thoughts = memory.search_thoughts(
                reader, parse(SearchThoughtsInput, {"query": query, "repository": repository, "limit": 30})
            )
            out[f"thoughts {query} {repository}"] = [
                (t.thought.content, t.score, t.score_parts.model_dump() if t.score_parts else None)
                for t in thoughts.thoughts
            ]
        bundle = memory.context_bundle(
            reader, parse(ContextBundleInput, {"query": query, "repository": REPO})
        )
        out[f"bundle {query}"] = [
            (b.seed.thought.content, b.seed.score, [r.content for r in b.related]) for b in bundle.bundles
        ]
    for task in range(4):
        history = memory.recall(reader, parse(RecallInput, {"repository": REPO, "task_id": f"T-{task}"}))
        out[f"history {task}"] = [row[3:8] for row in history.rows]
    for sql in (
        "SELECT task_id, title, attempt_count FROM tasks ORDER BY task_id",
        "SELECT observation, agent_id FROM attempts ORDER BY observation",
        "SELECT content, agent_id FROM thoughts ORDER BY content",
        "SELECT count(*) FROM relations",
    ):
        out[sql] = memory.recall(reader, parse(RecallInput, {"sql": sql})).rows
    recent = memory.recent_context(reader, parse(RecentContextInput, {"repository": REPO, "limit": 50}))
    out["recent"] = [t.content for t in recent.thoughts]
    out["overview"] = [
        (r.repository, r.tasks, r.attempts, r.thoughts) for r in memory.repository_overview(reader)
    ]
    for status in (None, "passed", "unverified"):
        page = memory.task_page(reader, REPO, status=status)
        out[f"task page {status}"] = (
            page.total,
            [(t.row.task_id, t.title, t.row.attempts, t.row.unverified) for t in page.tasks],
            page.agents,
        )
    for task in range(4):
        timeline = memory.task_timeline(reader, REPO, f"T-{task}")
        out[f"timeline {task}"] = (timeline.title, [str(i.body.observation) for i in timeline.items])
    stats = memory.stats(reader, parse(StatsInput, {})).model_dump()
    for repo in stats["by_repository"]:
        repo.pop("newest")  # each store's own clock
    # the clock, and the store's size on disk (shown to a caller that sees every repository)
    skip = ("newest_activity", "store_bytes", "bytes_per_attempt")
    out["stats"] = {k: v for k, v in stats.items() if k not in skip}
    return out


@pytest.mark.slow
def test_reader_sees_identical_answers_and_scores_with_and_without_others_private_records(
    stores: tuple[Memory, Memory],
) -> None:
    alone, crowded = stores
    _fill(alone, crowded)
    want, got = _answers(alone, READER), _answers(crowded, READER)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key
    assert any("my own note" in str(v) for v in got.values())  # the writer sees its own
    assert not any("hunter2" in str(v) for v in got.values())


def test_session_private_record_is_invisible_in_another_session(stores: tuple[Memory, Memory]) -> None:
    memory, _ = stores
    _thought(memory, READER, 1, "only in session s1", visibility="session")
    _attempt(memory, READER, 1, visibility="agent", observation="every session of mine sees this")
    ask = parse(SearchThoughtsInput, {"query": "only in session s1"})
    assert [t.thought.content for t in memory.search_thoughts(READER, ask).thoughts] == ["only in session s1"]
    assert memory.search_thoughts(READER_LATER, ask).thoughts == []
    assert memory.search_thoughts(OTHER, ask).thoughts == []
    found = memory.search(READER_LATER, parse(SearchInput, {"query": "every session of mine sees this"}))
    assert [t.attempt.observation for t in found.tasks] == ["every session of mine sees this"]
    assert memory.search(OTHER, parse(SearchInput, {"query": "every session of mine sees this"})).tasks == []


def test_admin_sees_every_private_record(stores: tuple[Memory, Memory]) -> None:
    memory, _ = stores
    _thought(memory, OTHER, 1, "private to other", visibility="agent")
    _attempt(memory, OTHER, 1, visibility="session", observation="private to other's session")
    ask = parse(SearchThoughtsInput, {"query": "private to other"})
    assert [t.thought.content for t in memory.search_thoughts(ADMIN, ask).thoughts] == ["private to other"]
    rows = memory.recall(ADMIN, parse(RecallInput, {"sql": "SELECT observation FROM attempts"})).rows
    assert rows == [["private to other's session"]]
    assert memory.recall(READER, parse(RecallInput, {"sql": "SELECT observation FROM attempts"})).rows == []


def test_unknown_visibility_is_refused_naming_the_field_and_writes_nothing(
    stores: tuple[Memory, Memory],
) -> None:
    memory, _ = stores
    with pytest.raises(InvalidInput) as bad:
        _attempt(memory, READER, 1, visibility="team")
    assert bad.value.field == "visibility"
    with pytest.raises(InvalidInput) as bad:
        _thought(memory, READER, 1, "x", visibility="everyone")
    assert bad.value.field == "visibility"
    with pytest.raises(InvalidInput) as bad:  # session-private without a session
        _thought(memory, Caller(agent_id="reader"), 1, "x", visibility="session")
    assert bad.value.field == "visibility"
    assert memory.stats(ADMIN, parse(StatsInput, {})).ledger_entries == 0


def _reader_view(memory: Memory, reader: Caller) -> list[Any]:
    found = memory.search(reader, parse(SearchInput, {"query": "published queue note"}))
    thoughts = memory.search_thoughts(reader, parse(SearchThoughtsInput, {"query": "published cache note"}))
    rows = memory.recall(reader, parse(RecallInput, {"sql": "SELECT observation FROM attempts"})).rows
    return [
        [(t.task_id, t.score, t.score_parts.model_dump(), t.attempt.observation) for t in found.tasks],
        [(t.thought.content, t.score) for t in thoughts.thoughts],
        rows,
    ]


def test_published_record_reads_exactly_like_one_written_shared(stores: tuple[Memory, Memory]) -> None:
    """Publishing moves a private record into its repository's scope: a reader then gets the
    answers and scores it would get had the record been written for the repository."""
    published, shared = stores
    for memory in stores:
        for i in range(4):
            _readable(memory, i)
    aid = _attempt(published, OTHER, 7, observation="published queue note", visibility="session")
    tid = _thought(published, OTHER, 7, "published cache note", visibility="agent")
    _attempt(shared, OTHER, 7, observation="published queue note")
    _thought(shared, OTHER, 7, "published cache note")
    assert _reader_view(published, READER) != _reader_view(shared, READER)
    for record in (aid, tid):
        out = published.publish(OTHER, parse(PublishInput, {"repository": REPO, "record_id": record}))
        assert out.visibility == "repository"
    assert _reader_view(published, READER) == _reader_view(shared, READER)
    assert published.get_thought(READER, parse(GetThoughtInput, {"thought_id": tid})).content == (
        "published cache note"
    )
    published.rebuild()  # derived again from the ledger, visibility entries included
    assert _reader_view(published, READER) == _reader_view(shared, READER)
    assert published.verify_integrity(ADMIN, None).ok


def test_publish_only_widens_and_only_its_writer_or_an_admin_may(stores: tuple[Memory, Memory]) -> None:
    memory, _ = stores
    session_note = _thought(memory, OTHER, 1, "session note", visibility="session")
    agent_note = _attempt(memory, OTHER, 1, visibility="agent", observation="agent note")
    shared_note = _thought(memory, WRITER, 1, "shared note")

    def publish(caller: Caller, record: str, visibility: str = "repository") -> Any:
        data = {"repository": REPO, "record_id": record, "visibility": visibility}
        return memory.publish(caller, parse(PublishInput, data))

    entries = memory.stats(ADMIN, parse(StatsInput, {})).ledger_entries
    for caller, record, visibility, error in (
        (READER, session_note, "repository", NotFound),  # another agent's private record: none
        (OTHER, agent_note, "session", InvalidInput),  # narrowing
        (OTHER, shared_note, "agent", InvalidInput),
        (WRITER, shared_note, "repository", InvalidInput),  # already that wide
        (OTHER, session_note, "everyone", InvalidInput),  # unknown visibility
    ):
        with pytest.raises(error) as refused:
            publish(caller, record, visibility)
        if error is InvalidInput:
            assert refused.value.field == "visibility"
    other_session = Caller(agent_id="other", session_id="o2")
    with pytest.raises(NotFound):  # its own agent, another session: not readable, so not there
        publish(other_session, session_note, "agent")
    with pytest.raises(NotFound):  # nor can another agent correct or forget it
        memory.mark_conclusion_outdated(
            READER, parse(MarkOutdatedInput, {"repository": REPO, "attempt_id": agent_note, "reason": "x"})
        )
    assert memory.stats(ADMIN, parse(StatsInput, {})).ledger_entries == entries  # nothing written
    assert publish(OTHER, session_note, "agent").visibility == "agent"
    ask = parse(SearchThoughtsInput, {"query": "session note"})

    def found(caller: Caller) -> list[str]:
        return sorted(t.thought.content for t in memory.search_thoughts(caller, ask).thoughts)

    assert found(other_session) == ["session note", "shared note"]
    assert found(READER) == ["shared note"]
    assert publish(ADMIN, session_note).visibility == "repository"  # an admin may widen anyone's
    assert found(READER) == ["session note", "shared note"]


def test_export_by_a_non_admin_leaves_out_others_private_bodies_and_an_import_keeps_every_scope(
    stores: tuple[Memory, Memory], tmp_path: Path
) -> None:
    alone, crowded = stores
    _fill(alone, crowded)
    hidden = _thought(crowded, OTHER, 5, "hunter2 published later", visibility="agent")
    crowded.publish(OTHER, parse(PublishInput, {"repository": REPO, "record_id": hidden}))
    mine = io.BytesIO()
    crowded.export(READER, mine)
    text = mine.getvalue().decode()
    assert "my own note" in text and "hunter2 published later" in text
    assert "hunter2 is the password" not in text  # others' private attempts and thoughts: null bodies
    everything = io.BytesIO()
    crowded.export(ADMIN, everything)
    assert "hunter2 is the password" in everything.getvalue().decode()
    moved = Memory.open(
        Settings(home=tmp_path / "moved", db_path=tmp_path / "moved" / "m.db", embedder="hash"),
        HashEmbedder(),
    )
    try:
        moved.import_(ADMIN, everything.getvalue().splitlines())
        assert _answers(moved, READER) == _answers(crowded, READER)
    finally:
        moved.close()


def test_another_agents_private_thought_neither_hides_nor_links_a_shared_one(
    stores: tuple[Memory, Memory],
) -> None:
    memory, _ = stores
    shared = _thought(memory, WRITER, 1, "the cache warms in two minutes")
    private = _thought(
        memory,
        OTHER,
        1,
        "the cache warms in five minutes",
        visibility="agent",
        relations=[{"kind": "Supersedes", "target_id": shared}],
    )
    ask = parse(SearchThoughtsInput, {"query": "cache warms minutes"})

    def seen(caller: Caller) -> list[tuple[str, list[str]]]:
        return [
            (t.thought.thought_id, t.thought.invalidated_by)
            for t in memory.search_thoughts(caller, ask).thoughts
        ]

    assert seen(READER) == [(shared, [])]  # not superseded for the reader, and the private one is absent
    assert seen(OTHER) == [(private, [])]  # its writer reads it, and the thought it supersedes is left out
    walk = memory.traverse_thoughts(READER, parse(TraverseInput, {"thought_id": shared}))
    assert ([n.thought_id for n in walk.nodes], walk.edges, walk.dangling) == ([shared], [], [])
    assert memory.get_thought(READER, parse(GetThoughtInput, {"thought_id": shared})).invalidated_by == []
    with pytest.raises(NotFound):
        memory.get_thought(READER, parse(GetThoughtInput, {"thought_id": private}))
    with pytest.raises(InvalidInput) as refused:  # nor may the reader link to it
        _thought(memory, READER, 2, "x", refs=[private])
    assert refused.value.field == "refs"
    assert [
        n.thought_id
        for n in memory.traverse_thoughts(ADMIN, parse(TraverseInput, {"thought_id": shared})).nodes
    ] == [
        shared,
        private,
    ]


def test_a_private_rejection_gives_no_reassertion_warning_to_another_agent(
    stores: tuple[Memory, Memory],
) -> None:
    memory, _ = stores
    rejected = _thought(memory, OTHER, 1, "the queue never drops a message", visibility="agent")
    _thought(
        memory,
        OTHER,
        2,
        "wrong: it drops them under the secret load profile",
        visibility="agent",
        relations=[{"kind": "Corrects", "target_id": rejected}],
    )
    data = {"repository": REPO, "type": "Finding", "content": "the queue never drops a message"}
    mine = memory.append_thought(READER, parse(AppendThoughtInput, data))
    assert (mine.warnings, mine.reasserts) == ([], [])
    theirs = memory.append_thought(OTHER, parse(AppendThoughtInput, {**data, "visibility": "agent"}))
    assert [r.rejected_id for r in theirs.reasserts] == [rejected]  # its writer is still warned
