"""The title-to-title signal of ``search``: the query's first line against task titles alone.

Duplicate reports, and an agent asking again about a task it once named, often share a summary
more than a description, and in the whole-text index a title's words are diluted by the rest of
the attempt. So each attempt's ``task_title`` is also indexed on its own (``title_terms``, one row
per titled attempt), and the query's first line (a pasted report's summary; all of a one-line
query) is scored against those rows by BM25 with the statistics of the titles searched. The
ranked list is fused by reciprocal rank beside the lexical and vector lists: one more list, with
the same weight and the same ``k``, so no constant is added. Where no title matches, the list is
empty and the fused order is exactly the one without it.

Measured in ``bench/README.md`` (issue 16): SeaMonkey duplicates MRR up, LoCoMo and the Python FAQ
unchanged (thoughts have no titles).
"""

from __future__ import annotations

from collections.abc import Sequence

from mentis import retrieval
from mentis.retrieval import Scored


def title_terms(query: str) -> list[str]:
    """The lexical terms of the query's first non-empty line (``retrieval.query_terms``)."""
    for line in query.splitlines():
        if line.strip():
            return retrieval.query_terms(line)
    return []


def fuse_titles(ranked: list[Scored], titles: Sequence[tuple[int, float]], k: float) -> list[Scored]:
    """``ranked`` (an RRF of other lists) with the title list's reciprocal ranks added: the RRF
    of all the lists. A row only a title matched enters with its title term alone."""
    if not titles:
        return ranked
    by_row = {s.rowid: s for s in ranked}
    for rank, (rowid, score) in enumerate(titles, start=1):
        s = by_row.get(rowid)
        if s is None:
            s = by_row[rowid] = Scored(rowid)
        s.title, s.title_rank = score, rank
        s.fused += 1.0 / (k + rank)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


__all__ = ["fuse_titles", "title_terms"]
