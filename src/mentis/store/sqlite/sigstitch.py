"""The signature half of the parallel verification's stitch (``sqlite_verify``).

Each block scan (``ledger_scan``) reports the registry events it holds, each entry of the registry
chain, per signing stream its first and last statement in the block, and for every other entry
what the rules of :mod:`mentis.ledger.signatures` read. :func:`signatures_verify` applies those rules and
answers whether every one holds; like the rest of the stitch it never words an error: False sends
the store to the one pass, which names the failing entry.

- The registry chain is folded in its seq order, which is its rowid order here (the stitch checks
  that each chain's rowids follow its seqs), so its own entries are judged exactly by rowid against
  the events before them, as the reference judges them by seq.
- Every other entry is judged by time against the whole registry: each agent's latest dated
  unsigned entry, each key's earliest and latest signed entry per agent (``sigcheck``'s functions,
  so the slack and the limits are the reference's).
- The reference's rule that no unsigned entry of an agent follows a signed one of the same agent
  in a chain is checked more strictly here, across chains: every unsigned entry of an agent comes
  before its first signed entry in rowid order. A store written by Mentis keeps that order (once
  an agent has a key, it writes signed); any other store goes to the one pass.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any

import orjson
from cryptography.exceptions import InvalidSignature

from mentis.errors import InvalidInput, RegistryError
from mentis.ledger import signing
from mentis.ledger.registry import Registry
from mentis.ledger.signatures import disabled_from, key_window, must_sign_from

if TYPE_CHECKING:
    from mentis.store.sqlite.ledger_scan import Signed


class _Fold:
    """The registry folded in the registry chain's order, with the rowid of each event that matters."""

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
            signing.parse_at(doc["at"])
        except (orjson.JSONDecodeError, RegistryError, InvalidInput):
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

    def registry_entry_ok(self, rowid: int, name: str, key_id: str | None) -> bool:
        """Whether the registry chain's entry at ``rowid`` by ``name`` (signed with ``key_id``)
        is allowed by the events before it."""
        who = self.registry.resolve(name)
        if who is None or self.since[name] >= rowid:  # an event is judged before it applies
            return key_id is None
        disabled = self.disabled.get(who.agent_id)
        if disabled is not None and disabled < rowid:
            return False
        if key_id is None:
            keyed = self.keyed.get(who.agent_id)
            return keyed is None or keyed >= rowid
        key = self.registry.keys.get(key_id)
        if key is None or key.agent_id != who.agent_id or self.added[key_id] >= rowid:
            return False
        revoked = self.revoked.get(key_id)
        return revoked is None or rowid <= revoked

    def dated_ok(self, dated: dict[str, str], keyed: dict[tuple[str, str], list[str]]) -> bool:
        """Whether the entries outside the registry chain keep the time rules (``sigcheck``)."""
        registry = self.registry
        latest = dict(dated)
        for (key_id, name), (first, last) in keyed.items():
            key, who = registry.keys.get(key_id), registry.resolve(name)
            if key is None or who is None or key.agent_id != who.agent_id:
                return False
            since, until = key_window(key)
            if first < since or (until is not None and last >= until):
                return False
            if last > latest.get(name, ""):
                latest[name] = last
        for name, at in latest.items():
            who = registry.resolve(name)
            if who is None:
                continue
            disabled = disabled_from(who)
            if disabled is not None and at >= disabled:
                return False
            must_sign = must_sign_from(who, registry)
            if must_sign is not None and name in dated and dated[name] >= must_sign:
                return False
        return True

    def order_ok(self, unsigned: dict[str, int], signed: dict[str, int]) -> bool:
        """Whether every unsigned entry of an agent precedes its first signed one (rowids)."""
        first: dict[str, int] = {}
        for name, rowid in signed.items():
            who = self.registry.resolve(name)
            if who is not None:
                first[who.agent_id] = min(rowid, first.get(who.agent_id, rowid))
        for name, rowid in unsigned.items():
            who = self.registry.resolve(name)
            if who is not None and who.agent_id in first and rowid > first[who.agent_id]:
                return False
        return True


def signatures_verify(parts: list[Signed]) -> bool:
    """True when the blocks' signed entries, in block order, pass every rule (module docstring)."""
    fold = _Fold()
    for part in parts:
        for rowid, body in part[0]:
            if not fold.apply(rowid, body):
                return False
    unsigned: dict[str, int] = {}
    signed: dict[str, int] = {}
    dated: dict[str, str] = {}
    keyed: dict[tuple[str, str], list[str]] = {}
    streams: dict[str, list[Any]] = {}  # stream → [key_id, agent, last n, last digest, stmt, signature]
    for _, block_unsigned, block_signed, block_streams, registry_rows, block_dated, block_keyed in parts:
        unsigned.update(block_unsigned)  # blocks come in rowid order: the later block's rowid wins
        for name, rowid in block_signed.items():
            signed.setdefault(name, rowid)
        for name, at in block_dated.items():
            if at > dated.get(name, ""):
                dated[name] = at
        for pair, (first, last) in block_keyed.items():
            times = keyed.setdefault(pair, [first, last])
            times[0], times[1] = min(times[0], first), max(times[1], last)
        for rowid, name, key_id in registry_rows:
            if not fold.registry_entry_ok(rowid, name, key_id):
                return False
        for stream, (key_id, agent, n0, prev0, _, n1, digest1, _, stmt, sig) in block_streams.items():
            known = streams.get(stream)
            if known is None:
                if (n0, prev0) != (0, ""):
                    return False
            elif (known[0], known[1], known[2] + 1, known[3]) != (key_id, agent, n0, prev0):
                return False
            streams[stream] = [key_id, agent, n1, digest1, stmt, sig]
    if not fold.dated_ok(dated, keyed) or not fold.order_ok(unsigned, signed):
        return False
    for key_id, _, _, _, stmt, sig in streams.values():
        try:
            public = signing.parse_public(fold.registry.keys[key_id].public_key)
            public.verify(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)), stmt)
        except (KeyError, InvalidInput, InvalidSignature, binascii.Error, ValueError):
            return False
    return True


__all__ = ["signatures_verify"]
