"""An in-process vector index: cosine by dot product over unit vectors.

Rows are unit vectors keyed by the attempt's store rowid, with the repository as a small
integer code so a repository filter is a mask. The owning store feeds it rows and tells it when
another process changed the file.

Up to ``QUANTIZE_MIN_ROWS`` rows the matrix is float32 and a query is one exact matrix-vector
product (at 100k × 384, ~40 M multiply-adds) plus a partial sort. From that size on, rows are kept
as int8 with one float32 scale per row (a quarter of the memory: 1M × 384 is 384 MB instead of
1.5 GB): the int8 scan (:mod:`mentis.index.int8scan`) picks ``RESCORE_FACTOR`` × ``limit``
candidates, and the owner's ``exact`` callback re-scores them with their float32 vectors read from
the store, so the scores returned are exact and only the candidate set is approximate.

From ``PREFILTER_MIN_ROWS`` rows on (an int8 index), the int8 scan itself covers only the rows
nearest the query by the Hamming distance of their coordinates' signs
(:mod:`mentis.index.signbits`: 1% of the rows, or 64 per result asked for if more), so the
costly part of the scan no longer reads the whole matrix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np

from mentis.index import signbits
from mentis.index.int8scan import int8_dots

QUANTIZE_MIN_ROWS = 250_000
"""From this many rows on, the in-process matrix is int8 (see the module docstring)."""
PREFILTER_MIN_ROWS = QUANTIZE_MIN_ROWS
"""From this many rows on (and only on an int8 index), the sign-bit prefilter picks the rows the
int8 scan scores. Below it the float32 scan costs ≤ ~10 ms, so nothing is worth trading for recall."""
RESCORE_FACTOR = 4
"""Candidates the int8 scan hands to the exact float32 re-score, per result asked for."""

Exact = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""Given rowids, their exact float32 vectors: ``(rowids found, matrix)`` (a row forgotten meanwhile
is left out)."""


class RepositoryCodes(dict[str, int]):
    """Repository name → a small integer, so an index keeps one int32 per row and filters by a
    mask (shared by the vector and lexical indexes)."""

    def code(self, repository: str) -> int:
        found = self.get(repository)
        if found is None:
            found = self[repository] = len(self)
        return found

    def mask(self, repositories: Sequence[str] | None, codes: np.ndarray) -> np.ndarray | None:
        """Which of the rows with these ``codes`` belong to ``repositories``: None when every row
        does (no filter, or the list names every repository the index holds), else a bool mask."""
        if repositories is None:
            return None
        if isinstance(repositories, str):  # a str is a Sequence[str] of its letters
            raise TypeError("repositories must be a list of names, not one string")
        wanted = {c for r in repositories if (c := self.get(r)) is not None}
        if len(wanted) == len(self):
            return None
        table = np.zeros(max(len(self), 1), dtype=bool)
        table[list(wanted)] = True
        selected: np.ndarray = table[codes]
        return selected


