"""The pruned lexical search (MaxScore over tf tiers, lexical_topk) returns exactly what scoring
every posting returns: the same rowids, the same float scores, in the same order, ties included.

The reference below is written plainly, one document and one term at a time in Python floats, from
the BM25 definition in lexical.py's docstring; the index is built in segments, an open tail and
late rows, with removed rows, repository scopes, repeated and tuple (one stem, several ids) terms.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mentis.index import lexical, lexical_topk

REPOS = ("r0", "r1", "r2")
TFS = (1.0, 1.0, 1.0, 1.0, 0.5, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 0.3, 0.0)
"""Weighted tfs: mostly 1 (as in attempts), some above each tier's edge, 0.3 (not a float16, so
its segment keeps float32 weights) and 0 (a posting that adds nothing)."""


@dataclass
class Doc:
    rowid: int
    repository: str
    length: int
    tf: dict[int, float]  # term id -> weighted tf, as stored (float32)


def _term_id(stem: int, repository: str) -> int:
    """Term ids are numbered per repository (as PostgreSQL does), so a stem is a tuple of ids."""
    return stem * len(REPOS) + REPOS.index(repository) + 1


def _corpus(rng: random.Random, n: int, stems: int) -> list[Doc]:
    docs = []
    for i in range(n):
        repo = rng.choice(REPOS)
        k = rng.randint(0, 12)
        # skewed: low stems are common, high ones rare
        chosen = {min(int(rng.paretovariate(0.8)) - 1, stems - 1) for _ in range(k)}
        tf = {_term_id(s, repo): float(np.float32(rng.choice(TFS))) for s in chosen}
        docs.append(Doc(2 * i + 2, repo, rng.randint(max(1, len(tf)), 40), tf))
    return docs


def _row(doc: Doc) -> lexical.DocRow:
    packed = np.empty(len(doc.tf), dtype=lexical.POSTING)
    packed["t"] = list(doc.tf)
    packed["w"] = list(doc.tf.values())
    return lexical.DocRow(doc.rowid, doc.repository, doc.length, packed.tobytes())


def reference(
    docs: list[Doc],
    terms: list[int | tuple[int, ...]],
    repositories: list[str] | None,
    limit: int,
    select_min_docs: int | None,
) -> list[tuple[int, float]]:
    """BM25 over the documents in scope, every posting scored, term by term in query order."""
    scope = [d for d in docs if repositories is None or d.repository in repositories]
    n = len(scope)
    if n == 0:
        return []
    total = float(sum(d.length for d in scope))
    avgdl = total / n if total else 1.0
    max_df = n // 2 if select_min_docs is not None and n >= select_min_docs else None
    scores = {d.rowid: 0.0 for d in scope}
    for term, qtf in Counter(terms).items():
        ids = term if isinstance(term, tuple) else (term,)
        holders = [(d, d.tf[i]) for d in scope for i in ids if i in d.tf]
        df = len(holders)
        if df == 0 or (max_df is not None and df > max_df):
            continue
        idf = max(math.log((n - df + 0.5) / (df + 0.5)), lexical.IDF_FLOOR)
        for d, tf in holders:
            norm = lexical.K1 * (1.0 - lexical.B + lexical.B * d.length / avgdl)
            scores[d.rowid] += qtf * idf * (lexical.K1 + 1.0) * tf / (tf + norm)
    hits = sorted(((-s, r) for r, s in scores.items() if s != 0.0))
    return [(r, -s) for s, r in hits[:limit]]


def _query(rng: random.Random, stems: int) -> list[int | tuple[int, ...]]:
    out: list[int | tuple[int, ...]] = []
    for _ in range(rng.randint(1, 14)):
        stem = min(int(rng.paretovariate(0.6)) - 1, stems - 1)
        if rng.random() < 0.3:  # one stem under its ids in several repositories
            out.append(tuple(_term_id(stem, r) for r in rng.sample(REPOS, rng.randint(2, 3))))
        else:
            out.append(_term_id(stem, rng.choice(REPOS)))
    out += rng.sample(out, rng.randint(0, len(out)))  # repeated terms count once per occurrence
    rng.shuffle(out)
    return out


def _build(rng: random.Random, docs: list[Doc], late: list[Doc]) -> lexical.LexicalIndex:
    """Batches of random sizes (frozen segments and an open tail), then late rows."""
    index = lexical.LexicalIndex()
    at = 0
    while at < len(docs):
        step = rng.choice((1, 3, 40, 200))
        index.add([_row(d) for d in docs[at : at + step]])
        at += step
    for doc in late:
        index.add([_row(doc)])
    return index


@pytest.mark.parametrize("prune_from", [0, 10**9], ids=["pruned", "every-posting"])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 700),
    stems=st.integers(2, 60),
    removed_share=st.sampled_from((0.0, 0.0, 0.1, 0.5)),
    with_late=st.booleans(),
)
# the patched constants are the same for every example
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_search_returns_what_scoring_every_posting_returns(
    monkeypatch: pytest.MonkeyPatch,
    prune_from: int,
    seed: int,
    n: int,
    stems: int,
    removed_share: float,
    with_late: bool,
) -> None:
    monkeypatch.setattr(lexical, "SEGMENT_DOCS", 64)
    monkeypatch.setattr(lexical, "TAIL_MAX", 16)
    monkeypatch.setattr(lexical_topk, "DENSE_MAX", prune_from)
    rng = random.Random(seed)
    docs = _corpus(rng, n, stems)
    late = []
    if with_late:  # rows that committed late (rowids below ones already loaded): ties go by rowid
        late = [Doc(d.rowid - 1, d.repository, d.length, dict(d.tf)) for d in rng.sample(docs, min(5, n))]
    index = _build(rng, docs, late)
    everything = docs + late
    removed = {d.rowid for d in everything if rng.random() < removed_share}
    index.remove(sorted(removed))
    live = [d for d in everything if d.rowid not in removed]
    for _ in range(6):
        terms = _query(rng, stems)
        scope = rng.choice((None, None, ["r1"], ["r0", "r2"], list(REPOS), []))
        limit = rng.choice((1, 2, 5, 10, 50, 1000))
        min_docs = rng.choice((None, 1, 30))
        want = reference(live, terms, scope, limit, min_docs)
        assert index.search(terms, scope, limit, min_docs) == want
        assert not index._scratch.acc.any() and not index._scratch.seen.any()  # left clean


def test_ties_at_the_cut_rank_by_rowid() -> None:
    # 30 documents with the same score: the limit takes the oldest ones, in rowid order
    rows = [_row(Doc(10 + i, "r0", 5, {1: 1.0})) for i in range(30)]
    rows += [_row(Doc(100 + i, "r0", 5, {2: 1.0})) for i in range(30)]
    index = lexical.LexicalIndex()
    index.add(rows)
    got = index.search([1], None, 7)
    assert [r for r, _ in got] == list(range(10, 17))
    assert len({s for _, s in got}) == 1


def test_removing_an_unknown_rowid_beside_a_known_one_counts_one_removal() -> None:
    # rowid 7 is not in the index and sorts right before 8: its search position is 8's, which
    # must not make 8's removal count twice (the statistics' document count would drop below
    # the documents that still hold a term, and its idf would be the log of a negative)
    index = lexical.LexicalIndex()
    index.add(
        [
            lexical.DocRow(
                rowid,
                "repo",
                2,
                lexical.pack({"cache": 1.0, f"w{rowid}": 1.0}, {"cache": 1, f"w{rowid}": 100 + rowid}),
            )
            for rowid in (2, 4, 6, 8, 10)
        ]
    )
    index.remove([7, 8])
    assert len(index) == 4
    hits = index.search([1], None, 10)
    assert sorted(r for r, _ in hits) == [2, 4, 6, 10]
