"""Body rows that belong to no entry: what the last step of verification looks for, on both stores.

A body row of no entry is left by an entry deleted outside Mentis (its body kept), or was slipped
in. Alone it refuses the store (it belongs to no one chain). When verification has found chains
damaged (``skip``), a body row lying within the rowids of one of them is taken as that chain's
deleted entry's, already refused with it: the other chains are served.
"""

from __future__ import annotations

from typing import Any

from mentis.errors import IntegrityError


def check_orphans(conn: Any, skip: frozenset[str]) -> None:
    """IntegrityError naming the first body row of no entry that no damaged chain explains."""
    orphans = [
        int(r)
        for (r,) in conn.execute(
            "SELECT b.rowid FROM bodies b LEFT JOIN entries e ON e.rowid = b.rowid "
            "WHERE e.rowid IS NULL ORDER BY b.rowid"
        )
    ]
    if skip and orphans:
        spans = [
            (int(lo), int(hi))
            for chain, lo, hi in conn.execute(
                "SELECT chain, min(rowid), max(rowid) FROM entries GROUP BY chain"
            )
            if chain in skip
        ]
        orphans = [r for r in orphans if not any(lo <= r <= hi for lo, hi in spans)]
    if orphans:
        raise IntegrityError(
            f"ledger does not verify: body row {orphans[0]} belongs to no entry. "
            "The store was changed outside Mentis; restore it from a backup or an export."
        )
