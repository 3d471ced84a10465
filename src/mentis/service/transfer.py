"""Export and import of whole ledgers (DESIGN §3-4): ``mentis export`` writes the ledger and bodies
as JSONL that verifies offline; ``mentis import`` verifies an export completely, then appends its
chains in one transaction that commits only if the store's whole ledger verifies with them.

A damaged chain (one that did not verify when the store opened: ``Store.damaged``) is never
exported; ``skip_damaged`` exports the chains that verify, so an operator can move the healthy
repositories to a fresh store (``mentis doctor`` says how).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any

import numpy as np
import orjson

from mentis.errors import IntegrityError, InvalidInput
from mentis.ledger.bodies import AttemptBody, ThoughtBody, VisibilityBody, scope_key, visibility_of, widens
from mentis.ledger.branches import ForkBody
from mentis.ledger.canonical import canonical
from mentis.ledger.chain import entry_rows, verify_rows
from mentis.ledger.entry import Entry
from mentis.ledger.links import CHECKPOINTS_CHAIN
from mentis.ledger.signing import AGENTS_CHAIN, RESERVED_PREFIX, now_iso
from mentis.service.access import Caller, may_admin, may_read, may_write
from mentis.service.context import ServiceContext

EXPORT_FORMAT = "mentis-ledger"


def _without_hidden(
    caller: Caller, items: list[tuple[Entry, bytes | None]]
) -> list[tuple[Entry, bytes | None]]:
    """``items`` with the bodies a non-admin ``caller`` may not read written as null, as a
    forgotten record's are: another agent's private attempts and thoughts (as published by the
    end of the ledger), and the corrections and visibility entries that name them."""
    scopes: dict[str, tuple[str, str | None, str]] = {}  # record id → (agent, session, scope key now)
    for e, raw in items:
        if raw is None or e.kind not in ("attempt", "thought", "visibility"):
            continue
        if e.kind == "visibility":
            vis = VisibilityBody.parse(raw)
            found = scopes.get(vis.record_id)
            if found is not None and widens(vis.visibility, visibility_of(e.chain, found[2])):
                agent, session, _ = found
                scopes[vis.record_id] = (agent, session, scope_key(e.chain, vis.visibility, agent, session))
        else:
            record = (AttemptBody if e.kind == "attempt" else ThoughtBody).parse(raw)
            scopes[e.id] = (record.agent_id, record.session_id, record.scope)
    hidden = {i for i, (_, _, scope) in scopes.items() if not caller.reads_key(scope)}
    out: list[tuple[Entry, bytes | None]] = []
    for e, raw in items:
        target = e.id
        if raw is not None and e.kind in ("correction", "visibility"):
            target = orjson.loads(raw).get("attempt_id" if e.kind == "correction" else "record_id")
        out.append((e, None if target in hidden else raw))
    return out


def _hashes_at(
    items: Sequence[tuple[Entry, bytes | None]], keys: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], str]:
    """The hash of the entry of ``items`` at each (chain, seq) of ``keys`` (the fork points and
    merged heads an export names), found in one pass over them."""
    wanted = set(keys)
    return {(e.chain, e.seq): e.hash for e, _ in items if (e.chain, e.seq) in wanted}


class TransferOps:
    """``export`` and ``import_`` of Memory, over the shared :class:`ServiceContext`."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

    def export(
        self,
        caller: Caller,
        out: IO[bytes],
        repository: str | None = None,
        progress: Callable[[int], None] | None = None,
        *,
        skip_damaged: bool = False,
    ) -> int:
        """Write the ledger and bodies as JSONL; returns the number of entries written.

        The agent registry goes with every export, so its signatures verify offline; a signing
        stream verifies only whole, so an export that would split one is refused. A damaged chain
        (one that did not verify) is never exported: an export that would hold it is refused,
        unless ``skip_damaged``, which exports the chains that verify."""
        may_read(caller, repository)
        damaged = caller.left_out(repository)
        if damaged and not skip_damaged:
            cause = caller.refused[damaged[0]]
            raise IntegrityError(
                f"repository {', '.join(damaged)}: its ledger chain does not verify (chain {cause.chain!r} "
                f"seq {cause.seq}: {cause.what}), so an export holding it would not; export the chains "
                "that verify with --skip-damaged (skip_damaged), or see `mentis doctor`",
                chain=cause.chain,
                seq=cause.seq,
                what=cause.what,
            )
        items, left = [], set()
        for e, body in self.store.iter_ledger():
            if e.chain == AGENTS_CHAIN or (
                caller.sees(e.chain)
                and (
                    repository is None or caller.roots.get(e.chain, e.chain) == repository
                )  # with its branches
                and (e.chain != CHECKPOINTS_CHAIN or caller.admin)  # it names every chain's head
            ):
                items.append((e, body))
            elif e.sig is not None:
                left.add(e.sig[3:35])  # the envelope's stream
        split = left & {e.sig[3:35] for e, _ in items if e.sig is not None}
        if split:
            raise InvalidInput(
                "a signing stream in this export also signed entries of repositories left out of it, "
                "and a stream verifies only whole; export every repository the agents wrote to"
                + (
                    f" (a damaged one cannot be: {', '.join(damaged)} stays refused in this store, which "
                    "keeps serving the others as they are)"
                    if damaged
                    else ""
                ),
                field="repository",
            )
        if not caller.admin:
            items = _without_hidden(caller, items)
        heads: dict[str, list[Any]] = {}
        for e, _ in items:
            heads[e.chain] = [e.seq, e.hash]
        header = {
            "format": EXPORT_FORMAT,
            "version": 1,
            "exported_at": now_iso(),
            "heads": heads,
            "embed_model": self.ctx.embedder.model_id,
        }
        out.write(orjson.dumps(header) + b"\n")
        for n, (e, body) in enumerate(items, start=1):
            line = {"entry": e.to_json(), "body": None if body is None else orjson.loads(body)}
            out.write(orjson.dumps(line) + b"\n")
            if progress is not None and (n % 256 == 0 or n == len(items)):
                progress(256 if n % 256 == 0 else n % 256)
        return len(items)

    def import_(
        self, caller: Caller, lines: Iterable[bytes], progress: Callable[[int], None] | None = None
    ) -> int:
        """Verify an export completely, then append its chains to this store in one transaction
        that commits only if the store's whole ledger verifies with them; otherwise nothing is written.

        ``progress`` is told how many attempts and thoughts each embedding batch held."""
        items, heads = read_export(lines)
        forked = {
            e.chain: ForkBody.parse(raw).root for e, raw in items if e.kind == "fork" and raw is not None
        }
        caller = caller.branching(
            {**caller.roots, **forked}, caller.views, caller.cutoffs
        )  # R's token: R's branches
        for chain in heads:
            if chain.startswith(RESERVED_PREFIX):  # the agent registry, the checkpoints
                may_admin(caller)
            else:
                may_write(caller, chain)
        verify_rows(
            entry_rows(items), heads, hash_at=lambda keys: _hashes_at(items, keys)
        )  # the ledger's order

        def embed(texts: Sequence[str]) -> np.ndarray:
            vectors = self.ctx.embed(texts)
            if progress is not None:
                progress(len(texts))
            return vectors

        return self.store.import_ledger(items, embed)


