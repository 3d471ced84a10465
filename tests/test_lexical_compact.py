"""Frozen lexical segments are compact (uint16 document numbers, float16 weights when exact) and
score exactly like the open tail, which keeps plain lists."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mentis.index import lexical

WORDS = [f"t{i}" for i in range(40)] + ["cache", "timeout", "flaky", "pool"]


def _rows(weights: tuple[float, ...], n: int, seed: int) -> list[lexical.DocRow]:
    rng = random.Random(seed)
    vocab: dict[str, int] = {}

    def text() -> str:
        return " ".join(WORDS[min(int(rng.paretovariate(1.0)) - 1, len(WORDS) - 1)] for _ in range(12))

    return [
        lexical.document_row(i + 1, "r" if i % 2 else "s", [text() for _ in weights], weights, vocab)
        for i in range(n)
    ]


@pytest.mark.parametrize(("weights", "half"), [((3.0, 1.0, 0.5), True), ((1.0, 0.2, 0.7), False)])
def test_frozen_segments_score_like_the_tail(weights: tuple[float, ...], half: bool) -> None:
    rows = _rows(weights, 3_000, seed=len(weights) + int(half))
    bulk, tail = lexical.LexicalIndex(), lexical.LexicalIndex()
    bulk.add(rows)  # frozen at once
    for row in rows:
        tail.add([row])  # tail lists, frozen every TAIL_MAX documents
    segment = bulk._segments[0]
    assert segment.docs.dtype == np.uint16
    assert segment.weights.dtype == (np.float16 if half else np.float32)
    for terms in ([1], [2, 5], [3, 3, 7], list(range(1, 12))):
        for repositories in (None, ["r"]):
            assert bulk.search(terms, repositories, 50) == tail.search(terms, repositories, 50)


def test_a_frozen_index_of_many_documents_scores_like_fts5_bm25() -> None:
    from tests.test_lexical import WEIGHTS, _docs, _fts, _query, _rows

    rng = random.Random(11)
    docs = _docs(rng, 2_500)  # past TAIL_MAX: bulk-loaded into compact frozen segments
    vocab: dict[str, int] = {}
    index = lexical.LexicalIndex()
    index.add(_rows(docs, vocab))
    assert index._segments and index._segments[0].weights.dtype == np.float16
    conn = _fts(docs)
    for words in (["error", "w3"], ["database", "locked", "w1", "w1"], ["running", "w10", "fails"]):
        expected = conn.execute(
            "SELECT rowid, -bm25(f, ?, ?, ?) AS s FROM f WHERE f MATCH ? ORDER BY s DESC, rowid",
            (*WEIGHTS, " OR ".join(f'"{w}"' for w in words)),
        ).fetchall()
        got = dict(index.search(_query(vocab, words), None, len(docs)))
        assert len(got) == len(expected)
        for rowid, theirs in expected:
            assert got[rowid] == pytest.approx(theirs, rel=1e-9, abs=1e-9)
