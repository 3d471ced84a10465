"""Scores of a ranking: recall at k, MRR, paired differences with a bootstrap interval, latency."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

KS = (1, 5, 10)


def rank_of(ranked: Sequence[str], query_id: str, target: str) -> int | None:
    """1-based rank of ``target`` once the query's own task is dropped (None if absent)."""
    ranked = [t for t in ranked if t != query_id]
    try:
        return ranked.index(target) + 1
    except ValueError:
        return None


def metrics(ranks: Sequence[int | None], ks: Sequence[int] = KS) -> dict[str, float]:
    n = len(ranks)
    out = {f"R@{k}": sum(1 for r in ranks if r is not None and r <= k) / n for k in ks}
    out["MRR"] = sum(1.0 / r for r in ranks if r is not None) / n
    return out


RESAMPLES = 2000
"""Bootstrap resamples of the queries for every interval (fixed seed, so a rerun prints the same)."""


def bootstrap_ci(deltas: np.ndarray, resamples: int = RESAMPLES, seed: int = 0) -> list[float]:
    """95% percentile interval of the mean of per-query ``deltas``, resampling queries with
    replacement (paired: each resample keeps a query's two systems together)."""
    if len(deltas) == 0:
        return [0.0, 0.0]
    rng = np.random.default_rng(seed)
    boot = deltas[rng.integers(0, len(deltas), size=(resamples, len(deltas)))].mean(axis=1)
    return [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]


def paired(
    base: Sequence[int | None], other: Sequence[int | None], seed: int = 0, ks: Sequence[int] = (5, 10)
) -> dict[str, Any]:
    """How ``other`` differs from ``base`` query by query: top-k gains and losses, and the
    differences of R@k and MRR, each with a paired bootstrap 95% interval over queries
    (:data:`RESAMPLES` resamples, fixed seed; the same resamples for every metric)."""
    rr = lambda r: 0.0 if r is None else 1.0 / r  # noqa: E731
    inside = lambda r, k: r is not None and r <= k  # noqa: E731
    out: dict[str, Any] = {}
    for k in ks:
        out[f"top{k}_gained"] = sum(
            1 for a, b in zip(base, other, strict=True) if inside(b, k) and not inside(a, k)
        )
        out[f"top{k}_lost"] = sum(
            1 for a, b in zip(base, other, strict=True) if inside(a, k) and not inside(b, k)
        )
        deltas = np.array(
            [float(inside(b, k)) - float(inside(a, k)) for a, b in zip(base, other, strict=True)]
        )
        out[f"r{k}_delta"] = float(deltas.mean()) if len(deltas) else 0.0
        out[f"r{k}_delta_ci95"] = bootstrap_ci(deltas, seed=seed)
    deltas = np.array([rr(b) - rr(a) for a, b in zip(base, other, strict=True)])
    out["mrr_delta"] = float(deltas.mean()) if len(deltas) else 0.0
    out["mrr_delta_ci95"] = bootstrap_ci(deltas, seed=seed)
    return out


def ci_text(delta: float, ci: Sequence[float]) -> str:
    """``+0.012 [-0.004, +0.030]``: a difference and its interval, as every table prints it."""
    return f"{delta:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class Method:
    name: str
    note: str
    rankings: dict[str, list[Any]] = field(default_factory=dict)  # query id -> results, best first
    latencies_ms: list[float] = field(default_factory=list)

    def latency(self) -> dict[str, float]:
        if not self.latencies_ms:
            return {}
        return {"p50_ms": percentile(self.latencies_ms, 0.50), "p95_ms": percentile(self.latencies_ms, 0.95)}

    def result(self, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        ranks = [rank_of(self.rankings[q], q, d) for q, d in pairs]
        out: dict[str, Any] = {"method": self.name, "note": self.note, **metrics(ranks), **self.latency()}
        out["ranks"] = {f"{q}->{d}": r for (q, d), r in zip(pairs, ranks, strict=True)}
        return out


def timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``fn(*args)`` and its wall time in milliseconds."""
    t0 = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - t0) * 1000.0
