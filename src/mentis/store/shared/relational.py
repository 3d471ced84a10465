"""The relational store both backends are: the ledger core with its attempt, thought, skill and
browsing parts, and what needs all of them — import and rebuild, which derive every table from
the ledger alone by replaying its entries in order.

A backend subclasses :class:`RelationalStore` and implements the hooks of
:class:`~mentis.store.shared.backend.Backend` (SQLite: :class:`~mentis.store.sqlite.store.SqliteStore`;
PostgreSQL: :class:`~mentis.store.postgres.store.PostgresStore`). The parts, each its own module:

- :class:`~mentis.store.shared.core.LedgerCore`: ledger appends and hash-checked loads, built on
  :class:`~mentis.store.shared.agents.AgentCore` (the agent registry and the signed-write rules);
- :class:`~mentis.store.shared.attempts.AttemptCore`: attempts and corrections;
- :class:`~mentis.store.shared.thoughts.ThoughtCore`: thoughts, their edges and windows;
- :class:`~mentis.store.shared.skills.SkillCore`: skill versions and statuses;
- :class:`~mentis.store.shared.entity_types.EntityTypeCore`: the entity-type registry;
- :class:`~mentis.store.shared.browse.BrowseReads`: the dashboard's reads.

Each part calls only :class:`LedgerCore` and the backend's hooks, never another part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mentis.errors import Conflict
from mentis.ledger.bodies import (
    AttemptBody,
    CorrectionBody,
    EntityTypeBody,
    SkillStatusBody,
    SkillVersionBody,
    ThoughtBody,
    TombstoneBody,
    VisibilityBody,
)
from mentis.ledger.entry import Entry
from mentis.store.protocol import Embed
from mentis.store.shared.backend import ConnT
from mentis.store.shared.branches import BranchCore
from mentis.store.shared.browse import BrowseReads
from mentis.store.shared.core import ENTRY_COLS, entry_of
from mentis.store.shared.entity_types import EntityTypeCore
from mentis.store.shared.entry_ids import check_import_ids, fill_entry_ids
from mentis.store.shared.proposals import ProposalCore
from mentis.store.shared.scopes import ScopeCore
from mentis.store.shared.skills import SkillCore

REPLAY_BATCH = 128
"""Attempts and thoughts embedded together while a ledger is replayed."""


class RelationalStore(
    ScopeCore[ConnT],
    SkillCore[ConnT],
    BrowseReads[ConnT],
    EntityTypeCore[ConnT],
    ProposalCore[ConnT],
    BranchCore[ConnT],
):
    """Every table derived from the ledger, and their reads (``self`` is the backend's store)."""

    def import_ledger(self, items: Sequence[tuple[Entry, bytes | None]], embed: Embed) -> int:
        """Append chains that this store does not hold yet, in one transaction that commits only
        once the whole ledger, old and new entries together, verifies (DESIGN §4)."""
        q = self.D.q
        chains = sorted({e.chain for e, _ in items})
        with self._write(*chains) as conn:
            self._lock_ledger(conn)
            for chunk in self.D.chunks(chains):
                cond, args = self.D.in_("chain", chunk)
                held = conn.execute(q(f"SELECT chain FROM heads WHERE {cond} LIMIT 1"), args).fetchone()
                if held is not None:
                    raise Conflict(f"this store already holds chain {held[0]!r}; import into a fresh store")
            check_import_ids(self.D, conn, items)
            placed = [(self._insert(conn, e, body), e, body) for e, body in items]
            self._replay(conn, placed, embed, None)
            self._rebuild_sig_streams(conn)
            self._verify_within(conn)
        return len(placed)

    def rebuild(self, embed: Embed, progress: Callable[[int], None] | None = None) -> int:
        """Empty every derived table and regenerate it from the ledger, in one transaction (the
        entries of a damaged chain derive nothing)."""
        with self._write() as conn:
            self._reset_derived(conn)
            fill_entry_ids(conn)
            rows = conn.execute(
                f"SELECT e.rowid, {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b "
                "ON b.rowid = e.rowid ORDER BY e.rowid"
            ).fetchall()
            placed = [
                (int(r[0]), entry_of(r[1:13]), None if r[13] is None else bytes(r[13]))
                for r in rows
                if r[2] not in self.damaged  # a damaged chain derives nothing: it is not read
            ]
            self._replay(conn, placed, embed, progress)
            self._rebuild_sig_streams(conn)
        self._after_rebuild()
        return len(placed)

    def _replay(
        self,
        conn: ConnT,
        placed: Sequence[tuple[int, Entry, bytes | None]],
        embed: Embed,
        progress: Callable[[int], None] | None,
    ) -> None:
        """Derive the tables of ``placed`` (rowid, entry, body bytes) in ledger order; ``progress``
        hears how many records were embedded.

        Attempts and thoughts are embedded in batches; any other entry first flushes the batch, so
        a correction, forget or skill entry sees every entry before it (skill versions embed
        themselves). Entries whose body was erased derive nothing.
        """
        batch: list[tuple[int, AttemptBody | ThoughtBody]] = []
        skill = self._skill_replayer(conn, embed)

        def flush() -> None:
            if not batch:
                return
            vectors = embed([record.embed_text for _, record in batch])
            for (rowid, record), vector in zip(batch, vectors, strict=True):
                if isinstance(record, AttemptBody):
                    self._derive_attempt(conn, rowid, record, vector)
                else:
                    self._derive_thought(conn, rowid, record, vector)
            if progress is not None:
                progress(len(batch))
            batch.clear()

        for rowid, entry, raw in placed:
            if raw is None:
                continue
            if entry.kind in ("attempt", "thought"):
                batch.append((rowid, (AttemptBody if entry.kind == "attempt" else ThoughtBody).parse(raw)))
                if len(batch) >= REPLAY_BATCH:
                    flush()
                continue
            flush()
            if entry.kind == "correction":
                self._replay_correction(conn, rowid, CorrectionBody.parse(raw), embed)
            elif entry.kind == "forget":
                self._replay_forget(conn, rowid, TombstoneBody.parse(raw))
            elif entry.kind == "skill":
                skill(rowid, SkillVersionBody.parse(raw))
            elif entry.kind == "skill_status":
                self._derive_skill_status(conn, rowid, SkillStatusBody.parse(raw))
            elif entry.kind == "visibility":
                self._replay_visibility(conn, VisibilityBody.parse(raw), embed)
            elif entry.kind == "entity_type":
                self._derive_entity_type(conn, rowid, EntityTypeBody.parse(raw))
        flush()

    def _replay_correction(self, conn: ConnT, rowid: int, correction: CorrectionBody, embed: Embed) -> None:
        """A correction's rows, with its attempt's conclusion embedded again (a correction of an
        attempt forgotten since derives nothing)."""
        arow = conn.execute(
            self.D.q(
                "SELECT a.rowid, b.body FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
                "WHERE a.attempt_id=? AND a.repository=?"
            ),
            (correction.attempt_id, correction.repository),
        ).fetchone()
        if arow is not None:
            vector = embed([AttemptBody.parse(arow[1]).conclusion])[0]
            self._derive_correction(conn, rowid, int(arow[0]), correction, vector)

    def _replay_visibility(self, conn: ConnT, body: VisibilityBody, embed: Embed) -> None:
        """A visibility entry's effect: its record's rows move to the wider scope, with the
        record's vector embedded again (a record forgotten since derives nothing)."""
        found = self._scoped_record(conn, body.repository, body.record_id)
        if found is not None:
            self._derive_visibility(conn, body, embed([found[2].embed_text])[0])

    def _replay_forget(self, conn: ConnT, tomb_rowid: int, tomb: TombstoneBody) -> None:
        """A tombstone's effect on the derived tables: erase the skill, thought or attempt it names."""
        if tomb.skill_id is not None:
            self._derive_forget_skill(conn, tomb.repository, tomb.skill_id)
        elif tomb.thought_id is not None:
            self._removing(conn, "thought", None)
            self._derive_forget_thought(conn, tomb.repository, tomb.thought_id)
        elif tomb.attempt_id is not None:
            self._derive_forget_attempt(conn, tomb_rowid, tomb.repository, tomb.attempt_id)

    def _index_all(self, conn: ConnT) -> int:
        """Index every live attempt and thought (the migration to lexical rows); returns the count."""
        done = 0
        for table, idx in (("attempt_terms", "attempt_idx"), ("thought_terms", "thought_idx")):
            rows = conn.execute(
                f"SELECT i.rowid, b.body FROM {idx} i JOIN bodies b ON b.rowid = i.rowid ORDER BY i.rowid"
            ).fetchall()
            with self._terms_batch(conn):
                for rowid, raw in rows:
                    kind = AttemptBody if table == "attempt_terms" else ThoughtBody
                    self._index_record(conn, table, int(rowid), kind.parse(raw))
            done += len(rows)
        return done


__all__ = ["REPLAY_BATCH", "RelationalStore"]
