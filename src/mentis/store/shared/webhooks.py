"""Webhook subscriptions and their outbox, in the store's own database beside the ledger.

Two tables, the same on both backends, outside the ledger (subscriptions are configuration and
hold a signing secret: no entry, no export, no ``recall`` view; docs/webhooks.md says why):

- ``webhooks``: one row per subscription: its URL, the events it takes (a JSON list), its
  filters, payload mode, the token whose read scope bounds it, and its secret.
- ``webhook_outbox``: one row per (ledger entry, subscription) to deliver, written by
  :meth:`WebhookCore._announce` inside the very transaction that appends the entry (called by
  ``LedgerCore._append``), so a committed record always has its deliveries and a rolled-back
  one has none. A worker claims due rows with a lease (:meth:`WebhookCore.outbox_claim`: one
  write transaction; on PostgreSQL ``FOR UPDATE SKIP LOCKED``), so two workers on one store
  never hold the same row at once.

With no subscription the announcement is one ``SELECT`` over an empty table.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from mentis.errors import IntegrityError, MentisError
from mentis.ledger.canonical import sha256_hex
from mentis.ledger.entry import Entry, entry_hash
from mentis.store.protocol import DeliveryRow, WebhookRow
from mentis.store.shared.agents import AgentCore
from mentis.store.shared.backend import ConnT

log = logging.getLogger(__name__)

WEBHOOK_TABLES = ("webhooks", "webhook_outbox")
_ENTRY_COLS = "e.v, e.chain, e.seq, e.kind, e.id, e.at, e.agent, e.prev, e.body_hash, e.key_id, e.sig, e.hash"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS webhooks(
    id TEXT PRIMARY KEY, url TEXT NOT NULL, events TEXT NOT NULL, repository TEXT, status TEXT,
    thought_type TEXT, mode TEXT NOT NULL, token_id TEXT NOT NULL, secret TEXT NOT NULL,
    created_at TEXT NOT NULL, created_by TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS webhook_outbox(
    id TEXT PRIMARY KEY, webhook_id TEXT NOT NULL, event TEXT NOT NULL, chain TEXT NOT NULL,
    entry_rowid {int} NOT NULL, record_id TEXT NOT NULL, at TEXT NOT NULL, state TEXT NOT NULL,
    attempts INTEGER NOT NULL, next_at {real} NOT NULL, lease_until {real} NOT NULL,
    last_error TEXT, last_status INTEGER, created {real} NOT NULL, delivered_at {real});
CREATE INDEX IF NOT EXISTS webhook_outbox_due ON webhook_outbox(state, next_at);
CREATE INDEX IF NOT EXISTS webhook_outbox_hook ON webhook_outbox(webhook_id, created);
"""
SQLITE_WEBHOOK_SCHEMA = _SCHEMA.format(int="INTEGER", real="REAL")
POSTGRES_WEBHOOK_SCHEMA = _SCHEMA.format(int="bigint", real="double precision")

ENTRY_EVENTS = {
    "attempt": "attempt.recorded",
    "correction": "conclusion.outdated",
    "thought": "thought.appended",
    "skill": "skill.uploaded",
    "skill_status": "skill.status",
    "merge": "branch.merged",
}
"""The event each kind of ledger entry announces (a forget's depends on what it erased)."""
FORGET_EVENTS = {
    "attempt_id": "attempt.forgotten",
    "thought_id": "thought.forgotten",
    "skill_id": "skill.status",
}

_NOT_ID = re.compile(r"[^A-Za-z0-9-]")
"""What a message id may not hold (Standard Webhooks signs ``{id}.{timestamp}.{body}``: no dots)."""
_TAKERS = "SELECT id FROM webhooks WHERE events LIKE ?"
"""The subscriptions taking an event (``events`` is a JSON list: the pattern is the quoted name)."""
_OUTBOX_INSERT = (
    "INSERT INTO webhook_outbox(id, webhook_id, event, chain, entry_rowid, record_id, at, state, attempts, "
    "next_at, lease_until, created) VALUES(?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, 0, ?)"
)
_DAMAGE_SQL = (
    "INSERT INTO webhook_outbox(id, webhook_id, event, chain, entry_rowid, record_id, at, state, attempts, "
    "next_at, lease_until, created) SELECT CAST(? AS TEXT) || w.id, w.id, 'integrity.failed', ?, -1, ?, ?, "
    "'pending', 0, ?, 0, ? FROM webhooks w WHERE w.events LIKE ? ON CONFLICT(id) DO NOTHING"
)
_HOOK_COLS = (
    "id, url, events, repository, status, thought_type, mode, token_id, secret, created_at, created_by"
)
_OUT_COLS = (
    "id, webhook_id, event, chain, entry_rowid, record_id, at, state, attempts, next_at, last_error, "
    "last_status, created, delivered_at"
)


