"""The signature half of the parallel verification's stitch (``sqlite_verify``).

Each block scan (``ledger_scan``) reports the registry events it holds, per agent name the last
rowid of an unsigned and of a signed entry, and per signing stream its first and last statement in
the block. :func:`signatures_verify` folds the registry in rowid order (the ledger order the
reference verifier walks, :mod:`mentis.sigcheck`) and answers whether every rule holds; like the
rest of the stitch it never words an error: False sends the store to the one pass, which names the
first failing entry.

The per-agent rules need only the last rowid: an agent name's unsigned entries are all acceptable
exactly when the last one comes before the name resolved to an agent with a key; the same for
any entry and a disabled agent. The per-stream rules need only a block's span: a key is active
over an interval of rowids, so it is active for every statement of the span when it is for the
first and the last.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any

import orjson
from cryptography.exceptions import InvalidSignature

from mentis import signing
from mentis.agents import Registry, RegistryError
from mentis.errors import InvalidInput

if TYPE_CHECKING:
    from mentis.store.ledger_scan import Signed


class _Fold:
    """The registry folded in rowid order, with the rowid of each event that matters here."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.since: dict[str, int] = {}  # agent id or alias → rowid from which it resolves
        self.keyed: dict[str, int] = {}  # agent id → rowid of its first key
        self.added: dict[str, int] = {}  # key id → rowid
        self.revoked: dict[str, int] = {}  # key id → rowid
        self.disabled: dict[str, int] = {}  # agent id → rowid

    def apply(self, rowid: int, body: bytes) -> bool:
        try:
            doc: Any = orjson.loads(body)
            if type(doc) is not dict:
                return False
            self.registry.apply(doc)
        except (orjson.JSONDecodeError, RegistryError):
            return False
        op, agent = doc["op"], doc["agent_id"]
        if op == "register":
            for name in (agent, *doc["aliases"]):
                self.since[name] = rowid
        elif op == "key_add":
            self.added[doc["key_id"]] = rowid
            self.keyed.setdefault(agent, rowid)
        elif op == "key_revoke":
            self.revoked[doc["key_id"]] = rowid
        else:
            self.disabled[agent] = rowid
        return True

    def agent_ok(self, name: str, last: int, unsigned: bool) -> bool:
        """Whether ``name``'s entries up to rowid ``last`` are allowed (``unsigned``: those)."""
        who = self.registry.resolve(name)
        if who is None:
            return True
        since = self.since[name]
        disabled = self.disabled.get(who.agent_id)
        if disabled is not None and last > max(disabled, since):
            return False
        keyed = self.keyed.get(who.agent_id)
        return not (unsigned and keyed is not None and last > max(keyed, since))

    def span_ok(self, key_id: str, agent: str, first: int, last: int) -> bool:
        """Whether ``key_id`` may sign ``agent``'s entries from rowid ``first`` to ``last``."""
        key, who = self.registry.keys.get(key_id), self.registry.resolve(agent)
        if key is None or who is None or key.agent_id != who.agent_id:
            return False
        if self.since[agent] >= first or self.added[key_id] >= first:
            return False
        revoked = self.revoked.get(key_id)
        return revoked is None or last < revoked


def signatures_verify(parts: list[Signed]) -> bool:
    """True when the blocks' signed entries, in block order, pass every rule (module docstring)."""
    fold = _Fold()
    for registry, _, _, _ in parts:
        for rowid, body in registry:
            if not fold.apply(rowid, body):
                return False
    unsigned: dict[str, int] = {}
    signed: dict[str, int] = {}
    streams: dict[str, list[Any]] = {}  # stream → [key_id, agent, last n, last digest, stmt, signature]
    for _, block_unsigned, block_signed, block_streams in parts:
        unsigned.update(block_unsigned)  # blocks come in rowid order: the later block's rowid wins
        signed.update(block_signed)
        for stream, (key_id, agent, n0, prev0, row0, n1, digest1, row1, stmt, sig) in block_streams.items():
            if not fold.span_ok(key_id, agent, row0, row1):
                return False
            known = streams.get(stream)
            if known is None:
                if (n0, prev0) != (0, ""):
                    return False
            elif (known[0], known[1], known[2] + 1, known[3]) != (key_id, agent, n0, prev0):
                return False
            streams[stream] = [key_id, agent, n1, digest1, stmt, sig]
    for name, last in unsigned.items():
        if not fold.agent_ok(name, last, unsigned=True):
            return False
    for name, last in signed.items():
        if not fold.agent_ok(name, last, unsigned=False):
            return False
    for key_id, _, _, _, stmt, sig in streams.values():
        try:
            public = signing.parse_public(fold.registry.keys[key_id].public_key)
            public.verify(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)), stmt)
        except (InvalidInput, InvalidSignature, binascii.Error, ValueError):
            return False
    return True


__all__ = ["signatures_verify"]
