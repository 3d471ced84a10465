"""An exact in-process vector index: one float32 matrix, cosine by dot product.

Rows are unit vectors keyed by the attempt's store rowid, with the repository as a small
integer code so a repository filter is a mask. At 100k × 384 a query is one matrix-vector
product (~40 M multiply-adds) plus a partial sort. The owning store feeds it rows and tells
it when another process changed the file.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np


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


class VectorIndex:
    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        self._matrix = np.zeros((0, self.dim), dtype=np.float32)
        self._rowids = np.zeros(0, dtype=np.int64)
        self._codes = np.zeros(0, dtype=np.int32)
        self._size = 0
        self._repos = RepositoryCodes()
        self.max_rowid = 0

    def __len__(self) -> int:
        return self._size

    def add(self, rowids: list[int], repositories: list[str], vectors: np.ndarray) -> None:
        if not rowids:
            return
        with self._lock:
            need = self._size + len(rowids)
            if need > len(self._rowids):
                cap = max(need, 2 * len(self._rowids), 1024)
                matrix = np.zeros((cap, self.dim), dtype=np.float32)
                matrix[: self._size] = self._matrix[: self._size]
                ids = np.zeros(cap, dtype=np.int64)
                ids[: self._size] = self._rowids[: self._size]
                codes = np.zeros(cap, dtype=np.int32)
                codes[: self._size] = self._codes[: self._size]
                self._matrix, self._rowids, self._codes = matrix, ids, codes
            end = self._size + len(rowids)
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
                self._rowids[i] = self._rowids[last]
                self._codes[i] = self._codes[last]
                self._size = last

    def search(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """The ``limit`` nearest rows of ``repositories`` (None: all), best first: candidates are
        drawn within them before the limit, so rows elsewhere never take a rank."""
        with self._lock:
            n = self._size
            if n == 0:
                return []
            scores = self._matrix[:n] @ query.astype(np.float32, copy=False)
            mask = self._repos.mask(repositories, self._codes[:n])
            if mask is not None:
                scores = np.where(mask, scores, -np.inf)
            k = min(limit, n)
            top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
            rowids = self._rowids[top]
            order = np.lexsort((rowids, -scores[top]))  # best first, equal scores in rowid order
            top, rowids = top[order], rowids[order]
        return [(int(r), float(s)) for r, s in zip(rowids, scores[top], strict=True) if s > -np.inf]