def read_export(
    lines: Iterable[bytes],
) -> tuple[list[tuple[Entry, bytes | None]], dict[str, tuple[int, str]]]:
    """Parse an export (header line, then one entry per line) without trusting it."""
    it: Iterator[bytes] = iter(lines)
    try:
        header = orjson.loads(next(it))
    except StopIteration:
        raise InvalidInput("the export is empty") from None
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"line 1 of the export is not JSON: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
        raise InvalidInput(f"line 1 is not a {EXPORT_FORMAT} header; was this file made by `mentis export`?")
    try:
        heads = {str(c): (int(h[0]), str(h[1])) for c, h in header["heads"].items()}
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        raise InvalidInput("the export header has no valid chain heads") from None
    items: list[tuple[Entry, bytes | None]] = []
    for number, raw in enumerate(it, start=2):
        if not raw.strip():
            continue
        try:
            line = orjson.loads(raw)
            entry = Entry.from_json(line["entry"])
            body = None if line["body"] is None else canonical(line["body"])
        except (orjson.JSONDecodeError, KeyError, TypeError, InvalidInput) as exc:
            raise IntegrityError(f"export line {number} is malformed: {exc}") from None
        items.append((entry, body))
    return items, heads


__all__ = ["EXPORT_FORMAT", "TransferOps", "read_export"]
