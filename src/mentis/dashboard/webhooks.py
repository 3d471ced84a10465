"""The dashboard's webhook pages (admin only): the subscriptions, a form that creates one and shows
its signing secret once, delete with a confirmation tick, each subscription's recent deliveries
(filtered by state, dead letters among them) and the redeliver button.

Every form calls the service's webhook operations with the session's caller: the service decides
who may (admin scope) and validates the input (the URL's target, the events, the filters, the
token), so a refused or invalid form shows the service's message and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mentis.api.common import parse
from mentis.api.webhooks import (
    EVENTS,
    CreateWebhookInput,
    DeliveriesInput,
    ListWebhooksInput,
    RedeliverInput,
    WebhookRef,
)
from mentis.dashboard.core import Ctx, State, form_text, param, redirect, render
from mentis.errors import InvalidInput, NotFound
from mentis.ledger.bodies import THOUGHT_TYPES
from mentis.service.token_admin import list_tokens

Form = Mapping[str, str]
STATES = ("pending", "delivered", "dead", "skipped")
ATTEMPT_STATUSES = ("passed", "failed", "unverified")
EVENT_FIELD = "event:"
"""Each event's checkbox is its own field (``event:attempt.recorded=on``): a form is one value a name."""
LIMIT = 50
MAX_DEAD = 200
"""The dead letters the list page counts (the most ``webhook_deliveries`` returns at once)."""


def epoch(seconds: float | None) -> str:
    """Seconds since the epoch → ``2026-12-01 22:46:15 UTC``."""
    if seconds is None:
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def create_data(form: Form) -> dict[str, Any]:
    """The create form as :class:`CreateWebhookInput` data: blank optional fields left out, the
    ticked events in order (an unknown one posted anyway is passed on for the service to refuse)."""
    data: dict[str, Any] = {
        "url": form_text(form, "url"),
        "events": [name[len(EVENT_FIELD) :] for name in form if name.startswith(EVENT_FIELD)],
        "token_id": form_text(form, "token_id"),
        "ids_only": form.get("ids_only") == "yes",
    }
    for name in ("repository", "status", "thought_type"):
        if value := form_text(form, name):
            data[name] = value
    return data


class WebhookPages:
    """``/webhooks`` (list, create, delete) and ``/webhook`` (one subscription's deliveries)."""

    def __init__(self, state: State) -> None:
        self.state = state

    def webhooks(
        self,
        request: Request,
        ctx: Ctx,
        form: Form,
        created: tuple[str, str] | None = None,
    ) -> Response:
        hooks = self.state.memory.list_webhooks(ctx.caller, ListWebhooksInput()).webhooks
        tokens = list_tokens(ctx.caller, self.state.tokens) if self.state.tokens is not None else []
        req = parse(DeliveriesInput, {"state": "dead", "limit": MAX_DEAD})
        dead: dict[str, int] = {}
        for d in self.state.memory.webhook_deliveries(ctx.caller, req).deliveries:
            dead[d.webhook_id] = dead.get(d.webhook_id, 0) + 1
        return render(
            self.state,
            ctx,
            "webhooks.html",
            nav="webhooks",
            hooks=hooks,
            dead=dead,
            max_dead=MAX_DEAD,
            tokens=[t for t in tokens if t.status() == "active"],
            events=EVENTS,
            statuses=ATTEMPT_STATUSES,
            thought_types=THOUGHT_TYPES,
            created=created,
        )

    def webhook(self, request: Request, ctx: Ctx, form: Form) -> Response:
        webhook_id = param(request, "id")
        if webhook_id is None:
            raise InvalidInput("the id parameter is required", "id")
        ref = parse(WebhookRef, {"webhook_id": webhook_id})
        state = param(request, "state")
        if state is not None and state not in STATES:
            raise InvalidInput(f"the state parameter must be one of {', '.join(STATES)}", "state")
        hooks = self.state.memory.list_webhooks(ctx.caller, ListWebhooksInput()).webhooks
        hook = next((h for h in hooks if h.webhook_id == ref.webhook_id), None)
        if hook is None:
            raise NotFound(f"webhook_id: no webhook {ref.webhook_id!r}; the Webhooks page lists them")
        req = parse(DeliveriesInput, {"webhook_id": ref.webhook_id, "state": state, "limit": LIMIT})
        deliveries = self.state.memory.webhook_deliveries(ctx.caller, req).deliveries
        return render(
            self.state,
            ctx,
            "webhook.html",
            nav="webhooks",
            h=hook,
            deliveries=deliveries,
            chosen=state,
            states=STATES,
            epoch=epoch,
            limit=LIMIT,
        )

    def create(self, request: Request, ctx: Ctx, form: Form) -> Response:
        req = parse(CreateWebhookInput, create_data(form))
        made = self.state.memory.create_webhook(ctx.caller, req)
        return self.webhooks(request, ctx, {}, created=(made.webhook_id, made.secret))

    def delete(self, request: Request, ctx: Ctx, form: Form) -> Response:
        ref = parse(WebhookRef, {"webhook_id": form_text(form, "webhook_id")})
        if form.get("confirm") != "yes":
            raise InvalidInput("confirm: tick the confirmation box to delete the webhook", "confirm")
        self.state.memory.delete_webhook(ctx.caller, ref)
        return redirect(f"{ctx.base}/webhooks")

    def redeliver(self, request: Request, ctx: Ctx, form: Form) -> Response:
        req = parse(RedeliverInput, {"delivery_id": form_text(form, "delivery_id")})
        back = form_text(form, "webhook_id")
        target = parse(WebhookRef, {"webhook_id": back}).webhook_id if back else None
        done = self.state.memory.redeliver_webhook(ctx.caller, req)
        if target is None:
            return redirect(f"{ctx.base}/webhooks")
        return redirect(f"{ctx.base}/webhook?{urlencode({'id': target})}#d-{done.delivery_id}")


__all__ = ["STATES", "WebhookPages", "create_data", "epoch"]
