"""``mentis entity-type``: the entity-type registry (list, upsert): what a thought may be about."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mentis.cli.common import DbOpt, JsonOpt, run_op

commands = typer.Typer()
entity_type_app = typer.Typer(
    name="entity-type",
    help="The entity-type registry: what a thought's --entity-type may name (built in, or registered).",
    no_args_is_help=True,
)
commands.add_typer(entity_type_app)


def _table(types: list[Any]) -> Table:
    table = Table("name", "description", "origin")
    for t in types:
        origin = f"{t.updated_by} at {t.updated_at}" if t.updated_at else "built in"
        table.add_row(t.name, t.description, origin)
    return table


@entity_type_app.command("list")
def list_entity_types(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List the entity types, built in and registered (the list_entity_types tool)."""
    run_op("list_entity_types", db, as_json, {}, lambda r: Console().print(_table(r.entity_types)))


@entity_type_app.command("upsert")
def upsert_entity_type(
    name: Annotated[str, typer.Argument(help="Lowercase name, e.g. queue or feature-flag.")],
    description: Annotated[str, typer.Option(help="What a thought of this type is about.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Register an entity type, or (admin) replace its description (the upsert_entity_type tool)."""
    run_op(
        "upsert_entity_type",
        db,
        as_json,
        {"name": name, "description": description},
        lambda r: Console().print(_table([r.entity_type])),
    )