def _hook(row: Sequence[Any]) -> WebhookRow:
    id_, url, events, *rest = row
    return WebhookRow._make((id_, url, tuple(orjson.loads(events)), *rest))


def _entry(r: Sequence[Any]) -> Entry:
    return Entry(
        v=r[0],
        chain=r[1],
        seq=r[2],
        kind=r[3],
        id=r[4],
        at=r[5],
        agent=r[6],
        prev=r[7],
        body_hash=r[8],
        key_id=r[9],
        sig=r[10],
        hash=r[11],
    )


def _delivery(row: Sequence[Any]) -> DeliveryRow:
    return DeliveryRow(*row)


def event_of(kind: str, body: bytes) -> str | None:
    """The event a new ledger entry of ``kind`` with ``body`` announces (None: none)."""
    if kind == "forget":
        record = orjson.loads(body)
        return next((e for key, e in FORGET_EVENTS.items() if record.get(key)), None)
    return ENTRY_EVENTS.get(kind)


class WebhookCore(AgentCore[ConnT]):
    """The subscriptions and the outbox (``self`` is the store)."""

    def _announce(self, conn: ConnT, entry: Entry, rowid: int, body: bytes) -> None:
        """Inside the append's transaction: one outbox row per subscription taking the event."""
        event = event_of(entry.kind, body)
        if event is None:
            return
        hooks = conn.execute(self.D.q(_TAKERS), (f'%"{event}"%',)).fetchall()
        if not hooks:  # the common case: one read of an empty (or small) table, nothing written
            return
        now, prefix = time.time(), f"msg_{_NOT_ID.sub('-', entry.id)}_"
        for (hook,) in hooks:
            args = (prefix + str(hook), hook, event, entry.chain, rowid, entry.id, entry.at, now, now)
            conn.execute(self.D.q(_OUTBOX_INSERT), args)

    def announce_damage(self, damaged: Mapping[str, IntegrityError]) -> None:
        """``integrity.failed`` for each chain in ``damaged`` (one that does not verify), once per
        (chain, failing seq) and subscription however often it is found (the message id says
        which); a store that cannot take the row now only logs it."""
        now = time.time()
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            with self._write() as conn:
                for chain, failure in damaged.items():
                    seq = -1 if failure.seq is None else failure.seq
                    ids = f"msg_integrity-{_NOT_ID.sub('-', chain)}-{seq}_"
                    args = (ids, chain, str(seq), at, now, now, '%"integrity.failed"%')
                    conn.execute(self.D.q(_DAMAGE_SQL), args)
        except MentisError as exc:
            log.warning("could not queue integrity.failed webhooks: %s", exc)

    # ------------------------------------------------------------ subscriptions

    def webhook_insert(self, row: WebhookRow) -> None:
        values = (*row[:2], orjson.dumps(list(row.events)).decode(), *row[3:])
        with self._write() as conn:
            conn.execute(self.D.q(f"INSERT INTO webhooks({_HOOK_COLS}) VALUES({','.join('?' * 11)})"), values)

    def webhook_rows(self, webhook_id: str | None = None) -> list[WebhookRow]:
        where, args = ("WHERE id = ?", (webhook_id,)) if webhook_id else ("", ())
        with self._peek() as conn:
            rows = conn.execute(
                self.D.q(f"SELECT {_HOOK_COLS} FROM webhooks {where} ORDER BY created_at, id"), args
            )
            return [_hook(r) for r in rows]

    def webhook_delete(self, webhook_id: str) -> bool:
        """Delete a subscription and the deliveries it still had; False when there is none."""
        with self._write() as conn:
            gone = conn.execute(
                self.D.q("DELETE FROM webhooks WHERE id = ? RETURNING id"), (webhook_id,)
            ).fetchall()
            conn.execute(self.D.q("DELETE FROM webhook_outbox WHERE webhook_id = ?"), (webhook_id,))
        return bool(gone)

    # ------------------------------------------------------------ the outbox

    def outbox_rows(self, webhook_id: str | None, state: str | None, limit: int) -> list[DeliveryRow]:
        """The newest deliveries, of one subscription and/or in one state."""
        conds, args = [], []
        for column, value in (("webhook_id", webhook_id), ("state", state)):
            if value is not None:
                conds.append(f"{column} = ?")
                args.append(value)
        where = f"WHERE {' AND '.join(conds)}" if conds else ""
        sql = f"SELECT {_OUT_COLS} FROM webhook_outbox {where} ORDER BY created DESC, id LIMIT ?"
        with self._peek() as conn:
            return [_delivery(r) for r in conn.execute(self.D.q(sql), (*args, limit))]

    def outbox_due(self, now: float) -> bool:
        """Whether any pending delivery is due and unleased (a cheap read before a claim)."""
        with self._peek() as conn:
            row = conn.execute(
                self.D.q(
                    "SELECT 1 FROM webhook_outbox WHERE state = 'pending' AND next_at <= ? "
                    "AND lease_until <= ? LIMIT 1"
                ),
                (now, now),
            ).fetchone()
        return row is not None

    def outbox_claim(self, now: float, lease_s: float, limit: int) -> list[DeliveryRow]:
        """Claim up to ``limit`` due deliveries for ``lease_s`` seconds, counting the attempt."""
        lock = " FOR UPDATE SKIP LOCKED" if self.D.postgres else ""
        sql = (
            f"UPDATE webhook_outbox SET lease_until = ?, attempts = attempts + 1 WHERE id IN ("
            "SELECT id FROM webhook_outbox WHERE state = 'pending' AND next_at <= ? AND lease_until <= ? "
            f"ORDER BY next_at LIMIT ?{lock}) RETURNING {_OUT_COLS}"
        )
        with self._write() as conn:
            return [_delivery(r) for r in conn.execute(self.D.q(sql), (now + lease_s, now, now, limit))]

    def outbox_settle(
        self, delivery_id: str, state: str, next_at: float, error: str | None, status: int | None
    ) -> None:
        """Record one attempt's outcome: ``delivered``, ``pending`` again at ``next_at``, ``dead``
        or ``skipped``; the lease is released."""
        delivered = time.time() if state == "delivered" else None
        with self._write() as conn:
            conn.execute(
                self.D.q(
                    "UPDATE webhook_outbox SET state = ?, next_at = ?, lease_until = 0, last_error = ?, "
                    "last_status = ?, delivered_at = ? WHERE id = ?"
                ),
                (state, next_at, error, status, delivered, delivery_id),
            )

    def outbox_redeliver(self, delivery_id: str) -> DeliveryRow | None:
        """Queue a delivery again now, its attempts counted afresh; None when there is none."""
        with self._write() as conn:
            rows = conn.execute(
                self.D.q(
                    "UPDATE webhook_outbox SET state = 'pending', attempts = 0, next_at = ?, "
                    f"lease_until = 0, delivered_at = NULL WHERE id = ? RETURNING {_OUT_COLS}"
                ),
                (time.time(), delivery_id),
            ).fetchall()
        return _delivery(rows[0]) if rows else None

    def outbox_prune(self, before: float) -> int:
        """Delete the delivered and skipped rows settled before ``before`` (dead and pending stay)."""
        with self._write() as conn:
            gone = conn.execute(
                self.D.q(
                    "DELETE FROM webhook_outbox WHERE state IN ('delivered', 'skipped') "
                    "AND COALESCE(delivered_at, created) < ? RETURNING id"
                ),
                (before,),
            ).fetchall()
        return len(gone)

    def outbox_entry(self, rowid: int) -> tuple[Entry, bytes | None]:
        """The ledger entry ``rowid`` and its body (None once forgotten), both checked against
        the hashes the entry holds (IntegrityError otherwise)."""
        with self._read() as conn:
            row = conn.execute(
                self.D.q(
                    f"SELECT {_ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid "
                    "WHERE e.rowid = ?"
                ),
                (rowid,),
            ).fetchone()
        if row is None:
            raise IntegrityError(f"the outbox names ledger entry rowid {rowid}, which is not in the ledger")
        entry, raw = _entry(row), None if row[12] is None else bytes(row[12])
        if entry_hash(entry.document()) != entry.hash or (
            raw is not None and sha256_hex(raw) != entry.body_hash
        ):
            raise IntegrityError(
                f"ledger does not verify: chain {entry.chain!r} seq {entry.seq}; "
                "run `mentis verify-integrity`",
                chain=entry.chain,
                seq=entry.seq,
            )
        return entry, raw


__all__ = [
    "POSTGRES_WEBHOOK_SCHEMA",
    "SQLITE_WEBHOOK_SCHEMA",
    "WEBHOOK_TABLES",
    "WebhookCore",
    "event_of",
]
