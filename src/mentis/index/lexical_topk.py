"""The ``limit`` best BM25 scores without scoring every posting (MaxScore), exactly.

A term's postings come in pieces, one per tf tier (:data:`TIERS`), and each piece has an upper
bound on what it can add to any document's score (``coef · tf_max / (tf_max + norm_min)``, from
the piece's largest weighted tf and the shortest document); a document is in one piece of a term
at most. Pieces are taken by decreasing bound (rare terms and high tfs first, their lists short)
and scored over their whole lists ("essential" pieces) until a threshold θ, which at least
``limit`` documents are known to reach, exceeds what the pieces left can add (per term, the bound
of its best piece left): a document found in none of the pieces scored so far cannot reach θ, so
it cannot rank. The pieces left (common words at tf 1, the longest lists) are then added only for
the documents still in the running, found by binary search, and a document is dropped as soon as
its partial score plus what is left falls below θ.

θ is first the least of the ``limit`` best partial scores, then the least full score of those
documents (their other pieces looked up): scores that ``limit`` documents do reach.

The result is exact, ties included: every document that can score at least θ is kept (bounds and
comparisons carry a relative slack far above floating-point rounding), and the survivors'
scores are recomputed term by term in query order, so each is the same sum of the same float64
contributions, added in the same order, as exhaustive term-at-a-time scoring gives. A query with
few postings in all is scored exhaustively, in query order (``prune=False``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

K1 = 1.2
B = 0.75
SLACK = 1e-9
"""Relative margin on bounds and thresholds: rounding moves a sum of 64 contributions by ~1e-14."""
LOOKUP_FACTOR = 8
"""A term is added by binary search when ``candidates · log2(list) < LOOKUP_FACTOR · list``,
else by one pass over its whole list (a scatter costs ~8 binary-search steps per posting)."""


TIERS = (1.0, 2.0)
"""Each term's postings are kept in tiers by weighted tf (≤ 1, ≤ 2, above): most postings have a
tf of 1, and the tier holding them is bounded far below what the term's largest tf allows."""


@dataclass(slots=True)
class Piece:
    """Some postings of a term: ``docs`` ascending, ``tf`` their weighted tfs, ``tf_max`` ≥ each."""

    docs: np.ndarray
    tf: np.ndarray
    tf_max: float

    def where(self, keep: np.ndarray) -> Piece:
        return Piece(self.docs[keep], self.tf[keep], self.tf_max)


@dataclass(slots=True)
class Term:
    """One distinct query term: ``coef`` = qtf · idf · (k1 + 1) and its postings over the
    documents searched, in pieces no two of which hold the same document."""

    coef: float
    pieces: list[Piece]


def contributions(coef: float, tf: np.ndarray, lengths: np.ndarray, avgdl: float) -> np.ndarray:
    """A term's BM25 contribution to documents of these ``lengths`` (the float64 expression that
    exhaustive scoring evaluates, operation for operation)."""
    tf64 = tf.astype(np.float64)
    norm = K1 * (1.0 - B + B * lengths / avgdl)
    out: np.ndarray = coef * tf64 / (tf64 + norm)
    return out


