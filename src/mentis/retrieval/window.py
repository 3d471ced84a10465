"""Conversational windows: a turn is scored with the turns said just before and after it.

A question about something said across two turns ("what did she say after he asked about the
trip?") matches each turn only in part; the window (the turn and its neighbours in the same
session) matches it whole. Each of the two candidate lists is smoothed over windows — a row's
window score is the lexical scores of the window's rows added up (BM25 of a concatenation
adds its parts' term weights), or the mean of their cosines (the window's direction) — and the
two window lists are fused beside the two plain ones by reciprocal rank. A neighbour that was
not a candidate can enter through its window. Rows without neighbours (attempts, thoughts
without a session) keep their own scores, so each window list then ranks exactly as its plain
list and the fused order is the one :func:`retrieval.fuse` gives: the signal adds nothing where
no session links exist, and takes nothing away.

Only the best ``WINDOW_TOP`` rows of each list (the most a search returns) are widened, so the
neighbours asked for per query stay bounded.

Beside them, a causal window row is written when a thought is recorded: its content with the
content of the thought just before it in its session (``window_terms``, keyed by the later
thought's rowid; the thought after it does not exist yet, so the window looks back only). BM25
over those rows finds a pair whose two turns each match the question in part even when neither
turn is among the plain candidates; :func:`fuse_pairs` ranks both turns of each window hit (the
later first) and adds that list's reciprocal ranks to the fusion. Rows without a session have no
window row, so where there are no sessions the list is empty and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from mentis import retrieval
from mentis.retrieval import Scored

WINDOW_TOP = 50
"""Rows of each candidate list whose windows are formed: the most a search returns (the
MAX_SEARCH_LIMIT of the tools), not a tuned value."""

Hits = Sequence[tuple[int, float]]
Neighbours = Callable[[Sequence[int]], Mapping[int, Sequence[int]]]


def window_fuse(
    lex: Hits,
    vec: Hits,
    neighbours: Neighbours,
    k: float = retrieval.RRF_K,
    top: int = WINDOW_TOP,
    sides: tuple[bool, bool] = (True, True),
) -> list[Scored]:
    """RRF of the lexical list, the vector list and their window-smoothed lists.

    ``neighbours(rowids)`` gives, for each of ``rowids`` that has any, the rows said just before
    and after it in its session (the caller decides what a session is; rows it leaves out have
    no window). ``sides`` turns the lexical and the vector window off (for ablations).
    """
    ranked = retrieval.fuse(lex, vec, k)
    seeds = list(dict.fromkeys([r for r, _ in lex[:top]] + [r for r, _ in vec[:top]]))
    given = neighbours(seeds) if seeds else {}
    near: dict[int, list[int]] = {}
    for r, others in given.items():  # a neighbour's window holds the row it neighbours
        for n in others:
            near.setdefault(r, []).append(n)
            near.setdefault(n, []).append(r)
    near = {r: list(dict.fromkeys(ns)) for r, ns in near.items()}
    if not near:
        return ranked  # no windows: the window lists would repeat the plain ones
    by_row = {s.rowid: s for s in ranked}
    for hits, mean, side in ((lex, False, sides[0]), (vec, True, sides[1])):
        if not hits or not side:
            continue
        scores = dict(hits)
        rows = dict.fromkeys(r for r, _ in hits[:top])
        for r in list(rows):
            rows.update(dict.fromkeys(near.get(r, ())))
        windowed = []
        for r in rows:
            members = [r, *near.get(r, ())]
            parts = [scores[m] for m in members if m in scores]
            if parts:
                windowed.append((r, sum(parts) / len(members) if mean else sum(parts)))
        windowed.sort(key=lambda rs: (-rs[1], rs[0]))
        for rank, (r, _) in enumerate(windowed, start=1):
            s = by_row.get(r)
            if s is None:
                s = by_row[r] = Scored(r)
            s.fused += 1.0 / (k + rank)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


def pair_hits(hits: Hits) -> list[tuple[int, float]]:
    """Window hits (each keyed by its later thought's rowid r, holding r − 1 and r) as the
    thoughts they hold, best window first, the later thought of each before the earlier one;
    each thought at its best window's rank."""
    out: dict[int, float] = {}
    for r, score in hits:
        out.setdefault(r, score)
        out.setdefault(r - 1, score)
    return list(out.items())


def fuse_pairs(ranked: Sequence[Scored], windows: Hits, k: float = retrieval.RRF_K) -> list[Scored]:
    """``ranked`` with the reciprocal ranks of the thoughts of the ``windows`` hits added (see
    :func:`pair_hits`); without window hits, ``ranked`` as it is."""
    if not windows:
        return list(ranked)
    by_row = {s.rowid: s for s in ranked}
    for rank, (r, _) in enumerate(pair_hits(windows), start=1):
        s = by_row.get(r)
        if s is None:
            s = by_row[r] = Scored(r)
        s.fused += 1.0 / (k + rank)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


__all__ = ["WINDOW_TOP", "Neighbours", "fuse_pairs", "pair_hits", "window_fuse"]
