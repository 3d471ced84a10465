"""``mentis webhook``: webhook subscriptions and their deliveries (create, list, delete,
deliveries, redeliver); docs/webhooks.md."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mentis.cli.common import DbOpt, JsonOpt, err, run_op

commands = typer.Typer()
webhook_app = typer.Typer(
    name="webhook",
    help="Webhooks: signed HTTP deliveries of new records to a URL, bounded by a token's read scope.",
    no_args_is_help=True,
)
commands.add_typer(webhook_app)

HookOpt = Annotated[str, typer.Option("--id", help="The subscription's id (wh_…).")]


def _table(hooks: list[Any]) -> None:
    table = Table("id", "url", "events", "token", "filters", "payload")
    for h in hooks:
        filters = " ".join(
            f"{k}={v}" for k in ("repository", "status", "thought_type") if (v := getattr(h, k))
        )
        table.add_row(
            h.webhook_id, h.url, ",".join(h.events), h.token_id, filters, "ids" if h.ids_only else "full"
        )
    Console().print(table)


@webhook_app.command("create")
def create(
    url: Annotated[str, typer.Option(help="Where to POST: https://…, or http:// to loopback.")],
    event: Annotated[list[str], typer.Option(help="An event to send (repeatable), e.g. attempt.recorded.")],
    token_id: Annotated[str, typer.Option("--token-id", help="The token whose read scope bounds it.")],
    repository: Annotated[str | None, typer.Option(help="Only repositories matching this glob.")] = None,
    status: Annotated[str | None, typer.Option(help="Only attempts with this status.")] = None,
    thought_type: Annotated[str | None, typer.Option(help="Only thoughts of this type.")] = None,
    ids_only: Annotated[bool, typer.Option("--ids-only", help="Send ids, not the record.")] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Subscribe a URL (the create_webhook tool); prints the signing secret once."""
    data: dict[str, Any] = {
        "url": url,
        "events": event,
        "token_id": token_id,
        "repository": repository,
        "status": status,
    }
    data |= {"thought_type": thought_type, "ids_only": ids_only}

    def human(r: Any) -> None:
        Console().print(f"{r.webhook_id}\n{r.secret}", highlight=False)
        err.print(
            "the secret is shown only now: keep it where the receiver checks signatures", highlight=False
        )

    run_op("create_webhook", db, as_json, {k: v for k, v in data.items() if v is not None}, human)


@webhook_app.command("list")
def list_webhooks(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List the subscriptions (the list_webhooks tool); secrets are never shown again."""
    run_op("list_webhooks", db, as_json, {}, lambda r: _table(r.webhooks))


@webhook_app.command("delete")
def delete(webhook_id: HookOpt, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a subscription and its pending deliveries (the delete_webhook tool)."""
    run_op("delete_webhook", db, as_json, {"webhook_id": webhook_id}, lambda r: Console().print(r.deleted))


def _deliveries(rows: list[Any]) -> None:
    table = Table("delivery", "event", "repository", "state", "attempts", "last error")
    for d in rows:
        table.add_row(d.delivery_id, d.event, d.repository, d.state, str(d.attempts), d.last_error or "")
    Console().print(table)


@webhook_app.command("deliveries")
def deliveries(
    webhook_id: Annotated[str | None, typer.Option("--id", help="Only this subscription's.")] = None,
    state: Annotated[str | None, typer.Option(help="pending, delivered, dead or skipped.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 20,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recent deliveries and their state (the webhook_deliveries tool)."""
    data = {
        k: v for k, v in {"webhook_id": webhook_id, "state": state, "limit": limit}.items() if v is not None
    }
    run_op("webhook_deliveries", db, as_json, data, lambda r: _deliveries(r.deliveries))


@webhook_app.command("redeliver")
def redeliver(
    delivery_id: Annotated[str, typer.Option("--delivery", help="The delivery's id (msg_…).")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Queue a delivery again now, e.g. a dead one (the redeliver_webhook tool)."""
    run_op("redeliver_webhook", db, as_json, {"delivery_id": delivery_id}, lambda r: Console().print(r.state))
