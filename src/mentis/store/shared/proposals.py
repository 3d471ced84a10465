"""The ``proposals`` table: the review queue of proposed memories (``mentis propose``), beside the
ledger and outside it. A proposal is not memory until someone accepts it; accepting writes the
record through the ordinary write path (a ledger entry, signed when its agent has a key), and the
row keeps the decision and the id of what was written. Rows never enter an export, a rebuild or
verification, and ``recall`` cannot read the table (only the documented views are admitted).

``content_key`` is unique: the same proposal offered again (the same transcript read twice, or one
already rejected) is not queued again. The statements are written once here, in ``?`` style; the
SQLite file creates the table with its schema, PostgreSQL in a migration.
"""

from __future__ import annotations

from collections.abc import Sequence

from mentis.store.protocol import ProposalRow
from mentis.store.shared.backend import Backend, ConnT

PROPOSALS_SCHEMA = """
CREATE TABLE IF NOT EXISTS proposals(
    id TEXT PRIMARY KEY, content_key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL,
    repository TEXT NOT NULL, body TEXT NOT NULL, source TEXT NOT NULL, status TEXT NOT NULL,
    reason TEXT, proposed_at TEXT NOT NULL, proposed_by TEXT NOT NULL, decided_at TEXT,
    decided_by TEXT, record_id TEXT);
CREATE INDEX IF NOT EXISTS proposals_queue ON proposals(status, repository, proposed_at);
"""
COLUMNS = (
    "id, content_key, kind, repository, body, source, status, reason, proposed_at, proposed_by, "
    "decided_at, decided_by, record_id"
)


class ProposalCore(Backend[ConnT]):
    """The review queue's statements on the store's own connection and transactions."""

    def add_proposals(self, rows: Sequence[ProposalRow]) -> list[tuple[ProposalRow, bool]]:
        """Queue each of ``rows`` whose content is not queued yet (pending, accepted or rejected),
        in one transaction; returns, for each row, the row stored under its content key and
        whether it is the one just queued."""
        q = self.D.q
        marks = ", ".join(["?"] * len(COLUMNS.split(",")))
        stored: list[tuple[ProposalRow, bool]] = []
        with self._write() as conn:
            for row in rows:
                new = conn.execute(
                    q(
                        f"INSERT INTO proposals({COLUMNS}) VALUES({marks}) "
                        "ON CONFLICT(content_key) DO NOTHING RETURNING id"
                    ),
                    (
                        row.id, row.content_key, row.kind, row.repository, row.body, row.source,
                        row.status, row.reason, row.proposed_at, row.proposed_by, row.decided_at,
                        row.decided_by, row.record_id,
                    ),
                ).fetchall()  # fmt: skip
                found = conn.execute(
                    q(f"SELECT {COLUMNS} FROM proposals WHERE content_key = ?"), (row.content_key,)
                ).fetchone()
                stored.append((ProposalRow(*found), bool(new)))
        return stored

    def proposal(self, proposal_id: str) -> ProposalRow | None:
        with self._peek() as conn:
            found = conn.execute(
                self.D.q(f"SELECT {COLUMNS} FROM proposals WHERE id = ?"), (proposal_id,)
            ).fetchone()
        return ProposalRow(*found) if found else None

    def proposals(self, status: str | None, repository: str | None) -> list[ProposalRow]:
        """The queue's rows (of ``status`` and ``repository`` when given), oldest first."""
        where, args = [], []
        for column, value in (("status", status), ("repository", repository)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        sql = f"SELECT {COLUMNS} FROM proposals"
        sql += f" WHERE {' AND '.join(where)}" if where else ""
        with self._peek() as conn:
            rows = conn.execute(self.D.q(sql + " ORDER BY proposed_at, id"), args).fetchall()
        return [ProposalRow(*r) for r in rows]

    def pending_by_repository(self) -> dict[str, int]:
        """How many proposals wait in each repository (one grouped count over the queue's index)."""
        sql = "SELECT repository, COUNT(*) FROM proposals WHERE status = ? GROUP BY repository"
        with self._peek() as conn:
            rows = conn.execute(self.D.q(sql), ("pending",)).fetchall()
        return {str(repository): int(count) for repository, count in rows}

    def decide_proposal(
        self,
        proposal_id: str,
        *,
        status: str,
        by: str | None,
        at: str | None,
        reason: str | None = None,
        record_id: str | None = None,
        was: str = "pending",
    ) -> bool:
        """Move a proposal from ``was`` to ``status`` (with who, when, why and what it wrote);
        False when it is not in ``was`` (another reviewer decided it first)."""
        with self._write() as conn:
            done = conn.execute(
                self.D.q(
                    "UPDATE proposals SET status = ?, decided_by = ?, decided_at = ?, reason = ?, "
                    "record_id = ? WHERE id = ? AND status = ? RETURNING id"
                ),
                (status, by, at, reason, record_id, proposal_id, was),
            ).fetchall()
        return bool(done)
