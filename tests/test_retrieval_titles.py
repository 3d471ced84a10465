"""The title-to-title signal's fusion (``retrieval/titles.py``): pure functions, no store."""

from __future__ import annotations

import pytest

from mentis import retrieval
from mentis.retrieval.titles import fuse_titles, title_terms


def _order(ranked: list[retrieval.Scored]) -> list[int]:
    return [s.rowid for s in ranked]


def test_the_title_query_is_the_first_non_empty_line() -> None:
    assert title_terms("\n  \nCrash on startup\nthe app dies when the profile is locked") == [
        "crash",
        "startup",
    ]
    assert title_terms("") == []


def test_no_title_hits_leave_the_fused_order_exactly_as_it_was() -> None:
    ranked = retrieval.fuse([(1, 3.0), (2, 2.0)], [(3, 0.9), (1, 0.8)])
    before = [(s.rowid, s.fused) for s in ranked]
    after = fuse_titles(ranked, [], retrieval.RRF_K)
    assert [(s.rowid, s.fused) for s in after] == before
    assert all(s.title is None and s.title_rank is None for s in after)


def test_title_hits_add_one_reciprocal_rank_list_like_the_others() -> None:
    lex, vec, titles = [(1, 3.0), (2, 2.0)], [(3, 0.9), (1, 0.8)], [(2, 1.5), (4, 0.7)]
    k = retrieval.RRF_K
    fused = fuse_titles(retrieval.fuse(lex, vec), titles, k)
    expected = {1: 1 / (k + 1) + 1 / (k + 2), 2: 1 / (k + 2) + 1 / (k + 1), 3: 1 / (k + 1), 4: 1 / (k + 2)}
    assert {s.rowid: round(s.fused, 12) for s in fused} == {r: round(f, 12) for r, f in expected.items()}
    assert _order(fused) == [1, 2, 3, 4]  # 1 and 2 tie: the lower rowid first
    by_row = {s.rowid: s for s in fused}
    assert (by_row[2].title, by_row[2].title_rank) == (1.5, 1)
    assert (by_row[4].lexical, by_row[4].vector, by_row[4].title_rank) == (None, None, 2)


def test_a_title_ranks_its_task_and_leaves_the_choice_of_attempt_to_the_other_signals() -> None:
    # rows 1 and 2 are attempts of task A (only 1 carries the title); 3 is task B; 4 and 5 are
    # two titled attempts of task C, found only by their titles
    task = {1: "A", 2: "A", 3: "B", 4: "C", 5: "C"}
    ranked = retrieval.fuse([(2, 5.0), (3, 4.0), (1, 1.0)], [(2, 0.9), (3, 0.8), (1, 0.1)])
    k = retrieval.RRF_K
    before = {s.rowid: s.fused for s in ranked}
    fused = fuse_titles(ranked, [(1, 2.0), (4, 1.5), (5, 1.4)], k, lambda rows: {r: task[r] for r in rows})
    by_row = {s.rowid: s for s in fused}
    # task A's term goes to both its attempts, so its best attempt stays the one shown
    assert by_row[2].fused - before[2] == pytest.approx(1 / (k + 1))
    assert by_row[1].fused - before[1] == pytest.approx(1 / (k + 1))
    assert _order(fused)[0] == 2 and by_row[2].title_rank == 1
    # task C is ranked once, at its best title hit; its second hit adds nothing more
    assert by_row[4].title_rank == 2 and by_row[4].fused == 1 / (k + 2)
    assert 5 not in by_row
    assert by_row[3].fused == before[3] and by_row[3].title is None
