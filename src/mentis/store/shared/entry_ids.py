"""``entry_ids``: every ledger entry's id, so that no id is ever written twice (both backends).

An id names one record across the whole store (an attempt, thought or skill version is found by
it; corrections, tombstones, skill statuses and registry events carry one too), so every append
claims its entry's id in this table inside its write transaction, before the entry is written. Its
primary key does the check: an index lookup, and on PostgreSQL a writer that claims an id another
transaction holds uncommitted waits for it and is then refused, so concurrent writers on different
chains cannot race one id in twice. Forgetting erases a body, never the entry, so a forgotten
record's id stays taken. Import and migrate claim every imported id the same way.

The table is filled from the ledger by the schema migration that adds it and by rebuild: each id
with the entry that had it first, so a store written before ids were checked, which may hold an
id twice, keeps its first holder (verification then names the later one's chain as damaged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mentis.errors import Conflict
from mentis.ledger.entry import Entry
from mentis.store.shared.dialect import Dialect


def claim_id(d: Dialect, conn: Any, e: Entry) -> None:
    """Take ``e.id`` for entry ``e``; Conflict, and nothing written, when any entry had it. The
    message names no chain: a caller may not learn what another repository holds."""
    claimed = conn.execute(
        d.q("INSERT INTO entry_ids(id, chain, seq) VALUES(?,?,?) ON CONFLICT(id) DO NOTHING RETURNING id"),
        (e.id, e.chain, e.seq),
    ).fetchone()
    if claimed is None:
        raise Conflict(
            f"id {e.id} is already taken by a ledger entry (ids are unique across the store, forgotten "
            "records included); omit the chosen id (thought_id) to get a new one, or prepare_write again"
        )


def fill_entry_ids(conn: Any) -> int:
    """``entry_ids`` from the ledger, each id with its first entry; returns the number of ids."""
    conn.execute("DELETE FROM entry_ids")
    conn.execute(
        "INSERT INTO entry_ids(id, chain, seq) SELECT e.id, e.chain, e.seq FROM entries e "
        "JOIN (SELECT id, min(rowid) AS first FROM entries GROUP BY id) f ON e.rowid = f.first"
    )
    return int(conn.execute("SELECT count(*) FROM entry_ids").fetchone()[0])


def check_import_ids(d: Dialect, conn: Any, items: Sequence[tuple[Entry, bytes | None]]) -> None:
    """Conflict naming the id and both entries when an imported entry's id is another imported
    entry's or is taken in this store (one index lookup per chunk of ids)."""
    first: dict[str, Entry] = {}
    for e, _ in items:
        other = first.setdefault(e.id, e)
        if other is not e:
            raise Conflict(
                f"the import holds id {e.id} twice (chain {other.chain!r} seq {other.seq} and chain "
                f"{e.chain!r} seq {e.seq}); ids are unique across a store; nothing was imported"
            )
    for chunk in d.chunks(list(first)):
        cond, args = d.in_("id", chunk)
        row = conn.execute(d.q(f"SELECT id, chain, seq FROM entry_ids WHERE {cond} LIMIT 1"), args).fetchone()
        if row is not None:
            e = first[row[0]]
            raise Conflict(
                f"id {row[0]} of chain {e.chain!r} seq {e.seq} in the import is already taken by chain "
                f"{row[1]!r} seq {row[2]} of this store; ids are unique across a store; nothing was imported"
            )
