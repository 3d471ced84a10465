"""Webhooks: subscriptions (admin only), the deliveries the store's outbox holds, and the worker
that sends them (docs/webhooks.md).

A subscription names a URL, the events it takes, optional filters, whether it wants the record or
only ids, and the token whose read scope bounds it: before every delivery the worker looks the
token up (revoked, expired or deleted: nothing is sent) and applies :func:`may_read` to the
record's repository and the token's private scopes to the record (another agent's private record,
or a correction of one, is skipped), so a webhook never delivers what that token may not read.
The outbox row is written in the transaction that appends the record
(``mentis.store.shared.webhooks``); the worker claims due rows with a lease, signs each as Standard
Webhooks 1.0.0 says, POSTs it (no redirect followed) and retries with exponential backoff and
jitter up to ``MENTIS_WEBHOOK_MAX_ATTEMPTS``; then the row is dead, with its last error, until
``redeliver_webhook``.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from typing import Any

import httpx
import orjson

from mentis.api.webhooks import (
    CreateWebhookInput,
    CreateWebhookResult,
    DeleteWebhookResult,
    DeliveriesInput,
    DeliveriesResult,
    DeliveryOut,
    ListWebhooksInput,
    ListWebhooksResult,
    RedeliverInput,
    RedeliverResult,
    WebhookOut,
    WebhookRef,
)
from mentis.errors import Forbidden, IntegrityError, InvalidInput, MentisError, NotFound
from mentis.service.access import Caller, may_admin, may_read
from mentis.service.branches import graph_views
from mentis.service.context import ServiceContext
from mentis.service.tokens import TokenStore
from mentis.service.webhook_rules import WebhookSettings, check_target, new_secret, sign
from mentis.store.protocol import DeliveryRow, Store, WebhookRow

log = logging.getLogger(__name__)

LEASE_S = 120.0
"""How long a claimed delivery is held by its worker (longer than a batch of timeouts)."""
BATCH = 8
PRUNE_EVERY_S = 3600.0
"""How often a worker deletes the delivered and skipped rows older than ``MENTIS_WEBHOOK_KEEP_DAYS``."""


def webhook_out(row: WebhookRow) -> WebhookOut:
    return WebhookOut(
        webhook_id=row.id,
        url=row.url,
        events=list(row.events),
        token_id=row.token_id,
        repository=row.repository,
        status=row.status,
        thought_type=row.thought_type,
        ids_only=row.mode == "ids",
        created_at=row.created_at,
        created_by=row.created_by,
    )


def delivery_out(row: DeliveryRow) -> DeliveryOut:
    return DeliveryOut(
        delivery_id=row.id,
        webhook_id=row.webhook_id,
        event=row.event,
        repository=row.chain,
        record_id=row.record_id,
        state=row.state,
        attempts=row.attempts,
        last_status=row.last_status,
        last_error=row.last_error,
        next_at=row.next_at,
        delivered_at=row.delivered_at,
    )


class WebhookOps:
    """The subscription operations (every one needs admin scope) over one :class:`ServiceContext`."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def create_webhook(self, caller: Caller, req: CreateWebhookInput) -> CreateWebhookResult:
        may_admin(caller)
        rules = WebhookSettings.of(self.ctx.settings)
        check_target(req.url, rules)
        tokens = TokenStore.open(self.ctx.settings)
        try:
            token = tokens.get(req.token_id)
        finally:
            tokens.close()
        if token is None or token.status() != "active":
            state = "no such token" if token is None else f"the token is {token.status()}"
            raise InvalidInput(
                f"token_id {req.token_id!r}: {state}; `mentis token list` shows them", field="token_id"
            )
        row = WebhookRow(
            id="wh_" + secrets.token_hex(8),
            url=req.url,
            events=tuple(dict.fromkeys(req.events)),
            repository=req.repository,
            status=req.status,
            thought_type=req.thought_type,
            mode="ids" if req.ids_only else "full",
            token_id=req.token_id,
            secret=new_secret(),
            created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            created_by=caller.agent_id,
        )
        self.ctx.store.webhook_insert(row)
        return CreateWebhookResult(webhook_id=row.id, secret=row.secret)

    def list_webhooks(self, caller: Caller, req: ListWebhooksInput) -> ListWebhooksResult:
        may_admin(caller)
        return ListWebhooksResult(webhooks=[webhook_out(r) for r in self.ctx.store.webhook_rows()])

    def delete_webhook(self, caller: Caller, req: WebhookRef) -> DeleteWebhookResult:
        may_admin(caller)
        if not self.ctx.store.webhook_delete(req.webhook_id):
            raise NotFound(f"no webhook {req.webhook_id!r}; list_webhooks shows them")
        return DeleteWebhookResult(deleted=req.webhook_id)

    def webhook_deliveries(self, caller: Caller, req: DeliveriesInput) -> DeliveriesResult:
        may_admin(caller)
        rows = self.ctx.store.outbox_rows(req.webhook_id, req.state, req.limit)
        return DeliveriesResult(deliveries=[delivery_out(r) for r in rows])

    def redeliver_webhook(self, caller: Caller, req: RedeliverInput) -> RedeliverResult:
        may_admin(caller)
        row = self.ctx.store.outbox_redeliver(req.delivery_id)
        if row is None:
            raise NotFound(f"no delivery {req.delivery_id!r}; webhook_deliveries shows them")
        return RedeliverResult(delivery_id=row.id, state=row.state)


