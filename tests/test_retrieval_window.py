"""Conversational windows (retrieval/window.py): a turn scored with its neighbours in the session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mentis import retrieval
from mentis.retrieval.window import window_fuse


def no_neighbours(rowids: Sequence[int]) -> Mapping[int, Sequence[int]]:
    return {}


def pairs(links: dict[int, list[int]]):  # type: ignore[no-untyped-def]
    return lambda rowids: {r: links[r] for r in rowids if r in links}


def order(ranked: list[retrieval.Scored]) -> list[int]:
    return [s.rowid for s in ranked]


def test_without_neighbours_the_window_fusion_ranks_exactly_as_plain_rrf() -> None:
    lex = [(3, 9.0), (1, 7.5), (7, 2.0)]
    vec = [(1, 0.8), (5, 0.7), (3, 0.2)]
    plain = retrieval.fuse(lex, vec)
    windowed = window_fuse(lex, vec, no_neighbours)
    assert order(windowed) == order(plain)
    assert [s.fused for s in windowed] == [s.fused for s in plain]


def test_a_turn_whose_neighbour_completes_the_question_moves_above_a_lone_partial_match() -> None:
    # 1 and 2 are said one after the other in a session, each matching part of the question;
    # 9 matches as much as either, alone
    lex = [(9, 5.0), (2, 4.8), (1, 4.7)]
    vec = [(1, 0.50), (9, 0.45), (2, 0.44)]
    assert order(retrieval.fuse(lex, vec))[0] == 9
    assert order(window_fuse(lex, vec, pairs({1: [2], 2: [1]})))[0] == 1


def test_a_neighbour_that_was_no_candidate_enters_through_its_window() -> None:
    lex = [(4, 3.0), (8, 2.9)]
    vec = [(4, 0.6), (8, 0.59)]
    ranked = window_fuse(lex, vec, pairs({4: [5], 8: []}))
    assert 5 in order(ranked)
    assert order(ranked)[0] == 4


def test_only_the_neighbours_the_caller_gives_are_asked_for_the_best_rows() -> None:
    asked: list[int] = []

    def neighbours(rowids: Sequence[int]) -> Mapping[int, Sequence[int]]:
        asked.extend(rowids)
        return {}

    lex = [(r, 100.0 - r) for r in range(1, 80)]
    vec = [(r, 1.0 - r / 100) for r in range(100, 180)]
    window_fuse(lex, vec, neighbours, top=50)
    assert sorted(asked) == list(range(1, 51)) + list(range(100, 150))


def test_a_window_hit_ranks_both_of_its_turns_the_later_first_each_at_its_best_window() -> None:
    from mentis.retrieval.window import pair_hits

    # windows are keyed by their later turn: 8 holds 7 and 8; 9 holds 8 and 9
    assert pair_hits([(8, 3.0), (9, 2.0)]) == [(8, 3.0), (7, 3.0), (9, 2.0)]


def test_without_window_hits_the_pair_fusion_changes_nothing() -> None:
    from mentis.retrieval.window import fuse_pairs

    ranked = retrieval.fuse([(3, 9.0), (1, 7.5)], [(1, 0.8), (5, 0.7)])
    assert [(s.rowid, s.fused) for s in fuse_pairs(ranked, [])] == [(s.rowid, s.fused) for s in ranked]


def test_a_pair_that_answers_across_two_turns_rises_and_its_earlier_turn_enters() -> None:
    from mentis.retrieval.window import fuse_pairs

    ranked = retrieval.fuse([(9, 5.0), (2, 4.8)], [(9, 0.5), (2, 0.44)])
    assert order(ranked) == [9, 2]
    fused = fuse_pairs(ranked, [(2, 6.0)])  # the window of 1 and 2 matches the whole question
    assert order(fused)[:1] == [2] and 1 in order(fused)
