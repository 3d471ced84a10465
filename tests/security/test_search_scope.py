"""Finding 3 of the security review: search scores must not reveal what other repositories hold.

A caller scoped to ``team-a/*`` searches two stores: one that holds only team-a's data, and one
where another team's repository sits beside it, full of the words, files, tags and concepts the
caller probes for. Every result and every score part must be identical in both, for attempts
and thoughts, on both backends: statistics, candidate limits and graph links are computed from
what the caller may read, so nothing outside it shapes a score or a rank.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput, SearchThoughtsInput
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory

OWNER = Caller(agent_id="owner")
TEAM_A = Caller(agent_id="team-a-agent", can_write=False, repositories=("team-a/*",))
MINE = ("team-a/app", "team-a/lib")
THEIRS = "team-b/secret"
QUERIES = (
    "hunter2",
    "qqqzzz",
    "hunter2 qqqzzz nonexistentword",
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


def _attempt(memory: Memory, repository: str, i: int, **fields: Any) -> None:
    data = {
        "repository": repository,
        "task_id": f"T-{i % 5}",
        "action": f"step {i}: retried the payment fixture",
        "observation": f"checkout test {i} timed out waiting for the payment queue",
        "files": ["src/app.py", f"src/mod{i % 3}.py"],
        "tags": ["flaky"],
        **fields,
    }
    memory.record_attempt(OWNER, parse(RecordAttemptInput, data))


def _thought(memory: Memory, repository: str, i: int, content: str) -> None:
    data = {
        "repository": repository,
        "type": "Finding",
        "content": content,
        "concepts": ["cache", f"c{i % 3}"],
        "tags": ["flaky"],
    }
    memory.append_thought(OWNER, parse(AppendThoughtInput, data))


def _mine(memory: Memory, i: int) -> None:
    repo = MINE[i % 2]
    if i == 3:
        _attempt(memory, repo, i, observation="hunter2 qqqzzz nonexistentword")
    else:
        _attempt(memory, repo, i)
    _thought(
        memory,
        repo,
        i,
        f"cache stampede {i} under load in src/app.py; qqqzzz seen"
        if i == 3
        else f"cache stampede {i} under load",
    )


def _theirs(memory: Memory, i: int) -> None:
    # the probe words, the caller's files, tags and concepts, often enough to pass every fan-out cap
    _attempt(memory, THEIRS, i, observation=f"hunter2 is the password {i}; checkout payment queue")
    if i % 2 == 0:
        _thought(memory, THEIRS, i, f"hunter2 cache stampede {i} in src/app.py")


def _fill(alone: Memory, crowded: Memory) -> None:
    for i in range(12):
        _mine(alone, i)
    # the other team's writes come before, between and after the caller's, so rowids interleave
    theirs = iter(range(420))
    for i in range(12):
        for _ in range(35):
            _theirs(crowded, next(theirs))
        _mine(crowded, i)


def _attempt_view(memory: Memory, query: str, repository: str | None) -> list[Any]:
    res = memory.search(TEAM_A, parse(SearchInput, {"query": query, "repository": repository, "limit": 20}))
    return [
        (
            t.repository,
            t.task_id,
            t.attempt.attempt_id,
            t.score,
            t.score_parts.model_dump(),
            t.matched_attempt_ids,
        )
        for t in res.tasks
    ]


def _thought_view(memory: Memory, query: str, repository: str | None) -> list[Any]:
    res = memory.search_thoughts(
        TEAM_A, parse(SearchThoughtsInput, {"query": query, "repository": repository, "limit": 20})
    )
    return [
        (t.thought.content, t.score, t.score_parts.model_dump() if t.score_parts else None)
        for t in res.thoughts
    ]


@pytest.mark.slow
def test_scoped_search_is_identical_with_and_without_other_repositories(
    stores: tuple[Memory, Memory],
) -> None:
    alone, crowded = stores
    _fill(alone, crowded)
    for query in QUERIES:
        for repository in (None, *MINE):
            got = _strip_ids(_attempt_view(crowded, query, repository))
            want = _strip_ids(_attempt_view(alone, query, repository))
            assert got == want, (query, repository)
            assert all(r.startswith("team-a/") for r, *_ in got)
            assert _thought_view(crowded, query, repository) == _thought_view(alone, query, repository)


def test_word_held_elsewhere_weighs_like_any_word_of_ones_own(stores: tuple[Memory, Memory]) -> None:
    """The issue's oracle: the caller's attempt holds "hunter2" and "qqqzzz" once each; another
    repository holds "hunter2" hundreds of times. Both words must weigh the same for the caller
    (whole-store statistics gave "hunter2" the IDF floor, 0.0, and "qqqzzz" 0.65)."""
    alone, crowded = stores
    _fill(alone, crowded)
    probe = _attempt_view(crowded, "hunter2", None)[0][4]
    control = _attempt_view(crowded, "qqqzzz", None)[0][4]
    assert probe["lexical"] == control["lexical"] > 0
    assert probe["lexical_rank"] == control["lexical_rank"] == 1


def _strip_ids(view: list[Any]) -> list[Any]:
    # attempt ids are fresh UUIDs per store; the caller's attempts were written in the same order
    # in both, so their order of creation identifies them
    return [(r, task, score, parts, len(matched)) for r, task, _aid, score, parts, matched in view]
