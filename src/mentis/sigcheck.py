"""Verification of signed entries, walked in ledger order alongside :func:`mentis.ledger.verify_rows`.

Ledger order is the order the store committed entries (rowid order; an export keeps it). The
agent registry is folded as its entries come, so every entry is judged against the registry as
it stood when the entry was written, exactly as the store judged it then:

- an entry by a disabled agent fails; so does an unsigned entry by an agent that has had a key;
- a signed entry carries both ``key_id`` and ``sig``; its envelope parses; its key is in the
  registry, belongs to the entry's agent and is not revoked;
- the statements of each signing stream link: the first is ``n = 0`` with no ``prev``, each next
  one is ``n + 1`` with ``prev`` the digest of the one before, all under one key;
- at the end, the signature of each stream's last statement verifies (with ``every``: the
  signature of every statement, as it comes).

A stream's last signature vouches for its earlier statements through the digest links, and the
entry hashes vouch for the statements' fields, so an entry whose content changed fails here even
when its hashes were recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mentis import signing
from mentis.agents import Registry, RegistryError
from mentis.errors import InvalidInput

Failure = tuple[str, int, str]
"""(chain, seq, what failed)."""


@dataclass(slots=True)
class _Stream:
    key_id: str
    public: Ed25519PublicKey
    n: int
    digest: str
    chain: str
    seq: int
    statement: signing.Statement
    signature: str


class SignatureCheck:
    """The signature state of a ledger walked in order; each method returns a Failure or None."""

    def __init__(self, every: bool = False) -> None:
        self.every = every
        self.registry = Registry()
        self.streams: dict[str, _Stream] = {}
        self._publics: dict[str, Ed25519PublicKey] = {}

    def registry_event(self, chain: str, seq: int, body: bytes | None) -> Failure | None:
        """Fold the body of a registry entry in (after its entry passed :meth:`entry`)."""
        if body is None:
            return chain, seq, "a registry entry's body is missing (registry bodies are never erased)"
        try:
            doc: Any = orjson.loads(body)
            if not isinstance(doc, dict):
                raise RegistryError("a registry event is not a JSON object")
            self.registry.apply(doc)
        except (RegistryError, orjson.JSONDecodeError) as exc:
            return chain, seq, f"registry event does not apply: {exc}"
        return None

    def entry(
        self,
        chain: str,
        seq: int,
        kind: str,
        id_: str,
        at: str,
        agent: str,
        body_hash: str,
        key_id: str | None,
        sig: str | None,
    ) -> Failure | None:
        who = self.registry.resolve(agent) if self.registry.events else None
        if who is not None and who.disabled_at is not None:
            return chain, seq, f"agent {agent!r} wrote after it was disabled at {who.disabled_at}"
        if key_id is None and sig is None:
            if who is not None and who.keys:
                return (
                    chain,
                    seq,
                    f"unsigned entry by agent {agent!r}, whose writes must be signed (it has a key)",
                )
            return None
        if key_id is None or sig is None:
            return chain, seq, "a signed entry needs both key_id and sig (one of them is missing)"
        try:
            env = signing.Envelope.parse(sig)
        except InvalidInput as exc:
            return chain, seq, exc.message
        key = self.registry.keys.get(key_id)
        if key is None:
            return chain, seq, f"signed with key {key_id!r}, which the agent registry does not hold here"
        if who is None or key.agent_id != who.agent_id:
            return chain, seq, f"signed with key {key_id} of agent {key.agent_id!r}, not of {agent!r}"
        if not key.active:
            return chain, seq, f"signed with key {key_id} after its revocation at {key.revoked_at}"
        stmt = signing.Statement.of(signing.Unsigned(chain, kind, id_, at, agent, body_hash), key_id, env)
        last = self.streams.get(env.stream)
        if last is None:
            if env.n != 0:
                return chain, seq, f"signing stream {env.stream} starts at statement {env.n}, not 0"
        elif last.key_id != key_id:
            return chain, seq, f"signing stream {env.stream} changes key from {last.key_id} to {key_id}"
        elif env.n != last.n + 1:
            return chain, seq, f"signing stream {env.stream}: statement {env.n} follows statement {last.n}"
        elif env.prev != last.digest:
            return (
                last.chain,
                last.seq,
                f"the entry's signed statement does not match the digest that the next statement of its "
                f"signing stream (chain {chain!r} seq {seq}) signed: the entry changed after it was signed",
            )
        public = self._publics.get(key_id)
        if public is None:
            public = self._publics[key_id] = signing.parse_public(key.public_key)
        if self.every and not signing.verify(public, stmt, env.signature):
            return chain, seq, f"the signature does not verify with key {key_id}"
        self.streams[env.stream] = _Stream(
            key_id, public, env.n, stmt.digest(), chain, seq, stmt, env.signature
        )
        return None

    def finish(self) -> Failure | None:
        """Verify the last signature of each stream (already done as they came with ``every``)."""
        if self.every:
            return None
        for st in self.streams.values():
            if not signing.verify(st.public, st.statement, st.signature):
                return st.chain, st.seq, f"the signature does not verify with key {st.key_id}"
        return None


__all__ = ["Failure", "SignatureCheck"]
