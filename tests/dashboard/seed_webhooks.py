"""Webhook deliveries for the dashboard tests: a subscription to a real loopback receiver that
always answers 500, an attempt recorded after it, and a deliverer (one attempt allowed) run until
the delivery is dead, the way tests/webhooks/ drive the store's outbox."""

from __future__ import annotations

from dataclasses import dataclass

from mentis.api.attempts import RecordAttemptInput
from mentis.api.webhooks import CreateWebhookInput, DeliveriesInput
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore
from mentis.service.webhook_rules import WebhookSettings
from mentis.service.webhooks import Deliverer
from tests.dashboard.seed import SHOP
from tests.webhooks.conftest import Receiver

OPS = Caller(agent_id="ops", admin=True)
ONE_TRY = WebhookSettings(max_attempts=1, backoff_s=0.01, timeout_s=5.0)


@dataclass
class DeadLetter:
    webhook_id: str
    delivery_id: str


def subscribe(memory: Memory, tokens: TokenStore, url: str) -> str:
    _, token = tokens.create(scope="read", repositories=("*",), agent="hook-reader")
    req = CreateWebhookInput(url=url, events=["attempt.recorded"], token_id=token.id)
    return memory.create_webhook(OPS, req).webhook_id


def deliver(memory: Memory, tokens: TokenStore, rules: WebhookSettings = ONE_TRY) -> None:
    """Run a deliverer until nothing is due."""
    deliverer = Deliverer(memory.store, tokens, rules)
    try:
        while deliverer.run_once():
            pass
    finally:
        deliverer.close()


def dead_letter(memory: Memory, tokens: TokenStore, receiver: Receiver) -> DeadLetter:
    """A subscription of ``receiver`` (which must answer 500) whose one delivery is dead."""
    webhook_id = subscribe(memory, tokens, receiver.url)
    req = RecordAttemptInput(repository=SHOP, task_id="hooked", action="ran it", observation="it broke")
    memory.record_attempt(Caller(agent_id="writer"), req)
    deliver(memory, tokens)
    (dead,) = memory.webhook_deliveries(OPS, DeliveriesInput(webhook_id=webhook_id, state="dead")).deliveries
    return DeadLetter(webhook_id, dead.delivery_id)


__all__ = ["OPS", "DeadLetter", "dead_letter", "deliver", "subscribe"]
