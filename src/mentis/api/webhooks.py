"""The webhook operations' inputs and outputs (create_webhook, list_webhooks, delete_webhook,
webhook_deliveries, redeliver_webhook); docs/webhooks.md describes them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from mentis.api.common import Identifier, Out, Strict
from mentis.ledger.bodies import THOUGHT_TYPES, AttemptStatus

EVENTS = (
    "attempt.recorded",
    "conclusion.outdated",
    "attempt.forgotten",
    "thought.appended",
    "thought.forgotten",
    "skill.uploaded",
    "skill.status",
    "branch.merged",
    "integrity.failed",
)
"""Every event a subscription may name (``branch.merged``: a merge entry, docs/branches.md)."""
Event = Literal[EVENTS]  # type: ignore[valid-type]
MAX_URL_CHARS = 2_048


def _url(value: str) -> str:
    if not value.lower().startswith(("https://", "http://")) or any(
        c.isspace() or ord(c) < 32 for c in value
    ):
        raise ValueError("must be an http(s) URL without spaces, e.g. https://hooks.example.com/mentis")
    return value


def _thought_type(value: str) -> str:
    if value not in THOUGHT_TYPES:
        raise ValueError(f"is not a thought type; one of {', '.join(THOUGHT_TYPES)}")
    return value


WebhookId = Annotated[str, Field(pattern=r"^wh_[0-9a-f]{16}$")]
DeliveryId = Annotated[str, Field(min_length=1, max_length=400, pattern=r"^msg_[A-Za-z0-9_.:-]+$")]


class CreateWebhookInput(Strict):
    url: Annotated[str, Field(min_length=1, max_length=MAX_URL_CHARS), AfterValidator(_url)]
    events: list[Event] = Field(min_length=1, max_length=len(EVENTS))
    token_id: Annotated[str, Field(pattern=r"^[0-9a-f]{12}$")]
    repository: Identifier | None = None
    status: AttemptStatus | None = None
    thought_type: Annotated[str, AfterValidator(_thought_type)] | None = None
    ids_only: bool = False


class WebhookRef(Strict):
    webhook_id: WebhookId


class ListWebhooksInput(Strict):
    pass


class DeliveriesInput(Strict):
    webhook_id: WebhookId | None = None
    state: Literal["pending", "delivered", "dead", "skipped"] | None = None
    limit: int = Field(20, ge=1, le=200)


class RedeliverInput(Strict):
    delivery_id: DeliveryId


# ---------------------------------------------------------------- outputs


class WebhookOut(Out):
    webhook_id: str
    url: str
    events: list[str]
    token_id: str
    repository: str | None
    status: str | None
    thought_type: str | None
    ids_only: bool
    created_at: str
    created_by: str


class CreateWebhookResult(Out):
    webhook_id: str
    secret: str


class ListWebhooksResult(Out):
    webhooks: list[WebhookOut]


class DeleteWebhookResult(Out):
    deleted: str


class DeliveryOut(Out):
    delivery_id: str
    webhook_id: str
    event: str
    repository: str
    record_id: str
    state: str
    attempts: int
    last_status: int | None
    last_error: str | None
    next_at: float
    delivered_at: float | None


class RedeliverResult(Out):
    delivery_id: str
    state: str


class DeliveriesResult(Out):
    deliveries: list[DeliveryOut]
