"""Moving and regenerating a store: ``export``, ``import``, ``reindex``, ``rebuild`` and ``migrate``
(copy a store to another backend, verifying before and after)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from mentis.cli.common import DbOpt, err, errors, open_memory, progress, settings
from mentis.config import Settings
from mentis.service.memory import Memory

commands = typer.Typer()


@commands.command()
def export(
    output: Annotated[Path, typer.Argument(help="JSONL file to write ('-' for stdout).")],
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this chain.")] = None,
    skip_damaged: Annotated[
        bool,
        typer.Option("--skip-damaged", help="Leave out the chains that do not verify (see `mentis doctor`)."),
    ] = False,
    db: DbOpt = None,
) -> None:
    """Write the ledger and bodies as JSONL, verifiable offline and by `mentis import`."""
    with open_memory(db) as (memory, caller), errors(), progress() as bar:
        total = None if repository or skip_damaged else memory.store.counts()["entries"]
        job = bar.add_task("exporting", total=total)

        def write(out: BinaryIO) -> int:
            return memory.export(
                caller, out, repository, lambda n: bar.advance(job, n), skip_damaged=skip_damaged
            )

        if str(output) == "-":
            count = write(sys.stdout.buffer)
        else:
            with output.open("wb") as fh:
                count = write(fh)
    err.print(f"exported {count} entries", highlight=False)


@commands.command("import")
def import_(
    source: Annotated[
        Path, typer.Argument(help="A file written by `mentis export`.", exists=True, dir_okay=False)
    ],
    db: DbOpt = None,
) -> None:
    """Verify an export completely, then add its chains to this store (nothing is written if it fails)."""
    with (
        open_memory(db) as (memory, caller),
        errors(),
        source.open("rb") as fh,
        progress() as bar,
    ):
        job = bar.add_task("importing (embedding attempts and thoughts)", total=None)
        count = memory.import_(caller, fh, lambda n: bar.advance(job, n))
    err.print(f"imported {count} entries; store verified", highlight=False)


@commands.command()
def reindex(db: DbOpt = None) -> None:
    """Re-embed the whole store with the configured embedder (MENTIS_EMBEDDER), e.g. after a model change."""
    with errors():
        memory = Memory.open(settings(db), check_model=False, check_derived=False)
    try:
        with errors(), progress() as bar:
            job = bar.add_task(
                f"embedding with {memory.embedder.model_id}", total=memory.store.counts()["entries"]
            )
            count = memory.reindex(lambda n: bar.advance(job, n))
    finally:
        memory.close()
    err.print(
        f"re-embedded the store from {count} ledger entries with {memory.embedder.model_id}", highlight=False
    )


@commands.command()
def rebuild(db: DbOpt = None) -> None:
    """Regenerate every derived table (search indexes, vectors) from the ledger."""
    with open_memory(db, check_derived=False) as (memory, _), errors(), progress() as bar:
        job = bar.add_task("rebuilding", total=None)
        count = memory.rebuild(lambda n: bar.advance(job, n))
    err.print(f"rebuilt derived tables from {count} ledger entries", highlight=False)


@commands.command()
def migrate(
    source: Annotated[str, typer.Option("--from", help="sqlite:PATH or postgresql://… (the store to copy).")],
    target: Annotated[str, typer.Option("--to", help="sqlite:PATH or postgresql://… (an empty store).")],
) -> None:
    """Copy every chain to another store (SQLite ⇄ PostgreSQL); hashes are kept and both are verified."""
    from mentis.service.migrate import migrate as run
    from mentis.service.migrate import store_settings

    base = Settings.from_env()
    with errors(), progress() as bar:
        job = bar.add_task("migrating", total=None)
        count = run(
            store_settings(source, base), store_settings(target, base), None, lambda n: bar.advance(job, n)
        )
    err.print(
        f"migrated {count} ledger entries; both stores verify and hold the same chains", highlight=False
    )