def _find(postings: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``docs`` are in ``postings`` (ascending), and where."""
    if not len(postings) or not len(docs):
        return np.zeros(len(docs), dtype=bool), np.zeros(0, dtype=np.intp)
    pos = np.searchsorted(postings, docs)
    np.minimum(pos, len(postings) - 1, out=pos)
    hit = postings[pos] == docs
    return hit, pos[hit]


class Scratch:
    """Buffers one index reuses across queries (its lock serialises them): ``acc`` holds partial
    scores and ``seen`` marks the documents that have one; a query zeroes what it touched."""

    def __init__(self) -> None:
        self.acc = np.zeros(0, dtype=np.float64)
        self.seen = np.zeros(0, dtype=bool)

    def ensure(self, size: int) -> None:
        if len(self.acc) < size:
            cap = max(size, 2 * len(self.acc), 1024)
            self.acc = np.zeros(cap, dtype=np.float64)
            self.seen = np.zeros(cap, dtype=bool)


@dataclass(slots=True)
class _Ranked:
    """A piece of term ``term`` (an index into the query's terms) and the most it adds to a score."""

    term: int
    bound: float
    docs: np.ndarray
    tf: np.ndarray


DENSE_MAX = 400_000
"""Up to this many postings in all, every one is scored (in query order, so the sums are the
final scores): pruning would cost more than it saves."""
THETA_REACH = 3.0
THETA_STEP = 0.85
"""θ is first the least of the ``limit`` best partial scores (free); the full scores of those
documents are computed once what the pieces left can add is within ``THETA_REACH`` of θ, and
again each time it has fallen by ``THETA_STEP`` since (each time costs a binary search per piece
left for each of ``limit`` documents)."""


def top_k(
    terms: Sequence[Term],
    lengths: np.ndarray,
    min_length: float,
    avgdl: float,
    limit: int,
    scratch: Scratch,
    prune: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Documents that may be among the ``limit`` best for ``terms`` (given in query order) and
    their exact scores; every document scoring at least the ``limit``-th best score is in, and
    none scoring 0. ``lengths`` are every document's lengths, ``min_length`` ≤ the shortest."""
    if not terms or limit <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    norm_min = K1 * (1.0 - B + B * min_length / avgdl)
    ps = [
        _Ranked(k, t.coef * p.tf_max / (p.tf_max + norm_min), p.docs, p.tf)
        for k, t in enumerate(terms)
        for p in t.pieces
        if p.tf_max > 0.0
    ]
    ps.sort(key=lambda p: -p.bound)
    # rest[i]: the most pieces i.. can add to one document (one piece per term at most)
    rest = [0.0] * (len(ps) + 1)
    most: dict[int, float] = {}
    for i in range(len(ps) - 1, -1, -1):
        p = ps[i]
        rest[i] = rest[i + 1] - most.get(p.term, 0.0) + p.bound
        most[p.term] = p.bound
    acc, seen = scratch.acc, scratch.seen
    touched: list[np.ndarray] = []  # documents with a partial score, each once
    dirty: list[np.ndarray] = []  # every document whose ``acc`` was written
    if not prune:
        try:
            for t in terms:  # query order, a piece of a term at a time: one addition per term
                for piece in t.pieces:
                    dirty.append(piece.docs)
                    acc[piece.docs] += contributions(t.coef, piece.tf, lengths[piece.docs], avgdl)
                    fresh = piece.docs[~seen[piece.docs]]
                    seen[fresh] = True
                    touched.append(fresh)
            cand = np.concatenate(touched) if touched else np.zeros(0, dtype=np.int64)
            scores = acc[cand]
            keep = scores != 0.0
            return _cut(cand[keep], scores[keep], limit)
        finally:
            _clean(acc, seen, dirty, touched)
    theta = 0.0
    try:
        i = 0
        best = np.zeros(0, dtype=np.int64)  # the ``limit`` best partial scores so far
        pending: list[np.ndarray] = []  # pieces scored since ``best`` was updated
        rest_then = rest[0]  # what was left when θ was last computed
        while i < len(ps):
            if theta > 0.0 and _under(rest[i], theta):
                break
            p = ps[i]
            dirty.append(p.docs)
            acc[p.docs] += contributions(terms[p.term].coef, p.tf, lengths[p.docs], avgdl)
            fresh = p.docs[~seen[p.docs]]
            seen[fresh] = True
            touched.append(fresh)
            pending.append(p.docs)
            i += 1
            if i == len(ps) or (len(best) == limit and rest[i] > THETA_REACH * theta):
                continue  # θ is far from stopping here: update the best documents later
            # none outside the best ones and the pieces scored since gained
            best = _best(acc, best, np.concatenate(pending), limit)
            pending.clear()
            if len(best) < limit:
                continue
            theta = max(theta, float(acc[best].min()))  # partial scores: a lower bound
            if rest[i] <= THETA_REACH * theta and rest[i] <= THETA_STEP * rest_then:
                theta = max(theta, _threshold(ps[i:], terms, acc, best, lengths, avgdl))
                rest_then = rest[i]
        if pending:
            best = _best(acc, best, np.concatenate(pending), limit)
        if len(best) == limit:
            theta = max(theta, _threshold(ps[i:], terms, acc, best, lengths, avgdl))
        cand = np.concatenate(touched) if touched else np.zeros(0, dtype=np.int64)
        part = acc[cand]  # from here on partial scores live in ``part``; ``acc`` is emptied
        for docs in dirty:
            acc[docs] = 0.0
        dirty.clear()
        keep = ~_below(part + rest[i], theta)
        cand, part = cand[keep], part[keep]
        for j in range(i, len(ps)):
            p = ps[j]
            coef = terms[p.term].coef
            size = len(p.docs)
            if len(cand) * max(1, size.bit_length()) < LOOKUP_FACTOR * size:
                hit, pos = _find(p.docs, cand)
                part[hit] += contributions(coef, p.tf[pos], lengths[cand[hit]], avgdl)
            else:  # one pass over the piece, through ``acc``
                dirty.append(p.docs)
                acc[p.docs] = contributions(coef, p.tf, lengths[p.docs], avgdl)
                part += acc[cand]
                acc[p.docs] = 0.0
            keep = ~_below(part + rest[j + 1], theta)
            if not keep.all():
                cand, part = cand[keep], part[keep]
        scores = np.zeros(len(cand), dtype=np.float64)
        for t in terms:  # query order: the additions exhaustive scoring makes, in its order
            for piece in t.pieces:  # (a document is in one piece of a term at most)
                hit, pos = _find(piece.docs, cand)
                scores[hit] += contributions(t.coef, piece.tf[pos], lengths[cand[hit]], avgdl)
        keep = scores != 0.0
        return _cut(cand[keep], scores[keep], limit)
    finally:
        _clean(acc, seen, dirty, touched)


def _clean(acc: np.ndarray, seen: np.ndarray, dirty: list[np.ndarray], touched: list[np.ndarray]) -> None:
    """Leave the scratch arrays as a search found them: zero where it added, unseen where it saw."""
    for docs in dirty:
        acc[docs] = 0.0
    for docs in touched:
        seen[docs] = False


def _below(values: np.ndarray, theta: float) -> np.ndarray:
    """Which scores bounded by ``values`` are surely under ``theta`` (rounding allowed for)."""
    below: np.ndarray = values * (1.0 + SLACK) < theta * (1.0 - SLACK)
    return below


def _under(value: float, theta: float) -> bool:
    """:func:`_below` for one bound."""
    return value * (1.0 + SLACK) < theta * (1.0 - SLACK)


def _cut(docs: np.ndarray, scores: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The documents scoring at least the ``limit``-th best score (ties at the cut kept)."""
    if len(docs) <= limit:
        return docs, scores
    kth = -np.partition(-scores, limit - 1)[limit - 1]
    keep = scores >= kth
    return docs[keep], scores[keep]


def _best(acc: np.ndarray, best: np.ndarray, docs: np.ndarray, limit: int) -> np.ndarray:
    """The (at most) ``limit`` documents with the best ``acc`` among ``best`` and ``docs``."""
    if len(docs) > limit:
        docs = docs[np.argpartition(-acc[docs], limit - 1)[:limit]]
    pool = np.union1d(best, docs)
    if len(pool) > limit:
        pool = pool[np.argpartition(-acc[pool], limit - 1)[:limit]]
    return pool


def _threshold(
    left: Sequence[_Ranked],
    terms: Sequence[Term],
    acc: np.ndarray,
    top: np.ndarray,
    lengths: np.ndarray,
    avgdl: float,
) -> float:
    """A score that the documents ``top`` all reach: the least of their full scores (their
    partial ones in ``acc`` plus the ``left`` pieces, looked up)."""
    top = np.sort(top)
    full = acc[top]  # a copy (fancy indexing)
    for p in left:
        hit, pos = _find(p.docs, top)
        full[hit] += contributions(terms[p.term].coef, p.tf[pos], lengths[top[hit]], avgdl)
    return float(full.min())


__all__ = ["TIERS", "Piece", "Scratch", "Term", "contributions", "top_k"]
