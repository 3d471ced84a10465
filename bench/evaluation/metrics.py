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


def paired(base: Sequence[int | None], other: Sequence[int | None], seed: int = 0) -> dict[str, Any]:
    """How ``other`` differs from ``base`` query by query: top-5/10 gains and losses, MRR delta
    with a paired bootstrap 95% interval (2,000 resamples, fixed seed)."""
    rr = lambda r: 0.0 if r is None else 1.0 / r  # noqa: E731
    inside = lambda r, k: r is not None and r <= k  # noqa: E731
    out: dict[str, Any] = {}
    for k in (5, 10):
        out[f"top{k}_gained"] = sum(
            1 for a, b in zip(base, other, strict=True) if inside(b, k) and not inside(a, k)
        )
        out[f"top{k}_lost"] = sum(
            1 for a, b in zip(base, other, strict=True) if inside(a, k) and not inside(b, k)
        )
    deltas = np.array([rr(b) - rr(a) for a, b in zip(base, other, strict=True)])
    rng = np.random.default_rng(seed)
    boot = deltas[rng.integers(0, len(deltas), size=(2000, len(deltas)))].mean(axis=1)
    out["mrr_delta"] = float(deltas.mean())
    out["mrr_delta_ci95"] = [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
    return out


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
