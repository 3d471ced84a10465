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

from collections.abc import Callable, Hashable, Mapping, Sequence

from mentis import retrieval
from mentis.retrieval import Scored


def title_terms(query: str) -> list[str]:
    """The lexical terms of the query's first non-empty line (``retrieval.query_terms``)."""
    for line in query.splitlines():
        if line.strip():
            return retrieval.query_terms(line)
    return []


class KeyCache:
    """Rows' keys from ``lookup`` (e.g. ``Store.attempt_keys``), each row asked for once per
    search: the title fusion and the grouping after it need the keys of mostly the same rows."""

    def __init__(self, lookup: Callable[[Sequence[int]], Mapping[int, tuple[str, str, str]]]) -> None:
        self.lookup = lookup
        self.known: dict[int, tuple[str, str, str]] = {}

    def update_from(self, rowids: Sequence[int]) -> dict[int, tuple[str, str, str]]:
        """The keys of ``rowids`` (rows the lookup does not know are left out)."""
        missing = [r for r in dict.fromkeys(rowids) if r not in self.known]
        if missing:
            self.known.update(self.lookup(missing))
        return {r: self.known[r] for r in rowids if r in self.known}


TaskOf = Callable[[Sequence[int]], Mapping[int, Hashable]]
"""Each known rowid's task (any hashable key); rows it leaves out count as tasks of their own."""


def fuse_titles(
    ranked: list[Scored], titles: Sequence[tuple[int, float]], k: float, task_of: TaskOf | None = None
) -> list[Scored]:
    """``ranked`` (an RRF of other lists) with the title list's reciprocal ranks added: the RRF
    of all the lists. A row only a title matched enters with its title term alone.

    A title names a task, not one of its attempts (only the attempt that gave it carries it), so
    with ``task_of`` the title list ranks tasks — each task at the rank of its best title hit —
    and a task's term is added to every attempt of it among the candidates: the title decides
    where the task ranks, never which of its attempts is shown."""
    if not titles:
        return ranked
    by_row = {s.rowid: s for s in ranked}
    task = dict(task_of([*by_row, *(r for r, _ in titles)])) if task_of is not None else {}
    members: dict[Hashable, list[int]] = {}
    for r in by_row:
        if r in task:
            members.setdefault(task[r], []).append(r)
    done: set[Hashable] = set()
    rank = 0
    for rowid, score in titles:
        key = task.get(rowid, ("row", rowid))
        if key in done:
            continue
        done.add(key)
        rank += 1
        for r in dict.fromkeys([*members.get(key, ()), rowid]):
            s = by_row.get(r)
            if s is None:
                s = by_row[r] = Scored(r)
            s.title, s.title_rank = score, rank
            s.fused += 1.0 / (k + rank)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


__all__ = ["KeyCache", "TaskOf", "fuse_titles", "title_terms"]
