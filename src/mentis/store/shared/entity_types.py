"""The entity-type registry's table (issue 27, provenance): what a thought may be about.

Every upsert is an entry of the system chain :data:`mentis.ledger.links.ENTITY_TYPES_CHAIN`
(kind ``entity_type``, body :class:`~mentis.ledger.bodies.EntityTypeBody`), verified on open and
exported like every chain. ``entity_types`` is derived from it (rebuilt with the other tables):
each name with the rowid of its newest upsert; the description a read returns is parsed from that
entry's body, checked against its hash as it is read.
"""

from __future__ import annotations

from mentis.ledger.bodies import EntityTypeBody
from mentis.ledger.canonical import canonical
from mentis.ledger.entry import Entry
from mentis.ledger.links import ENTITY_TYPES_CHAIN
from mentis.store.protocol import Stored
from mentis.store.seal import Seal
from mentis.store.shared.backend import ConnT
from mentis.store.shared.core import LedgerCore

ENTITY_TYPES_SCHEMA = """
CREATE TABLE IF NOT EXISTS entity_types(name TEXT PRIMARY KEY, rowid BIGINT NOT NULL);
"""
"""Derived from the registry's chain: each type's newest upsert (both backends)."""


class EntityTypeCore(LedgerCore[ConnT]):
    """Entity-type upserts and reads (``self`` is the store)."""

    def append_entity_type(self, body: EntityTypeBody, seal: Seal) -> Entry:
        """Append one upsert to the registry's chain, by ``body.by`` at ``body.at``."""
        with self._write(ENTITY_TYPES_CHAIN, commit=seal.commit) as conn:
            rowid, entry = self._append(
                conn,
                seal,
                ENTITY_TYPES_CHAIN,
                "entity_type",
                seal.record_id(),
                body.at,
                body.by,
                canonical(body.to_json()),
            )
            if rowid is not None:
                self._derive_entity_type(conn, rowid, body)
        return entry

    def _derive_entity_type(self, conn: ConnT, rowid: int, body: EntityTypeBody) -> None:
        conn.execute(
            self.D.q(
                "INSERT INTO entity_types(name, rowid) VALUES(?, ?) "
                "ON CONFLICT(name) DO UPDATE SET rowid = excluded.rowid"
            ),
            (body.name, rowid),
        )

    def entity_types(self) -> list[Stored[EntityTypeBody]]:
        """Every registered type's newest upsert (entry and checked body), by name."""
        with self._read() as conn:
            rowids = [int(r) for (r,) in conn.execute("SELECT rowid FROM entity_types ORDER BY name")]
            loaded = self._load(conn, rowids, EntityTypeBody)
        return [loaded[r] for r in rowids if r in loaded]

    def entity_type_known(self, name: str) -> bool:
        """Whether ``name`` was registered (an upsert of it is in the registry's chain)."""
        with self._peek() as conn:
            found = conn.execute(self.D.q("SELECT 1 FROM entity_types WHERE name = ?"), (name,))
            return found.fetchone() is not None


__all__ = ["ENTITY_TYPES_SCHEMA", "EntityTypeCore"]
