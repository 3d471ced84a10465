"""Fusion, graph signals and the optional LLM rerank, through the real search path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mentis import retrieval
from mentis.api.attempts import RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.providers.rerank import Reranker
from mentis.retrieval import Scored, fuse, query_terms
from mentis.retrieval.graph import personalised_pagerank
from mentis.service.memory import Caller, Memory

from .conftest import REPO
from .fake_openai import FakeOpenAI


def record(memory: Memory, caller: Caller, task_id: str, observation: str, **fields: Any) -> str:
    data = {"repository": REPO, "task_id": task_id, "action": "tried", "observation": observation, **fields}
    return memory.record_attempt(caller, parse(RecordAttemptInput, data)).attempt_id


def test_query_terms_drop_punctuation_and_stopwords() -> None:
    assert query_terms('why does the "cart" total fail?') == ["cart", "total", "fail"]
    assert query_terms("the of and") == []


def test_query_terms_repeat_a_word_as_often_as_the_query_does() -> None:
    assert query_terms("cart fails, the cart total; CART") == ["cart", "cart", "cart", "fails", "total"]
    many = " ".join(f"w{i}" for i in range(200)) + " w0 w150"
    words = query_terms(many)
    assert len(set(words)) == retrieval.MAX_QUERY_TERMS and words.count("w0") == 2 and "w150" not in words


def test_rrf_rewards_agreement_between_the_two_lists() -> None:
    fused = fuse([(1, 9.0), (2, 8.0)], [(2, 0.9), (3, 0.8)])
    assert [s.rowid for s in fused] == [2, 1, 3]
    assert fused[0].parts()["lexical_rank"] == 2 and fused[0].parts()["vector_rank"] == 1


def test_without_edges_the_walk_keeps_the_fused_order() -> None:
    ranked = fuse([(1, 3.0), (2, 2.0), (3, 1.0)], [])
    walked = personalised_pagerank(ranked, [])
    assert sorted(walked, key=lambda r: -walked[r]) == [1, 2, 3]


def test_a_node_linked_to_several_seeds_gains_score_from_them() -> None:
    ranked = [
        Scored(rowid=r, fused=f) for r, f in ((1, 0.03), (2, 0.029), (3, 0.028), (4, 0.001), (5, 0.001))
    ]
    walked = personalised_pagerank(ranked, [(1, 4, 1.0), (2, 4, 1.0), (3, 4, 1.0), (1, 99, 1.0)])
    assert walked[4] > 5 * walked[5] > 0
    assert walked[99] > 0
    assert abs(sum(walked.values()) - 1.0) < 1e-9


def test_search_pulls_in_an_attempt_that_shares_files_with_the_hits(memory: Memory, caller: Caller) -> None:
    for i in range(3):
        record(
            memory,
            caller,
            f"T-{i}",
            f"checkout rounding error number {i}",
            files=["shop/cart.py", "shop/tax.py"],
        )
    record(memory, caller, "T-linked", "unrelated words entirely", files=["shop/cart.py", "shop/tax.py"])
    for i in range(20):
        record(memory, caller, f"noise-{i}", f"zebra giraffe {i}")
    tasks = memory.search(caller, parse(SearchInput, {"query": "checkout rounding error", "limit": 5})).tasks
    ids = [t.task_id for t in tasks]
    assert set(ids[:3]) == {"T-0", "T-1", "T-2"}
    assert ids[3] == "T-linked"
    assert tasks[3].score_parts.graph is not None and tasks[3].score_parts.graph > 0


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def reranked(settings: Settings, fake: FakeOpenAI) -> Iterator[Memory]:
    reranker = Reranker(fake.url, api_key="sk-test-key-not-real", timeout=2.0)
    memory = Memory.open(settings, HashEmbedder())
    memory.reranker = reranker
    yield memory
    memory.close()


def _fill(memory: Memory, caller: Caller) -> None:
    record(memory, caller, "T-a", "database migration failed on the orders table")
    record(memory, caller, "T-b", "database migration lock timeout on users")
    record(memory, caller, "T-c", "css layout overflow in the navbar")


def test_the_rerank_orders_tasks_by_usefulness(reranked: Memory, caller: Caller, fake: FakeOpenAI) -> None:
    _fill(reranked, caller)
    fake.scores = {"1": 0.1, "2": 0.9, "3": 0.5}
    res = reranked.search(caller, parse(SearchInput, {"query": "database migration failed"}))
    fused = [t.task_id for t in res.tasks]
    assert "llm usefulness rerank" in res.ranking
    assert [t.score_parts.usefulness for t in res.tasks] == [0.9, 0.5, 0.1]
    assert len(fused) == 3


@pytest.mark.parametrize("behaviour", ["http_500", "malformed_json", "missing_id", "nan_score", "hang"])
def test_a_failed_rerank_falls_back_to_the_fused_order_and_says_so(
    reranked: Memory, caller: Caller, fake: FakeOpenAI, behaviour: str
) -> None:
    _fill(reranked, caller)
    plain = reranked.reranker
    reranked.reranker = None
    expected = [
        t.task_id for t in reranked.search(caller, parse(SearchInput, {"query": "database migration"})).tasks
    ]
    reranked.reranker = plain
    fake.behaviour = behaviour
    fake.hang_seconds = 3.0
    res = reranked.search(caller, parse(SearchInput, {"query": "database migration"}))
    assert [t.task_id for t in res.tasks] == expected
    assert "(rerank failed: " in res.ranking
    assert all(t.score_parts.usefulness is None for t in res.tasks)


def test_rerank_requests_carry_no_secret_from_the_store(
    reranked: Memory, caller: Caller, fake: FakeOpenAI
) -> None:
    record(
        reranked, caller, "T-s", "deploy failed with token ghp_abcdefghijklmnopqrstuvwxyz0123456789 in logs"
    )
    record(reranked, caller, "T-t", "deploy failed again")
    reranked.search(caller, parse(SearchInput, {"query": "deploy failed"}))
    assert fake.requests
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in fake.sent()


def test_lexical_search_skips_terms_in_most_documents_once_the_store_is_large(
    memory: Memory, caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mentis.store.sqlite.indexes.LEXICAL_SELECT_MIN_DOCS", 10)
    for i in range(30):
        record(memory, caller, f"T-{i}", f"common words everywhere item{i}")
    record(memory, caller, "T-rare", "common words everywhere with a zeppelin")
    # "common" is in every document: skipped, so only the zeppelin attempt is a candidate
    lexical = memory.store.lexical(["common", "zeppelin", "absent"], None, 10)
    assert len(lexical) == 1
    assert memory.store.lexical(["common", "words"], None, 10) == []
    assert (
        memory.search(caller, parse(SearchInput, {"query": "common zeppelin"})).tasks[0].task_id == "T-rare"
    )


def test_below_the_size_threshold_every_term_is_used(memory: Memory, caller: Caller) -> None:
    for i in range(5):
        record(memory, caller, f"T-{i}", "common words")
    assert len(memory.store.lexical(["common", "absent"], None, 10)) == 5
