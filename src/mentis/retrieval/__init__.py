"""Candidate generation, fusion and grouping for ``search`` (DESIGN §5).

The store supplies lexical (BM25 over the query's terms) and vector (cosine) candidates; this package
fuses them with reciprocal-rank fusion and groups attempts into tasks. Everything here is
pure: given candidates it returns a ranking, so it is tested without a store.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

RRF_K = 10
"""Reciprocal-rank fusion constant. The usual 60 scores ranks almost flatly, so two mediocre ranks
beat one strong one; 10 was better on both public sets (LoCoMo strict MRR .379 → .408, SeaMonkey
.554 → .562, bench/eval.py) — one constant for both, not tuned per query."""
CANDIDATES = 200
"""Lexical and vector candidates taken per query, each."""
MAX_ATTEMPTS_PER_TASK = 5

TOKEN = _TOKEN = re.compile(r"\w+", re.UNICODE)
# Words too common to carry meaning in a problem description. Removing them keeps FTS5 from
# scoring nearly every row for a long query; BM25 would give them ~0 weight anyway.
_STOPWORDS_TEXT = """
a about above after again against all am an and any are as at be because been before being below
between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most
my myself no nor not now of off on once only or other our ours ourselves out over own same she
should so some such than that the their theirs them themselves then there these they this those
through to too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves
"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
MAX_QUERY_TERMS = 64


def query_terms(text: str) -> list[str]:
    """The query's words for lexical search (empty if none).

    A word appears as often as the query repeats it, so BM25 weighs it by its query term
    frequency (each occurrence adds its term's score, as FTS5 and Lucene do for repeated terms);
    a long problem description repeats what it is about. Stopwords are dropped and only the
    first ``MAX_QUERY_TERMS`` distinct words are kept.
    """
    counts: dict[str, int] = {}
    for word in _TOKEN.findall(text.lower()):
        if word in STOPWORDS:
            continue
        if word in counts:
            counts[word] += 1
        elif len(counts) < MAX_QUERY_TERMS:
            counts[word] = 1
    return [w for w, n in counts.items() for _ in range(n)]


@dataclass
class Scored:
    """One attempt's scores: the parts and the fused total."""

    rowid: int
    lexical: float | None = None
    lexical_rank: int | None = None
    vector: float | None = None
    vector_rank: int | None = None
    fused: float = 0.0
    graph: float | None = None
    title: float | None = None
    title_rank: int | None = None

    @property
    def final(self) -> float:
        """The ranking score: the graph walk's when it ran, else the fused one."""
        return self.fused if self.graph is None else self.graph

    def parts(self) -> dict[str, Any]:
        return {
            "lexical": None if self.lexical is None else round(self.lexical, 4),
            "lexical_rank": self.lexical_rank,
            "vector": None if self.vector is None else round(self.vector, 4),
            "vector_rank": self.vector_rank,
            "fused": round(self.fused, 6),
            "graph": None if self.graph is None else round(self.graph, 6),
            "title": None if self.title is None else round(self.title, 4),
            "title_rank": self.title_rank,
        }


def fuse(
    lexical: Sequence[tuple[int, float]],
    vector: Sequence[tuple[int, float]],
    k: float = RRF_K,
    weights: tuple[float, float] = (1.0, 1.0),
) -> list[Scored]:
    """Reciprocal-rank fusion of two ranked lists of (rowid, score), best first, each list's
    terms scaled by its weight (lexical, vector)."""
    by_row: dict[int, Scored] = {}
    for rank, (rowid, score) in enumerate(lexical, start=1):
        s = by_row.setdefault(rowid, Scored(rowid))
        s.lexical, s.lexical_rank = score, rank
        s.fused += weights[0] / (k + rank)
    for rank, (rowid, score) in enumerate(vector, start=1):
        s = by_row.setdefault(rowid, Scored(rowid))
        s.vector, s.vector_rank = score, rank
        s.fused += weights[1] / (k + rank)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


@dataclass
class TaskHit:
    repository: str
    task_id: str
    attempts: list[Scored] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.attempts[0].final


def group_tasks(ranked: Sequence[Scored], keys: dict[int, tuple[str, str]], limit: int) -> list[TaskHit]:
    """Group attempts by (repository, task_id), best task first, ≤ 5 attempts each."""
    tasks: dict[tuple[str, str], TaskHit] = {}
    for s in ranked:
        key = keys.get(s.rowid)
        if key is None:  # forgotten between candidate generation and grouping
            continue
        hit = tasks.get(key)
        if hit is None:
            if len(tasks) == limit:
                continue
            hit = tasks[key] = TaskHit(*key)
        if len(hit.attempts) < MAX_ATTEMPTS_PER_TASK:
            hit.attempts.append(s)
    return sorted(tasks.values(), key=lambda t: -t.score)


def fuse_ranked(lists: Sequence[Sequence[Any]], k: float = RRF_K) -> list[tuple[Any, float, list[int]]]:
    """Reciprocal-rank fusion of ranked lists of keys, best first (the fusion :func:`fuse` applies
    inside one store): a key's score is the sum of ``1 / (k + rank)`` over the lists holding it.
    Returns (key, score, its rank in each list or 0 where absent), best first; ties go to the best
    single rank, then to the earlier list."""
    scores: dict[Any, float] = {}
    ranks: dict[Any, list[int]] = {}
    for i, ranked in enumerate(lists):
        for rank, key in enumerate(ranked, start=1):
            if key in ranks and ranks[key][i]:
                continue  # a list names a key once; a repeat adds nothing
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            ranks.setdefault(key, [0] * len(lists))[i] = rank

    def order(key: Any) -> tuple[float, int, int]:
        held = [(r, i) for i, r in enumerate(ranks[key]) if r]
        best = min(held)
        return (-scores[key], best[0], best[1])

    return [(key, scores[key], ranks[key]) for key in sorted(scores, key=order)]
