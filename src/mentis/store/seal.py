"""The seal of a write: how the ledger entries one write operation appends are made.

The service hands a :class:`Seal` to every store method that appends (``append_*``, ``forget_*``,
``delete_skill``). It carries what the caller decided: the record's id and time when they are
planned (a remote signed write repeats the ones its client signed), who signs the entries, and
whether the write commits. The store's one append point calls :meth:`Seal.signature` inside its
write transaction, once the entry's fields are known, and the seal keeps those fields and the
entry's body (:attr:`Seal.sealed`), so the caller sees what was, or would have been, appended.

A seal that does not commit (``prepare_write``, phase 1 of a remote signed write) stops each
append at the entry: nothing is inserted and the transaction rolls back (on PostgreSQL an inserted
row would keep its rowid from the sequence, and a thought's conversational window is keyed on the
rowid just before it).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from mentis.ledger.signing import Sign, Unsigned, now_iso


@dataclass(slots=True)
class Seal:
    """How one write's entries are made; :attr:`sealed` is filled by the store."""

    id: str | None = None
    """The planned id of the record the write creates, or None: a fresh UUID per record."""
    at: str | None = None
    """The planned time of the write, or None: the write reads the clock."""
    sign: Sign | None = None
    """Signs each entry's fields: returns ``(key_id, envelope)``; None appends unsigned entries."""
    commit: bool = True
    """False: build the entries, insert nothing and roll the transaction back."""
    sealed: list[tuple[Unsigned, bytes]] = field(default_factory=list)
    """Each entry the store sealed with this seal: its unsigned fields and canonical body."""

    def record_id(self) -> str:
        """The id of a record the write creates: the planned one, else a fresh UUID."""
        return self.id or str(uuid.uuid4())

    def time(self) -> str:
        """The time of the write: the planned one, else now."""
        return self.at or now_iso()

    def signature(self, fields: Unsigned, body: bytes) -> tuple[str | None, str | None]:
        """What the store's append calls once it knows the entry: keeps ``fields`` and ``body``
        and returns the entry's ``(key_id, sig)``, ``(None, None)`` when unsigned."""
        self.sealed.append((fields, body))
        return (None, None) if self.sign is None else self.sign(fields)


__all__ = ["Seal"]
