"""Sub-linear candidates for a large int8 vector index: an inverted file (IVF).

The rows are grouped around ``lists`` centroids (spherical k-means on a sample: rows and centroids
are unit vectors, so the nearest centroid is the one with the largest dot product). A query scores
the centroids, probes the nearest lists and scans only their rows with the int8 kernel; the
owner's exact float32 re-score then ranks the candidates, so scores stay exact and only the
candidate set is approximate (its recall against the exact scan is measured in
``bench/ivf_recall.py``).

Sizes, by one principle each:

- ``lists = ceil(sqrt(n) / 4)`` (250 at 1M rows). The textbook ``sqrt(n)`` balances the centroid
  scan (``lists`` products per query) against the list scan (``n / lists`` rows per probe). Here
  the query's cost is the rows scanned, a share of ``n`` set by the recall wanted, and the
  centroid scan is negligible either way (0.1 M products at 1M); what grows with ``lists`` is
  the preload, which assigns every row (``n × lists`` products: ~2.5 s of CPU at 1M with 250
  lists, 4.6 s with 500, measured on this 2-core machine under load). Fewer, larger lists also
  keep more recall at a given share scanned (fewer list boundaries), so the lists are a quarter
  of ``sqrt(n)``.
- A search probes lists nearest first until it has covered ``PROBE_SHARE`` of the rows (a budget
  in rows rather than a count of lists, so uneven lists do not matter), so it scans about the same
  share at every size. The share was chosen on real embeddings (``bench/ivf_recall.py``: recall@10
  and @200 of the candidates against the exact scan).
- And at least ``MIN_SCAN_PER_RESULT`` rows per result asked for: search asks the vector side for
  200 candidates (fused with the lexical ones), and a probe only ranks well the rows well inside
  what it scanned. At the shipped threshold (250k rows, 15.6k scanned) the share already exceeds
  it; on a small index forced onto this path it means a (near) full scan.
- A search limited to some repositories counts only their rows toward that budget, probing
  further lists in centroid order; when the scope has fewer rows than the budget, it scans the
  whole scope exactly (nothing to gain from probing).

Rows added later go to their nearest centroid; a removed row simply leaves. The centroids are
retrained (and every row reassigned) when the index has grown ``RETRAIN_GROWTH`` times past the
size they were trained on. Nothing is persisted: this is derived from the rows at load.
"""

from __future__ import annotations

import math

import numpy as np

LISTS_PER_SQRT_ROW = 0.25
"""``lists = ceil(sqrt(rows) × LISTS_PER_SQRT_ROW)`` (see the module docstring)."""
PROBE_SHARE = 1 / 16
"""Share of the rows a search scans, in whole lists nearest first (see the module docstring and
``bench/ivf_recall.py``)."""
MIN_SCAN_PER_RESULT = 64
"""And at least this many rows per result asked for (see the module docstring)."""
SAMPLE_PER_LIST = 40
"""Training sample rows per centroid (k-means is trained on a random sample of the rows)."""
ITERATIONS = 10
RETRAIN_GROWTH = 4
"""Retrain once the index holds this many times the rows the centroids were trained on."""
ASSIGN_CHUNK = 8_192
SEED = 15


def list_count(rows: int) -> int:
    return max(1, math.ceil(math.sqrt(rows) * LISTS_PER_SQRT_ROW))


def train(sample: np.ndarray, lists: int, iterations: int = ITERATIONS) -> np.ndarray:
    """Spherical k-means: ``lists`` unit centroids of the unit rows of ``sample`` (float32)."""
    rng = np.random.default_rng(SEED)
    lists = min(lists, len(sample))
    centroids = sample[rng.choice(len(sample), lists, replace=False)].copy()
    for _ in range(iterations):
        nearest = (sample @ centroids.T).argmax(axis=1)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, sample)
        counts = np.bincount(nearest, minlength=lists)
        empty = np.flatnonzero(counts == 0)
        if len(empty):  # reseed an empty list with rows of the largest list
            donors = np.flatnonzero(nearest == counts.argmax())
            sums[empty] = sample[rng.choice(donors, len(empty), replace=len(donors) < len(empty))]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        centroids = (sums / np.where(norms > 0, norms, 1.0)).astype(np.float32)
    return centroids


class InvertedFile:
    """Trained centroids and the probe rule (the owning index keeps each row's list number)."""

    def __init__(self, centroids: np.ndarray, trained_rows: int) -> None:
        self.centroids = centroids
        self.lists = len(centroids)
        self.trained_rows = trained_rows

    @classmethod
    def fit(cls, rows: np.ndarray, scales: np.ndarray, n: int) -> InvertedFile:
        """Train on a sample of the first ``n`` int8 ``rows`` (dequantized with ``scales``)."""
        lists = list_count(n)
        rng = np.random.default_rng(SEED)
        take = np.sort(rng.choice(n, min(n, lists * SAMPLE_PER_LIST), replace=False))
        sample = rows[take].astype(np.float32) * scales[take, None]
        sample /= np.maximum(np.linalg.norm(sample, axis=1, keepdims=True), 1e-12)
        return cls(train(sample, lists), n)

    def stale(self, n: int) -> bool:
        return n >= RETRAIN_GROWTH * self.trained_rows

    def assign_int8(self, rows: np.ndarray) -> np.ndarray:
        """Each int8 row's list (a positive per-row scale does not change which is nearest; the
        blocks go through float32 because numpy's float product is about twice onnxruntime's
        ``MatMulInteger`` on a matrix of centroids, measured)."""
        out = np.empty(len(rows), dtype=np.int16)
        for lo in range(0, len(rows), ASSIGN_CHUNK):
            block = rows[lo : lo + ASSIGN_CHUNK].astype(np.float32)
            out[lo : lo + len(block)] = (block @ self.centroids.T).argmax(axis=1)
        return out

    def assign(self, vectors: np.ndarray) -> np.ndarray:
        """Each float32 row's list."""
        nearest: np.ndarray = (vectors @ self.centroids.T).argmax(axis=1).astype(np.int16)
        return nearest

    def candidates(
        self, query: np.ndarray, assign: np.ndarray, sizes: np.ndarray, scope: np.ndarray | None, limit: int
    ) -> np.ndarray | None:
        """Positions of the rows to scan for the ``limit`` best: the rows of the lists nearest
        ``query`` until at least :meth:`budget` rows are covered (``assign`` holds each row's
        list, ``sizes`` each list's row count), counting only rows in ``scope`` (positions) when
        given; the whole scope when it is that small; None when the budget is every row (scan
        all)."""
        n = len(assign)
        budget = self.budget(n, limit)
        if scope is None and budget >= n:
            return None
        if scope is not None and len(scope) <= budget:
            return scope
        order = np.argsort(-(self.centroids @ query), kind="stable")
        in_lists = assign if scope is None else assign[scope]
        counts = sizes if scope is None else np.bincount(in_lists, minlength=self.lists)
        take = int(np.searchsorted(np.cumsum(counts[order]), budget)) + 1
        probed = np.zeros(self.lists, dtype=bool)
        probed[order[:take]] = True
        hit = np.flatnonzero(probed[in_lists])
        return hit if scope is None else scope[hit]

    @staticmethod
    def budget(n: int, limit: int) -> int:
        """Rows to scan among ``n`` for the ``limit`` best (see the module docstring)."""
        return max(math.ceil(n * PROBE_SHARE), MIN_SCAN_PER_RESULT * limit)
