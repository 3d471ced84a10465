"""bench/evaluation/metrics.py: the paired bootstrap intervals every eval difference is printed with."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))

from evaluation.metrics import paired


def test_identical_rankings_differ_by_zero_with_a_zero_interval() -> None:
    ranks = [1, 3, None, 12, 2]
    out = paired(ranks, ranks)
    assert out["r10_delta"] == 0.0 and out["r10_delta_ci95"] == [0.0, 0.0]
    assert out["mrr_delta"] == 0.0 and out["mrr_delta_ci95"] == [0.0, 0.0]


def test_a_gain_on_every_query_has_an_interval_above_zero() -> None:
    base = [None] * 40 + [20] * 40
    other = [1] * 40 + [5] * 40
    out = paired(base, other)
    assert out["r10_delta"] == 1.0 and out["top10_gained"] == 80 and out["top10_lost"] == 0
    lo, hi = out["mrr_delta_ci95"]
    assert 0 < lo <= out["mrr_delta"] <= hi


def test_a_gain_on_few_queries_has_an_interval_that_holds_zero() -> None:
    base = [None] * 50
    other = [1] + [None] * 49
    out = paired(base, other)
    assert out["r10_delta"] == 0.02
    lo, hi = out["r10_delta_ci95"]
    assert lo == 0.0 and hi > 0.02


def test_the_interval_is_the_same_on_a_rerun() -> None:
    base = [1, None, 4, 15, 2, 9, None, 3]
    other = [2, 3, None, 1, 2, 12, 7, 3]
    assert paired(base, other) == paired(base, other)
