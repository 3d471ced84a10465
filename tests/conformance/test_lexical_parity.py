"""Both backends rank words the same (issue 15): PostgreSQL persists the analysed terms SQLite
persists and scores them with the same BM25, so searches agree result for result, score for score.

Each comparison writes the same records, in the same order, to a SQLite store and a PostgreSQL
store; record ids are fresh UUIDs per store, so results are compared by the order in which their
records were written. Only the lexical half is compared beyond the issue's scenario: pgvector's
float32 cosine orders the hash embedder's many tied vectors differently from numpy, which can move
a vector rank by one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from tests.pg_server import Cluster

AGENT = Caller(agent_id="parity")
REPO = "github.com/acme/shop"
CORE_QUERY = "database connection pool size for checkout load"


@pytest.fixture
def pair(tmp_path: Path, pg_cluster: Cluster) -> Iterator[tuple[Memory, Memory]]:
    """(sqlite, postgres): two empty stores."""
    base = Settings(home=tmp_path, db_path=tmp_path / "mentis.db", embedder="hash")
    lite = Memory.open(base, HashEmbedder())
    pg = Memory.open(dataclasses.replace(base, database_url=pg_cluster.new_database()), HashEmbedder())
    yield lite, pg
    lite.close()
    pg.close()


def _record(memory: Memory, **fields: Any) -> str:
    data = {
        "repository": REPO,
        "task_id": "T-1",
        "action": "retried",
        "observation": "nothing changed",
        "files": ["src/shop/checkout.py"],
        **fields,
    }
    return memory.record_attempt(AGENT, parse(RecordAttemptInput, data)).attempt_id


def _core_scenario(memory: Memory) -> tuple[str, str]:
    """The issue's scenario: a failed and a passed attempt on one task, the passed one then
    marked outdated. Returns (failed id, passed id)."""
    failed = _record(
        memory,
        task_id="checkout-load",
        task_title="checkout times out under load",
        action="raised the database pool size from 10 to 20",
        observation="checkout still timed out under the load test; connections were not the limit",
        inference="the pool is not the bottleneck",
        check={"command": "make load-test", "status": "failed", "exit_code": 1},
    )
    passed = _record(
        memory,
        task_id="checkout-load",
        action="set the connection pool size to 50 and the checkout worker count to 8",
        observation="load test passed: p95 checkout latency 180 ms with 50 pooled database connections",
        inference="connection pool size was the limit for checkout load",
        files=["config/database.yml"],
        check={"command": "make load-test", "status": "passed", "exit_code": 0},
    )
    memory.mark_conclusion_outdated(
        AGENT,
        parse(
            MarkOutdatedInput,
            {"repository": REPO, "attempt_id": passed, "reason": "pool settings moved to pgbouncer"},
        ),
    )
    return failed, passed


def _fill(memory: Memory) -> list[str]:
    """Attempts and thoughts over three repositories with shared and rare words; returns the
    attempt ids in the order written."""
    ids = []
    words = ["checkout", "payment", "queue", "pool", "cache", "stampede", "navbar", "overflow"]
    for i in range(40):
        repo = f"github.com/acme/r{i % 3}"
        ids.append(
            _record(
                memory,
                repository=repo,
                task_id=f"T-{i % 7}",
                task_title=f"{words[i % 8]} {words[(i * 3) % 8]} issue" if i % 4 == 0 else None,
                action=f"step {i}: tried {words[i % 8]} and {words[(i + 2) % 8]} fixes",
                observation=f"the {words[(i * 5) % 8]} test {i} {'passed' if i % 3 else 'failed'} "
                f"{'again ' * (i % 4)}under load",
                inference=f"{words[(i + 1) % 8]} matters" if i % 2 else None,
                files=[f"src/{words[i % 8]}.py"],
                tags=[words[(i + 4) % 8]],
            )
        )
        if i % 5 == 0:
            memory.append_thought(
                AGENT,
                parse(
                    AppendThoughtInput,
                    {
                        "repository": repo,
                        "type": "Finding",
                        "content": f"{words[i % 8]} {words[(i + 3) % 8]} under load, run {i}",
                        "concepts": [words[(i + 5) % 8]],
                        "tags": ["perf"],
                    },
                ),
            )
    return ids


def _lexical(memory: Memory, ids: list[str], query: str, scope: list[str] | None) -> list[tuple[int, float]]:
    from mentis.retrieval import query_terms

    hits = memory.store.lexical(query_terms(query), scope, 200)
    keys = memory.store.attempt_keys([r for r, _ in hits])
    order = {a: i for i, a in enumerate(ids)}
    return [(order[keys[r][2]], s) for r, s in hits]


def _assert_same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> None:
    assert [i for i, _ in got] == [i for i, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)


def test_core_scenario_previews_the_same_attempt_on_both_backends(pair: tuple[Memory, Memory]) -> None:
    previews = []
    for memory in pair:
        failed, passed = _core_scenario(memory)
        res = memory.search(AGENT, parse(SearchInput, {"query": CORE_QUERY}))
        top = res.tasks[0]
        assert (top.task_id, top.attempt_count) == ("checkout-load", 2)
        previews.append(("passed" if top.attempt.attempt_id == passed else "failed", top.attempt.status))
        assert top.attempt.attempt_id in (failed, passed)
    lite, pg = previews
    assert pg == lite == ("passed", "passed")


def test_bm25_scores_are_equal_on_both_backends_for_every_scope(pair: tuple[Memory, Memory]) -> None:
    lite, pg = pair
    ids = [_fill(lite), _fill(pg)]
    queries = [
        "checkout payment queue",
        "pool pool cache",
        "navbar overflow under load",
        "stampede again",
        "zzz",
    ]
    for query in queries:
        for scope in (None, ["github.com/acme/r0"], ["github.com/acme/r1", "github.com/acme/r2"]):
            _assert_same(_lexical(pg, ids[1], query, scope), _lexical(lite, ids[0], query, scope))


def test_thought_bm25_is_equal_on_both_backends(pair: tuple[Memory, Memory]) -> None:
    from mentis.retrieval import query_terms

    views = []
    for memory in pair:
        _fill(memory)
        for scope in (None, ["github.com/acme/r1"]):
            hits = memory.store.thought_lexical(query_terms("cache stampede under load"), scope, 200)
            bodies = memory.store.load_thoughts([r for r, _ in hits])
            views.append([(bodies[r].body.content, s) for r, s in hits])
    lite, pg = views[:2], views[2:]
    assert lite[0] and lite[1]
    for got, want in zip(pg, lite, strict=True):
        assert [c for c, _ in got] == [c for c, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)


def test_forget_leaves_both_backends_ranking_the_same(pair: tuple[Memory, Memory]) -> None:
    lite, pg = pair
    ids = [_fill(lite), _fill(pg)]
    for memory, own in zip(pair, ids, strict=True):
        for i in (0, 7, 9):
            memory.forget_attempt(
                AGENT, parse(ForgetInput, {"repository": f"github.com/acme/r{i % 3}", "attempt_id": own[i]})
            )
    for query in ("checkout payment queue", "stampede again under load"):
        want = _lexical(lite, ids[0], query, None)
        assert want and {0, 7, 9}.isdisjoint(i for i, _ in want)
        _assert_same(_lexical(pg, ids[1], query, None), want)
