"""A one-bit-per-dimension prefilter for a large int8 vector index.

Each row keeps the signs of its coordinates, packed 64 to a word and stored word-major (one
contiguous array of ``n`` words per 64 dimensions), so a query's Hamming distances to every row are
``dim / 64`` passes of xor and popcount over ``8n`` bytes: 48 bytes a row at 384 dimensions, an
eighth of the int8 scan's memory traffic (~4 ms at 1M rows on this machine, against ~55 ms for
the int8 scan). The Hamming distance between sign vectors estimates the angle between unit
vectors, so the nearest by Hamming are mostly the nearest by cosine; only they go on to the int8
scan, then the owner's exact float32 re-score.

How many go on (``keep``): ``KEEP_SHARE`` of the rows, and at least ``KEEP_PER_RESULT`` per result
asked for. Both were chosen on real embeddings (``bench/ivf_recall.py``: recall@10 and @200 of the
final results against the exact scan, held-out real queries). An inverted file (k-means lists,
probe the nearest) was built first and measured on the same vectors: at a sixteenth of the rows
scanned its recall@10 was 0.79 and at an eighth 0.89 (10k rows), where this prefilter keeping
1% had 0.98; it also cost ~3 s of k-means at every 1M preload. A search limited to some
repositories ranks only their rows (the others get the largest distance); a scope no larger than
``keep`` is scanned whole.
"""

from __future__ import annotations

import math

import numpy as np

KEEP_SHARE = 1 / 100
"""Share of the rows (in scope) the prefilter hands to the int8 scan."""
KEEP_PER_RESULT = 64
"""And at least this many per result asked for (search asks the vector side for 200)."""
WORD = 64


def words(dim: int) -> int:
    return math.ceil(dim / WORD)


def pack(rows: np.ndarray) -> np.ndarray:
    """The sign words of ``rows`` (float or int8, n × dim): ``words(dim) × n`` uint64, bit set where
    the coordinate is positive (padding bits are zero in every row and every query alike)."""
    n, dim = rows.shape
    padded = np.zeros((n, words(dim) * WORD), dtype=bool)
    padded[:, :dim] = rows > 0
    packed = np.packbits(padded, axis=1, bitorder="little").view(np.uint64)
    return np.ascontiguousarray(packed.T)


def keep_count(n: int, limit: int) -> int:
    return max(math.ceil(n * KEEP_SHARE), KEEP_PER_RESULT * limit)


def _popcount(x: np.ndarray) -> np.ndarray:
    """Set bits per uint64 (numpy ≥ 2 has a kernel for it; 1.26 counts bytes through a table)."""
    if hasattr(np, "bitwise_count"):
        counted: np.ndarray = np.bitwise_count(x)
        return counted
    table: np.ndarray = _BYTE_BITS[x.view(np.uint8)].reshape(-1, 8).sum(axis=1, dtype=np.uint8)
    return table


_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def distances(bits: np.ndarray, query: np.ndarray, n: int) -> np.ndarray:
    """Hamming distances of the first ``n`` rows' sign words to ``query``'s (uint16)."""
    q = pack(query.reshape(1, -1))[:, 0]
    out = _popcount(bits[0, :n] ^ q[0]).astype(np.uint16)
    for w in range(1, len(q)):
        out += _popcount(bits[w, :n] ^ q[w])
    return out


def nearest(
    bits: np.ndarray, query: np.ndarray, n: int, scope: np.ndarray | None, limit: int
) -> np.ndarray | None:
    """Positions of the rows the int8 scan should score for the ``limit`` best: the ``keep`` nearest
    by Hamming distance, with any tied at the last distance (within ``scope``, a bool mask, when
    given); the whole scope when it is no larger; None when that is every row."""
    keep = keep_count(n, limit)
    if scope is None and keep >= n:
        return None
    if scope is not None:
        inside = np.flatnonzero(scope)
        if len(inside) <= keep:
            return inside
    ham = distances(bits, query, n)
    far = len(bits) * WORD + 1  # beyond any distance
    if scope is not None:
        ham[~scope] = far
    # the distances are small integers: the cut from their histogram, then one pass (a quarter of
    # argpartition's time at 1M); rows tied at the cut all go on, so slightly more than ``keep``
    cut = int(np.searchsorted(np.cumsum(np.bincount(ham, minlength=far + 1)), keep))
    found: np.ndarray = np.flatnonzero(ham <= min(cut, far - 1))
    return found
