"""``mentis migrate``: copy a store to another backend, verifying before and after."""

from __future__ import annotations

from typing import Annotated

import typer

from mentis.cli import _errors, app, err, progress
from mentis.config import Settings


@app.command()
def migrate(
    source: Annotated[str, typer.Option("--from", help="sqlite:PATH or postgresql://… (the store to copy).")],
    target: Annotated[str, typer.Option("--to", help="sqlite:PATH or postgresql://… (an empty store).")],
) -> None:
    """Copy every chain to another store (SQLite ⇄ PostgreSQL); hashes are kept and both are verified."""
    from mentis.migrate import migrate as run
    from mentis.migrate import store_settings

    base = Settings.from_env()
    with _errors(), progress() as bar:
        job = bar.add_task("migrating", total=None)
        count = run(
            store_settings(source, base), store_settings(target, base), None, lambda n: bar.advance(job, n)
        )
    err.print(
        f"migrated {count} ledger entries; both stores verify and hold the same chains", highlight=False
    )
