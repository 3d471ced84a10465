"""Signed checkpoints (``mentis checkpoint``, ``mentis verify --checkpoint``, ``MENTIS_CHECKPOINTS``).

:meth:`CheckpointOps.checkpoint` signs each chain's head (:mod:`mentis.ledger.checkpoint`) with an
operator key (one of ``mentis agent keygen``) and appends the checkpoint to the ledger's system
chain ``__checkpoints__``, signed as that key's agent's entry, so the store keeps what it vouched
for. :func:`check_checkpoints` is the verifier: every checkpoint file must be well formed, signed
by a key that was its agent's and active at its time, and every chain it names must still hold
that seq with that exact hash. It costs one indexed lookup per (chain, seq) named, so it runs at
every open when ``MENTIS_CHECKPOINTS`` names a directory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mentis.errors import ConfigError, IntegrityError, InvalidInput, NotFound
from mentis.ledger import checkpoint, signing
from mentis.ledger.canonical import canonical
from mentis.service.access import Caller, may_admin
from mentis.service.context import ServiceContext
from mentis.store.protocol import Store
from mentis.store.seal import Seal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Made:
    """A checkpoint just made, and the ledger entry that records it."""

    checkpoint: checkpoint.Checkpoint
    seq: int
    hash: str
    left_out: tuple[str, ...] = ()
    """Chains that did not verify when the store opened: never vouched for."""

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint.to_json(),
            "ledger": {"chain": checkpoint.CHECKPOINTS_CHAIN, "seq": self.seq, "hash": self.hash},
            "left_out": list(self.left_out),
        }


@dataclass(frozen=True)
class Held:
    """One checkpoint file the store holds."""

    file: str
    at: str
    agent: str
    key_id: str
    chains: int

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "at": self.at,
            "agent": self.agent,
            "key_id": self.key_id,
            "chains": self.chains,
        }


class CheckpointOps:
    """``checkpoint`` and ``verify_checkpoints`` of Memory, over a :class:`ServiceContext`."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

    def checkpoint(
        self, caller: Caller, key_path: Path | None, repositories: Sequence[str], seal: Seal
    ) -> Made:
        """Sign the heads of ``repositories`` (none: every chain that verifies, system chains
        included) with the key in ``key_path`` (default ``MENTIS_SIGNING_KEY``) and append the
        checkpoint to the ledger as ``caller``'s write (sealed by ``seal``, as any of its writes:
        the operator's signature is inside the body, checked wherever a checkpoint is, so a year of
        them adds no signature check to every open). The key must be registered and active."""
        may_admin(caller)
        path = key_path or self.ctx.settings.signing_key
        if path is None:
            raise InvalidInput(
                "a checkpoint is signed by an operator key: pass --key FILE or set MENTIS_SIGNING_KEY "
                "(make one with `mentis agent keygen`)",
                field="key",
            )
        key = signing.load_private_key(path)
        key_id = signing.key_id_of(key.public_key())
        found = self.store.agent_key(key_id)
        if found is None or found[3] is not None:
            why = "is not in the agent registry" if found is None else f"was revoked at {found[3]}"
            raise InvalidInput(
                f"the key {path} ({key_id}) {why}; make one with `mentis agent keygen`", field="key"
            )
        agent = found[0]
        heads = self.store.chain_heads()
        damaged = set(self.store.damaged)
        if repositories:
            for name in repositories:
                if name not in heads:
                    raise NotFound(f"no chain for repository {name!r}; nothing to checkpoint")
                if name in damaged:
                    raise IntegrityError(
                        f"repository {name!r}: its chain does not verify, so it cannot be vouched for; "
                        "see `mentis doctor`",
                        chain=name,
                    )
            chosen = sorted(set(repositories))
        else:
            chosen = [c for c in heads if c not in damaged]
        if not chosen:
            raise NotFound("the store holds no chain yet; nothing to checkpoint")
        at = signing.now_iso()
        made = checkpoint.sign(key, agent, at, [checkpoint.Head(c, *heads[c]) for c in chosen])
        entry = self.store.append_checkpoint(canonical(made.to_json()), at, caller.agent_id, seal)
        return Made(made, entry.seq, entry.hash, () if repositories else tuple(sorted(damaged)))

    def verify_checkpoints(self, caller: Caller, paths: Sequence[Path]) -> list[Held]:
        """:func:`check_checkpoints` over the files in ``paths`` (a directory: every ``*.json``
        under it)."""
        may_admin(caller)
        files = checkpoint_files(paths)
        if not files:
            raise InvalidInput("no checkpoint file found in the paths given", field="checkpoint")
        return check_checkpoints(self.store, files)


def checkpoint_files(paths: Iterable[Path]) -> list[Path]:
    """``paths``, each directory replaced by every ``*.json`` under it (sorted); ConfigError for a
    path that does not exist."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.rglob("*.json") if f.is_file())
        elif p.exists():
            out.append(p)
        else:
            raise ConfigError(f"checkpoint path {p} does not exist")
    return out


def read_checkpoint(path: Path) -> checkpoint.Checkpoint:
    """The checkpoint in ``path``; InvalidInput naming the file and the field that is wrong."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    try:
        return checkpoint.parse(data)
    except InvalidInput as exc:
        raise InvalidInput(f"checkpoint {path}: {exc.message}", field=exc.field) from None


def check_checkpoints(store: Store, files: Sequence[Path]) -> list[Held]:
    """Every checkpoint in ``files`` is well formed and signed by a key of its agent that was
    active at its time (InvalidInput naming the file and field otherwise), and the store holds it:
    each chain it names still has that seq with that exact hash (IntegrityError naming chain, seq
    and file otherwise). A store that is ahead holds it."""
    found = [(f, read_checkpoint(f)) for f in files]
    if not found:
        return []
    registry = store.agent_registry()
    for f, cp in found:
        if (why := checkpoint.signature_error(cp, registry)) is not None:
            field = "sig" if "signature" in why else "key_id"
            raise InvalidInput(f"checkpoint {f}: {why}", field=field)
    heads = store.chain_heads()
    stored = store.entry_hashes({(h.chain, h.seq) for _, cp in found for h in cp.chains})
    for f, cp in found:
        for h in cp.chains:
            if (why := checkpoint.mismatch(h, heads.get(h.chain), stored.get((h.chain, h.seq)))) is not None:
                raise IntegrityError(
                    f"the store does not hold checkpoint {f}: chain {h.chain!r} seq {h.seq}: {why}. "
                    "Restore the store from a backup or an export made after that checkpoint",
                    chain=h.chain,
                    seq=h.seq,
                    what=f"does not hold checkpoint {f}: {why}",
                )
    return [Held(str(f), cp.at, cp.agent, cp.key_id, len(cp.chains)) for f, cp in found]


__all__ = ["CheckpointOps", "Held", "Made", "check_checkpoints", "checkpoint_files", "read_checkpoint"]
