"""The candidate pipeline of ``search`` and ``search_thoughts`` (DESIGN §5), written once.

The query's lexical terms and its embedding; lexical and vector candidates (up to ``depth``
each, the lexical ones fetched on ``pool`` while the query is embedded); fusion; then the graph
walk over ``edges``. Nothing outside ``scope`` is asked for, so nothing outside it shapes a
score or a rank. The store's calls are passed in, so one function ranks attempts and thoughts,
and ``bench/eval.py`` runs it with other :class:`Params` (and its own term selection and
lexical index) instead of a copy of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from mentis import retrieval
from mentis.retrieval import Scored, graph, titles, window

Scope = Sequence[str] | None
Hits = Sequence[tuple[int, float]]
Lexical = Callable[[list[str], Scope, int], Hits]
Vector = Callable[[np.ndarray, Scope, int], Hits]
Edges = Callable[[Sequence[int], Scope, int], Sequence[tuple[int, int, float]]]


@dataclass(frozen=True)
class Params:
    """What the pipeline lets a caller vary; the defaults are what search ships."""

    depth: int = retrieval.CANDIDATES
    fusion: str = "rrf"  # "rrf" (weighted by w_lex / w_vec) | "agree" (RRF weighted by each
    # list's agreement with the other, per query) | "minmax" (convex combination, alpha)
    rrf_k: float = retrieval.RRF_K
    w_lex: float = 1.0
    w_vec: float = 1.0
    alpha: float = 0.5  # minmax: the weight of the lexical score
    restart: float = graph.RESTART
    stay: bool = True  # graph: a node without edges keeps its mass


SHIPPED = Params()


def no_hits(*_: object) -> Hits:
    """A candidate source that finds nothing (an ablation's missing side)."""
    return []


def candidates(
    query: str,
    scope: Scope,
    embed: Callable[[str], np.ndarray],
    lexical: Lexical,
    vector: Vector,
    edges: Edges | None,
    *,
    params: Params = SHIPPED,
    terms: Callable[[str], list[str]] | None = None,
    pool: Executor | None = None,
    neighbours: window.Neighbours | None = None,
    title_lexical: Lexical | None = None,
    task_of: titles.TaskOf | None = None,
    window_lexical: Lexical | None = None,
) -> tuple[list[Scored], bool]:
    """The fused (and, with ``edges``, graph-walked) candidates of ``query``, best first, and
    whether the query had lexical terms (else the ranking is the vector's alone).

    ``terms`` turns the query into the lexical side's words (default :func:`retrieval.query_terms`).
    With ``neighbours`` (rows said just before and after a row in its session), RRF also fuses
    the two lists smoothed over those windows (:func:`window.window_fuse`). With
    ``title_lexical`` (BM25 against titles alone), RRF also fuses the query's first line's title
    hits, per task of ``task_of`` (:mod:`mentis.retrieval.titles`). With ``window_lexical`` (BM25
    against the causal window rows of thoughts), RRF also fuses the thoughts of the window hits
    (:func:`window.fuse_pairs`).
    """
    words = (terms or retrieval.query_terms)(query)
    asked = (words, scope, params.depth) if words and scope != [] else None
    heading = titles.title_terms(query) if title_lexical is not None and scope != [] else []

    def lexical_side() -> tuple[Hits, Hits, Hits]:
        lex = lexical(*asked) if asked is not None else []
        by_title = title_lexical(heading, scope, params.depth) if title_lexical and heading else []
        by_window = window_lexical(*asked) if window_lexical is not None and asked is not None else []
        return lex, by_title, by_window

    pending = pool.submit(lexical_side) if pool is not None else None
    qvec = embed(query)
    vec = vector(qvec, scope, params.depth) if scope != [] else []
    lex, by_title, by_window = pending.result() if pending is not None else lexical_side()
    if params.fusion == "minmax":
        ranked = minmax_fuse(lex, vec, params.alpha)
    elif neighbours is not None and params.fusion == "rrf" and params.w_lex == params.w_vec:
        ranked = window.window_fuse(lex, vec, neighbours, params.rrf_k)
    elif params.fusion == "agree":
        ranked = retrieval.fuse(lex, vec, params.rrf_k, agreement_weights(lex, vec))
    else:
        ranked = retrieval.fuse(lex, vec, params.rrf_k, (params.w_lex, params.w_vec))
    if params.fusion == "rrf":
        ranked = titles.fuse_titles(ranked, by_title, params.rrf_k, task_of)
        ranked = window.fuse_pairs(ranked, by_window, params.rrf_k)
    if edges is not None:
        ranked = graph.rerank(
            ranked,
            lambda seeds: edges(seeds, scope, graph.NEIGHBOURS_PER_SEED),
            restart=params.restart,
            stay=params.stay,
        )
    return ranked, bool(words)


AGREEMENT_TOP = 10
"""How many of a list's best hits are checked against the other list's candidates."""


def agreement_weights(lex: Hits, vec: Hits, top: int = AGREEMENT_TOP) -> tuple[float, float]:
    """Each list's weight: the share of its ``top`` best hits that the other list also found
    among its candidates, add-one smoothed ((1 + shared) / (1 + top)), so a list whose best hits
    the other side confirms counts more for this query, and neither weight is ever zero."""
    if not lex or not vec:
        return 1.0, 1.0
    lex_rows, vec_rows = {r for r, _ in lex}, {r for r, _ in vec}
    shared_lex = sum(1 for r, _ in lex[:top] if r in vec_rows)
    shared_vec = sum(1 for r, _ in vec[:top] if r in lex_rows)
    return (1 + shared_lex) / (1 + top), (1 + shared_vec) / (1 + top)


def minmax_fuse(lex: Hits, vec: Hits, alpha: float) -> list[Scored]:
    """alpha * min-max(bm25) + (1 - alpha) * min-max(cosine) over each list; absent = 0."""
    by_row: dict[int, Scored] = {}
    for items, w, is_lex in ((lex, alpha, True), (vec, 1.0 - alpha, False)):
        if not items:
            continue
        scores = [s for _, s in items]
        lo, hi = min(scores), max(scores)
        for rank, (rowid, score) in enumerate(items, start=1):
            s = by_row.setdefault(rowid, Scored(rowid))
            if is_lex:
                s.lexical, s.lexical_rank = score, rank
            else:
                s.vector, s.vector_rank = score, rank
            s.fused += w * ((score - lo) / (hi - lo) if hi > lo else 1.0)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


__all__ = ["SHIPPED", "Params", "agreement_weights", "candidates", "minmax_fuse", "no_hits"]
