"""Which thoughts were said just before and after a thought in its session: the neighbours the
conversational windows of ``search_thoughts`` need (:mod:`mentis.retrieval.window`).

A thought's neighbours are the thoughts at the rowids on either side of it (written just before
and after it) that belong to the same repository and the same ``session_id``. A write of another
session in between breaks the window there (the thought then has no neighbour on that side).

Which rows are live thoughts the caller may read is asked on every search (``filter_thoughts``
within the caller's scope: one indexed statement), so a forgotten thought or one outside the
scope is never a neighbour. A thought's repository and session never change, so they are kept in
a bounded per-process map once read (``load_thoughts``, which checks each body against its
ledger entry); a thought written later is found on the next search.
"""

from __future__ import annotations

from collections.abc import Sequence
from threading import Lock

from mentis.store.protocol import Store, ThoughtQuery

KEEP = 200_000
"""Rows whose (repository, session) are kept per process before the map is emptied (~30 MB)."""


class SessionNeighbours:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._known: dict[int, tuple[str, str | None]] = {}
        self._lock = Lock()

    def __call__(self, rowids: Sequence[int], scope: Sequence[str] | None) -> dict[int, list[int]]:
        """For each of ``rowids`` that has any, its neighbours in its session."""
        near = sorted({n for r in rowids for n in (r - 1, r, r + 1)})
        # which of them are live thoughts the caller may read, asked every time (a forget or
        # another caller's scope changes it); only their sessions are remembered
        alive = self.store.filter_thoughts(near, ThoughtQuery(scopes=scope), len(near))
        with self._lock:
            unknown = [r for r in alive if r not in self._known]
        if unknown:
            found = {
                r: (entry.chain, body.session_id or None)
                for r, (entry, body) in self.store.load_thoughts(unknown).items()
            }
            with self._lock:
                if len(self._known) + len(found) > KEEP:
                    self._known.clear()
                self._known.update(found)
        with self._lock:
            session = {r: self._known[r] for r in alive if r in self._known}
        out: dict[int, list[int]] = {}
        for r in rowids:
            own = session.get(r)
            if own is None or own[1] is None:
                continue
            same = [n for n in (r - 1, r + 1) if session.get(n) == own]
            if same:
                out[r] = same
        return out


__all__ = ["SessionNeighbours"]