def quantize(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows as int8 and one scale each: ``row ≈ q * scale`` with ``|q| ≤ 127``."""
    peak = np.abs(vectors).max(axis=1)
    scales = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    q = np.rint(vectors / scales[:, None]).astype(np.int8)
    return q, scales


class VectorIndex:
    def __init__(
        self, dim: int, quantize_min_rows: int | None = None, prefilter_min_rows: int | None = None
    ) -> None:
        self.dim = dim
        self.quantize_min_rows = QUANTIZE_MIN_ROWS if quantize_min_rows is None else quantize_min_rows
        self.prefilter_min_rows = PREFILTER_MIN_ROWS if prefilter_min_rows is None else prefilter_min_rows
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        self._matrix = np.zeros((0, self.dim), dtype=np.float32)
        self._scales = np.zeros(0, dtype=np.float32)
        self._rowids = np.zeros(0, dtype=np.int64)
        self._codes = np.zeros(0, dtype=np.int32)
        self._bits = np.zeros((signbits.words(self.dim), 0), dtype=np.uint64)  # int8 index only
        self._size = 0
        self._repos = RepositoryCodes()
        self.max_rowid = 0

    def __len__(self) -> int:
        return self._size

    @property
    def quantized(self) -> bool:
        return self._matrix.dtype == np.int8

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows in all (a bulk load knows its size: the matrix is allocated
        once, in its final form, instead of doubling through copies)."""
        with self._lock:
            self._grow(rows)

    def _grow(self, need: int) -> None:
        quantize_now = need >= self.quantize_min_rows and not self.quantized
        if need <= len(self._rowids) and not quantize_now:
            return
        cap = max(need, len(self._rowids) if quantize_now else 2 * len(self._rowids), 1024)
        n = self._size
        dtype = np.int8 if need >= self.quantize_min_rows else np.float32
        matrix = np.zeros((cap, self.dim), dtype=dtype)
        if quantize_now:
            scales = np.ones(cap, dtype=np.float32)
            for lo in range(0, n, 65_536):
                hi = min(n, lo + 65_536)
                matrix[lo:hi], scales[lo:hi] = quantize(self._matrix[lo:hi])
        else:
            matrix[:n] = self._matrix[:n]
            scales = np.ones(cap, dtype=np.float32)
            scales[:n] = self._scales[:n]
        ids = np.zeros(cap, dtype=np.int64)
        ids[:n] = self._rowids[:n]
        codes = np.zeros(cap, dtype=np.int32)
        codes[:n] = self._codes[:n]
        if dtype == np.int8:
            bits = np.zeros((len(self._bits), cap), dtype=np.uint64)
            if quantize_now:
                for lo in range(0, n, 65_536):
                    bits[:, lo : min(n, lo + 65_536)] = signbits.pack(matrix[lo : min(n, lo + 65_536)])
            else:
                bits[:, :n] = self._bits[:, :n]
            self._bits = bits
        self._matrix, self._scales, self._rowids, self._codes = matrix, scales, ids, codes

    def add(self, rowids: list[int], repositories: list[str], vectors: np.ndarray) -> None:
        if not rowids:
            return
        with self._lock:
            self._grow(self._size + len(rowids))
            end = self._size + len(rowids)
            if self.quantized:
                self._matrix[self._size : end], self._scales[self._size : end] = quantize(vectors)
                self._bits[:, self._size : end] = signbits.pack(self._matrix[self._size : end])
            else:
                self._matrix[self._size : end] = vectors
            self._rowids[self._size : end] = rowids
            self._codes[self._size : end] = [self._repos.code(r) for r in repositories]
            self._size = end
            self.max_rowid = max(self.max_rowid, max(rowids))

    def remove(self, rowids: Sequence[int]) -> None:
        """Drop rows in place: each is replaced by the last row (order is not kept; ties are
        broken by rowid when searching)."""
        with self._lock:
            for rowid in rowids:
                hits = np.flatnonzero(self._rowids[: self._size] == rowid)
                if len(hits) == 0:
                    continue
                i = int(hits[0])
                last = self._size - 1
                self._matrix[i] = self._matrix[last]
                self._scales[i] = self._scales[last]
                self._rowids[i] = self._rowids[last]
                self._codes[i] = self._codes[last]
                if self.quantized:
                    self._bits[:, i] = self._bits[:, last]
                self._size = last

    def _scan(self, query: np.ndarray, positions: np.ndarray | None, n: int) -> np.ndarray:
        """Scores of the rows at ``positions`` of an int8 index (None: the first ``n``; int8
        scores are approximate)."""
        if not self.quantized:  # a float32 index: always a full scan
            scores: np.ndarray = self._matrix[:n] @ query
            return scores
        if positions is None:
            out = int8_dots(self._matrix[:n], query)
            out *= self._scales[:n]
        else:
            out = int8_dots(np.take(self._matrix, positions, axis=0), query)  # take: 2.7x [] here
            out *= self._scales[positions]
        return out

    def search(
        self,
        query: np.ndarray,
        repositories: Sequence[str] | None,
        limit: int,
        exact: Exact | None = None,
    ) -> list[tuple[int, float]]:
        """The ``limit`` nearest rows of ``repositories`` (None: all), best first: candidates are
        drawn within them before the limit, so rows elsewhere never take a rank. On an int8 index,
        ``exact`` re-scores the candidates with their float32 vectors (without it, the int8 scores
        are returned)."""
        q = query.astype(np.float32, copy=False)
        with self._lock:
            n = self._size
            if n == 0:
                return []
            rescore = exact is not None and self.quantized
            mask = self._repos.mask(repositories, self._codes[:n])
            positions: np.ndarray | None = None
            if self.quantized and n >= self.prefilter_min_rows:
                positions = signbits.nearest(self._bits, q, n, mask, limit)
            scores = self._scan(q, positions, n)
            if positions is None and mask is not None:  # a full scan: rows out of scope drop out
                scores = np.where(mask, scores, -np.inf)
            m = len(scores)
            k = min(limit * RESCORE_FACTOR if rescore else limit, m)
            top = np.argpartition(-scores, k - 1)[:k] if k < m else np.arange(m)
            top = top[scores[top] > -np.inf]
            at = top if positions is None else positions[top]
            rowids, found = self._rowids[at], scores[top]
        if rescore and exact is not None:
            rowids, matrix = exact(rowids)
            found = matrix @ q if len(rowids) else np.zeros(0, dtype=np.float32)
        order = np.lexsort((rowids, -found))[:limit]  # best first, equal scores in rowid order
        return [(int(r), float(s)) for r, s in zip(rowids[order], found[order], strict=True)]
