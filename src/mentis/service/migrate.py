"""Copy a whole store to another backend (SQLite ⇄ PostgreSQL), keeping every hash.

``migrate`` opens the source (which verifies it, and refuses a source with a damaged chain: a copy is
whole or not at all), refuses a target that already holds chains,
appends the source's ledger rows and canonical bodies to the target unchanged, lets the target
derive its tables (embedding with the source's model), verifies the target and checks that
both ledgers are identical entry for entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from mentis.config import Settings
from mentis.errors import Conflict, IntegrityError, InvalidInput
from mentis.providers.embed import Embedder
from mentis.service.memory import Memory
from mentis.store.protocol import Embed


def store_settings(spec: str, base: Settings) -> Settings:
    """Settings for ``sqlite:PATH`` or a ``postgresql://…`` URL."""
    if spec.startswith(("postgresql://", "postgres://")):
        return dataclasses.replace(base, database_url=spec)
    if spec.startswith("sqlite:"):
        path = Path(spec.removeprefix("sqlite:")).expanduser()
        return dataclasses.replace(base, db_path=path, database_url=None)
    raise InvalidInput(f"{spec!r}: give sqlite:PATH or a postgresql://… URL", field="store")


def migrate(
    source: Settings,
    target: Settings,
    embedder: Embedder | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Copy every chain from ``source`` to an empty ``target``; returns the entries copied."""
    src = Memory.open(source, embedder, check_derived=False)  # only its ledger is read
    try:
        if src.store.damaged:
            cause = next(iter(src.store.damaged.values()))
            raise IntegrityError(
                f"the source does not verify: chain {cause.chain!r} seq {cause.seq}: {cause.what}; "
                "migrate copies a whole store, so move the chains that verify with `mentis export "
                "--skip-damaged` and `mentis import` instead (see `mentis doctor`)",
                chain=cause.chain,
                seq=cause.seq,
                what=cause.what,
            )
        dst = Memory.open(target, src.embedder)
        try:
            if dst.store.repositories():
                raise Conflict("the target store already holds chains; migrate into an empty store")
            items = list(src.store.iter_ledger())
            before = src.store.verify()
            count = dst.store.import_ledger(items, _counting(dst, progress))
            after = dst.store.verify()
            if [(r.chain, r.head_seq, r.head_hash) for r in after] != [
                (r.chain, r.head_seq, r.head_hash) for r in before
            ] or [(e.hash, b) for e, b in dst.store.iter_ledger()] != [(e.hash, b) for e, b in items]:
                raise IntegrityError("the migrated ledger differs from the source; the target is not usable")
            return count
        finally:
            dst.close()
    finally:
        src.close()


def _counting(memory: Memory, progress: Callable[[int], None] | None) -> Embed:
    def embed(texts: Sequence[str]) -> np.ndarray:
        vectors = memory.ctx.embed(texts)
        if progress is not None:
            progress(len(texts))
        return vectors

    return embed