# ---------------------------------------------------------------- delivery


def _record_fields(event: str, record: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(attempt status, thought type) of the record an event announces, where it has one."""
    if record is None:
        return None, None
    if event == "attempt.recorded":
        check = record.get("check") or {}
        return str(check.get("status") or "unverified"), None
    if event == "thought.appended":
        return None, str(record.get("type"))
    return None, None


class Deliverer:
    """Sends the deliveries of one store: :meth:`run_once` claims due rows and sends each."""

    def __init__(self, store: Store, tokens: TokenStore, rules: WebhookSettings) -> None:
        self.store, self.tokens, self.rules = store, tokens, rules
        self.client = httpx.Client(follow_redirects=False, timeout=rules.timeout_s, trust_env=False)
        self.pruned_at = 0.0

    def close(self) -> None:
        self.client.close()

    def run_once(self) -> int:
        """Claim and send the due deliveries (a batch); returns how many were claimed."""
        now = time.time()
        if now - self.pruned_at >= PRUNE_EVERY_S:
            self.pruned_at = now
            self.store.outbox_prune(now - self.rules.keep_days * 86_400)
        if not self.store.outbox_due(now):
            return 0
        rows = self.store.outbox_claim(now, LEASE_S, BATCH)
        for row in rows:
            self._deliver(row)
        return len(rows)

    def _payload(self, row: DeliveryRow, hook: WebhookRow) -> tuple[bytes | None, str]:
        """The body to send, or None and why it must not be sent."""
        token = self.tokens.get(hook.token_id)
        if token is None or token.status() != "active":
            return None, f"token {hook.token_id} is {'gone' if token is None else token.status()}"
        reader = token.caller().branching(
            *graph_views(self.store.branch_graph())
        )  # R's token reads R's branches
        try:
            may_read(reader, row.chain)
        except (Forbidden, MentisError) as exc:
            return None, f"outside the token's read scope: {exc}"
        if hook.repository is not None and not fnmatchcase(row.chain, hook.repository):
            return None, f"repository {row.chain!r} does not match {hook.repository!r}"
        if row.event == "integrity.failed":  # no record: the chain and the seq that failed
            failed = {
                "repository": row.chain,
                "seq": int(row.record_id),
                "hint": "run `mentis verify-integrity`",
            }
            return orjson.dumps({"type": row.event, "timestamp": row.at, "data": failed}), ""
        entry, raw = self.store.outbox_entry(row.entry_rowid)
        record = None if raw is None else orjson.loads(raw)
        private = self._private_to_others(reader, row, record)
        if private is not None:
            return None, private
        status, thought_type = _record_fields(row.event, record)
        if hook.status is not None and status is not None and status != hook.status:
            return None, f"status {status} is not {hook.status}"
        if hook.thought_type is not None and thought_type is not None and thought_type != hook.thought_type:
            return None, f"thought type {thought_type} is not {hook.thought_type}"
        data: dict[str, Any] = {
            "repository": row.chain,
            "record_id": row.record_id,
            "entry": {
                "kind": entry.kind,
                "seq": entry.seq,
                "hash": entry.hash,
                "at": entry.at,
                "agent": entry.agent,
            },
        }
        if hook.mode == "full":
            data["record"] = record  # None once forgotten: the content is erased
        return orjson.dumps({"type": row.event, "timestamp": entry.at, "data": data}), ""

    def _private_to_others(
        self, caller: Caller, row: DeliveryRow, record: dict[str, Any] | None
    ) -> str | None:
        """Why ``caller`` may not receive this event (a private record, or a correction of one,
        outside its scope: docs/scopes.md), or None. The scope is the record's as it stands now."""
        ids = {row.record_id}
        if record is not None:
            ids |= {str(record[k]) for k in ("attempt_id", "thought_id") if isinstance(record.get(k), str)}
        for record_id, scope in self.store.record_scopes(sorted(ids)).items():
            if not caller.reads(row.chain, scope):
                return f"record {record_id} is private to another agent or session"
        return None

    def _deliver(self, row: DeliveryRow) -> None:
        hooks = self.store.webhook_rows(row.webhook_id)
        if not hooks:
            self.store.outbox_settle(row.id, "skipped", row.next_at, "the subscription was deleted", None)
            return
        hook = hooks[0]
        try:
            body, why = self._payload(row, hook)
        except IntegrityError as exc:  # the record's entry or body changed: nothing unverified is sent
            body, why = None, str(exc)
        if body is None:
            self.store.outbox_settle(row.id, "skipped", row.next_at, why, None)
            return
        status: int | None = None
        try:
            target = check_target(hook.url, self.rules)
            stamp = int(time.time())
            headers = {
                "content-type": "application/json",
                "host": target.host_header(),
                "user-agent": "mentis-webhooks",
                "webhook-id": row.id,
                "webhook-timestamp": str(stamp),
                "webhook-signature": sign(hook.secret, row.id, stamp, body),
            }
            extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
            answer = self.client.post(
                target.pinned_url(), content=body, headers=headers, extensions=extensions
            )
            status = answer.status_code
            if 200 <= status < 300:
                self.store.outbox_settle(row.id, "delivered", row.next_at, None, status)
                return
            where = answer.headers.get("location")
            error = f"HTTP {status}" + (f" redirect to {where[:200]!r} not followed" if where else "")
        except (httpx.HTTPError, InvalidInput, OSError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        if row.attempts >= self.rules.max_attempts or status == 410:  # 410 Gone: the receiver opted out
            self.store.outbox_settle(row.id, "dead", row.next_at, error, status)
        else:
            self.store.outbox_settle(
                row.id, "pending", time.time() + self.rules.backoff(row.attempts), error, status
            )


class WebhookWorker:
    """A daemon thread running a :class:`Deliverer` every ``poll_s`` until :meth:`stop`."""

    def __init__(self, store: Store, tokens: TokenStore, rules: WebhookSettings) -> None:
        self.deliverer = Deliverer(store, tokens, rules)
        self.poll_s = rules.poll_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mentis-webhooks", daemon=True)

    def start(self) -> WebhookWorker:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.deliverer.run_once():
                    continue
            except Exception:  # a store or network fault: logged, retried at the next poll
                log.exception("webhook delivery round failed")
            self._stop.wait(self.poll_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.deliverer.close()


__all__ = ["Deliverer", "WebhookOps", "WebhookWorker"]
