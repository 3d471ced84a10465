"""The frozen segments of a :class:`~mentis.index.lexical.LexicalIndex`: a run of documents'
postings grouped by term and tf tier, compact, and read back as arrays."""

from __future__ import annotations

import sys

import numpy as np

from mentis.index import lexical_topk

_LITTLE = sys.byteorder == "little"


class Segment:
    """Postings of a run of documents, grouped by term and, within a term, by tf tier
    (``lexical_topk.TIERS``): ``terms`` (sorted, unique) and, for ``terms[i]``, tier ``k``'s
    documents ``first + docs[cuts[i, k]:cuts[i, k + 1]]`` (ascending) with weighted tfs
    ``weights[…]``, the largest of them ``tier_max[i, k]``.

    Compact, since a 1M-document index holds ~100M postings: documents are numbered within the
    segment (uint16, as a segment holds at most ``SEGMENT_DOCS`` ≤ 65,536 of them), and weights
    are float16 when every weight of the segment is exactly a float16 (attempts' field weights are
    multiples of 0.5), so a posting takes 4 bytes instead of 8 and every score is unchanged."""

    __slots__ = ("cuts", "docs", "first", "terms", "tier_max", "weights")

    def __init__(self, first: int, counts: np.ndarray, postings: np.ndarray) -> None:
        local = np.uint16 if len(counts) <= 1 << 16 else np.int32
        docs = np.repeat(np.arange(len(counts), dtype=local), counts)
        raw = np.ascontiguousarray(postings["w"])
        tiers = len(lexical_topk.TIERS) + 1
        tier = np.zeros(len(raw), dtype=np.uint8)  # tf ≤ 1 → 0, ≤ 2 → 1, above → 2
        for bound in lexical_topk.TIERS:
            tier += raw > bound
        self.first = first
        self.docs: np.ndarray
        self.weights: np.ndarray
        half = raw.astype(np.float16)
        top_key = (int(postings["t"].max()) + 1) * tiers if len(raw) else 0
        key: np.ndarray
        if local is np.uint16 and np.array_equal(half, raw) and top_key <= 1 << 32 and _LITTLE:
            # (term, tier, document, weight) packed in one uint64: a plain sort, ~3x an argsort's
            # speed, built in place (a segment's temporaries set the bulk load's peak memory)
            packed = postings["t"].astype(np.uint64)
            packed *= np.uint64(tiers)
            packed += tier
            del tier
            packed <<= np.uint64(32)
            part = docs.astype(np.uint64)
            part <<= np.uint64(16)
            packed |= part
            part[:] = half.view(np.uint16)
            packed |= part
            del part, half
            packed.sort()
            words = packed.view(np.uint16).reshape(-1, 4)  # little-endian: weight, document, key
            self.weights = words[:, 0].copy().view(np.float16)
            self.docs = words[:, 1].copy()
            key = packed.view(np.uint32)[1::2]  # the high half: term × tiers + tier
            weights = self.weights.astype(np.float32)
        else:
            key = postings["t"].astype(np.int64) * tiers + tier
            order = np.argsort(key, kind="stable")  # documents stay ascending within a term's tier
            key = key[order]
            self.docs = docs[order]
            weights = raw[order]
            self.weights = half[order] if np.array_equal(half, raw) else weights
        starts = np.flatnonzero(np.diff(key)) + 1
        group = np.concatenate([[0], starts]).astype(np.int64) if len(key) else starts
        group_term, group_tier = np.divmod(key[group], tiers)
        new_term = np.ones(len(group), dtype=bool)
        new_term[1:] = group_term[1:] != group_term[:-1]
        self.terms = group_term[new_term].astype(np.uint32)
        row = np.cumsum(new_term) - 1
        sizes = np.zeros((len(self.terms), tiers), dtype=np.int64)
        sizes[row, group_tier] = np.diff(np.concatenate([group, [len(key)]]))
        cuts = np.zeros((len(self.terms), tiers + 1), dtype=np.int64)
        np.cumsum(sizes, axis=1, out=cuts[:, 1:])
        cuts += group[new_term][:, None]
        self.cuts = cuts.astype(np.int32)
        self.tier_max = np.zeros((len(self.terms), tiers), dtype=np.float32)
        if len(group):
            self.tier_max[row, group_tier] = np.maximum.reduceat(weights, group)

    def row(self, term: int) -> int:
        """The row of ``term`` in ``terms`` (-1: not here)."""
        i = int(np.searchsorted(self.terms, term))
        return i if i < len(self.terms) and self.terms[i] == term else -1

    def find(self, term: int) -> tuple[int, int]:
        i = self.row(term)
        return (int(self.cuts[i, 0]), int(self.cuts[i, -1])) if i >= 0 else (0, 0)

    def docs_of(self, lo: int, hi: int) -> np.ndarray:
        """Document indexes (in the whole index) of postings ``lo:hi``."""
        docs = self.docs[lo:hi].astype(np.int32)
        docs += self.first
        return docs


Parts = list[tuple[Segment, int, int]]
"""Slices ``lo:hi`` of segments' postings."""


def concat(
    parts: Parts, tail_docs: list[list[int]], tail_weights: list[list[float]]
) -> tuple[np.ndarray, np.ndarray]:
    """Document indexes and weighted tfs of segment slices ``parts`` and then tail lists."""
    extra = sum(len(d) for d in tail_docs)
    at = sum(hi - lo for _, lo, hi in parts)
    docs = np.empty(at + extra, dtype=np.int32)
    weights = [seg.weights[lo:hi] for seg, lo, hi in parts]
    if parts:
        docs[:at] = np.concatenate([seg.docs[lo:hi] for seg, lo, hi in parts])
        firsts = np.array([seg.first for seg, _, _ in parts], dtype=np.int32)
        docs[:at] += np.repeat(firsts, [hi - lo for _, lo, hi in parts])
    if extra:
        docs[at:] = np.concatenate([np.asarray(d, dtype=np.int32) for d in tail_docs])
        weights += [np.asarray(w, dtype=np.float32) for w in tail_weights]
    tf = weights[0] if len(weights) == 1 else np.concatenate(weights) if weights else np.zeros(0, np.float32)
    return docs, tf


__all__ = ["Parts", "Segment", "concat"]
