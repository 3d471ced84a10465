"""Verification of signed entries and of who may write, alongside :func:`mentis.ledger.chain.verify_rows`.

**Where an entry stands relative to the agent registry** is read only from what the hashes cover,
never from the order rows sit in a file (anyone who can write the file can renumber rows):

- *The registry chain* (:data:`mentis.ledger.links.AGENTS_CHAIN`) is folded in its own seq order, and
  each of its entries is judged against the registry as its earlier seqs built it: one hash-linked
  chain, so this order is exact.
- *Every other entry* is judged against the whole registry by time: a registry event happened at
  its ``at``, an entry at its ``at``; both are hashed into their entries, and a signed entry's
  ``at`` is also in its signed statement. For an entry by a name that resolves to agent A:

  - unsigned, it fails when dated at or after A's first key was added. This is exact: the store
    adds an agent's first key only when no unsigned entry of the agent is dated at or after the
    key (``store/core_agents.py``, inside the lock every append waits for), so the one race where
    a write dated earlier commits later is refused there instead of leaving a ledger that fails;
  - any entry fails when dated :data:`SLACK_S` or more after A was disabled;
  - signed with key K, K must be A's and the entry dated within K's life, with the same slack:
    from ``SLACK_S`` before K was added to ``SLACK_S`` after it was revoked.

  The slack is twice the clock skew a signed write may have: its ``at`` may be ``SKEW_S`` from
  the server's clock, and a registry event's ``at`` is read before it waits for the store's lock,
  on a clock that may differ from another replica's. It gives nothing away: whoever holds a key
  signs any ``at`` they like, and a file's writer may date a disabled agent's unsigned entry
  before the disabling anyway.

- *Within one chain*, seq order is hash-covered too: once an entry of A in a chain is signed, no
  later entry of A in that chain is unsigned (A had a key when the signed one was written, and a
  key is never taken back).

A rule that only reads the ``at`` of an unsigned entry cannot tell a genuine early write from one
whose author dated it early: whoever can write the file may add unsigned entries in A's name
dated before A had a key (a key only vouches from its own start), or drop the registry's events
and every entry signed under them. What it can no longer do is add an unsigned entry in the
name of an agent that had a key when it is dated, wherever the row is put.

**Signatures.** A signed entry carries ``key_id`` and ``sig``; its envelope parses; its key is in
the registry and belongs to the entry's agent. The statements of each signing stream link, as
they come (streams keep to each chain's seq order): the first is ``n = 0`` with no ``prev``, each
next one is ``n + 1`` with ``prev`` the digest of the one before, all under one key. At the end,
the signature of each stream's last statement verifies (with ``every``: the signature of every
statement). A stream's last signature vouches for its earlier statements through the digest
links, and the entry hashes vouch for the statements' fields, so an entry whose content changed
fails here even when its hashes were recomputed.

Judgements that need the whole registry are made in :meth:`SignatureCheck.finish`; a failure
names the chain and seq of an entry that breaks the rule (for an agent's unsigned or late
entries, the latest dated one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mentis.errors import InvalidInput, RegistryError
from mentis.ledger import signing
from mentis.ledger.links import AGENTS_CHAIN
from mentis.ledger.registry import AgentRecord, KeyRecord, Registry

Failure = tuple[str, int, str]
"""(chain, seq, what failed)."""
SLACK_S = 2 * signing.SKEW_S
"""Seconds of slack when an entry's ``at`` is compared with a registry event's (module docstring)."""


@dataclass(slots=True)
class _Stream:
    key_id: str
    n: int
    digest: str
    chain: str
    seq: int
    statement: signing.Statement
    signature: str


Dated = tuple[str, str, int]
"""(at, chain, seq) of one entry."""


def shifted(at: str, seconds: float) -> str:
    """``at`` moved by ``seconds``, in the ledger's time format (its text sorts as its time);
    InvalidInput when ``at`` is not a ledger time."""
    moved = signing.parse_at(at) + timedelta(seconds=seconds)
    return moved.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def must_sign_from(who: AgentRecord, registry: Registry) -> str | None:
    """The time from which an unsigned entry by ``who`` fails: when its first key was added."""
    if not who.keys:
        return None
    return max(min(registry.keys[k].added_at for k in who.keys), who.registered_at)


def disabled_from(who: AgentRecord) -> str | None:
    """The time from which any entry by ``who`` fails (its disabling, plus slack)."""
    return None if who.disabled_at is None else shifted(who.disabled_at, SLACK_S)


def key_window(key: KeyRecord) -> tuple[str, str | None]:
    """The times an entry signed with ``key`` may carry: from (inclusive) and until (exclusive)."""
    until = None if key.revoked_at is None else shifted(key.revoked_at, SLACK_S)
    return shifted(key.added_at, -SLACK_S), until


class SignatureCheck:
    """The signature state of a ledger walked in order (each chain in seq order); each method
    returns a Failure or None."""

    def __init__(self, every: bool = False) -> None:
        self.every = every
        self.registry = Registry()
        """Folded in the registry chain's seq order, as far as the walk has come."""
        self.streams: dict[str, _Stream] = {}
        self._publics: dict[str, Ed25519PublicKey] = {}
        # Entries outside the registry chain, judged in finish() against the whole registry:
        self._unsigned: dict[str, Dated] = {}  # agent name → its latest dated unsigned entry
        self._signed: dict[tuple[str, str], tuple[Dated, Dated]] = {}  # (key, name) → earliest, latest
        self._first_signed: dict[tuple[str, str], int] = {}  # (chain, name) → seq of its first signed
        self._last_unsigned: dict[tuple[str, str], int] = {}  # (chain, name) → seq of its last unsigned
        self._unchecked: list[tuple[str, signing.Statement, str, str, int]] = []  # every: key not folded yet
        self._limits: dict[tuple[str, str], Any] = {}  # the times rules compare with, per registry state

    def registry_event(self, chain: str, seq: int, body: bytes | None) -> Failure | None:
        """Fold the body of a registry entry in (after its entry passed :meth:`entry`)."""
        if body is None:
            return chain, seq, "a registry entry's body is missing (registry bodies are never erased)"
        try:
            doc: Any = orjson.loads(body)
            if not isinstance(doc, dict):
                raise RegistryError("a registry event is not a JSON object")
            self.registry.apply(doc)
            self._limits.clear()
            signing.parse_at(doc["at"])  # compared with entries' times: a ledger time
        except (RegistryError, orjson.JSONDecodeError) as exc:
            return chain, seq, f"registry event does not apply: {exc}"
        except InvalidInput:
            return chain, seq, f"registry event does not apply: its at {doc['at']!r} is not a ledger time"
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
        *,
        placed: bool = True,
    ) -> Failure | None:
        """Check one entry as it comes; with ``placed`` False (an entry of a chain left out of
        the verification) only its signing stream goes on: whether its agent may have written it
        is not judged, and its signature is verified now or not at all."""
        if type(at) is not str:
            return chain, seq, f"at {at!r} is not a ledger time"
        in_registry = chain == AGENTS_CHAIN
        if in_registry and (failed := self._registry_entry(chain, seq, agent, key_id, sig)):
            return failed
        if not in_registry and placed:
            if self.registry.events and (failed := self._judge((at, chain, seq), agent, key_id, final=False)):
                return failed  # the registry so far already decides it (keys are never taken back)
            self._note(chain, seq, at, agent, key_id)
        if key_id is None and sig is None:
            return None
        if key_id is None or sig is None:
            return chain, seq, "a signed entry needs both key_id and sig (one of them is missing)"
        try:
            env = signing.Envelope.parse(sig)
        except InvalidInput as exc:
            return chain, seq, exc.message
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
        if self.every:
            if key_id in self.registry.keys:
                if not signing.verify(self._public(key_id), stmt, env.signature):
                    return chain, seq, f"the signature does not verify with key {key_id}"
            elif not placed:
                return chain, seq, f"signed with key {key_id!r}, which the agent registry does not hold here"
            else:  # the registry chain adds the key later in the walk: finish() decides
                self._unchecked.append((key_id, stmt, env.signature, chain, seq))
        self.streams[env.stream] = _Stream(key_id, env.n, stmt.digest(), chain, seq, stmt, env.signature)
        return None

    def _registry_entry(
        self, chain: str, seq: int, agent: str, key_id: str | None, sig: str | None
    ) -> Failure | None:
        """A registry entry, judged against the registry its earlier seqs built."""
        who = self.registry.resolve(agent) if self.registry.events else None
        if who is not None and who.disabled_at is not None:
            return chain, seq, f"agent {agent!r} wrote after it was disabled at {who.disabled_at}"
        if key_id is None:
            if sig is None and who is not None and who.keys:
                return (
                    chain,
                    seq,
                    f"unsigned entry by agent {agent!r}, whose writes must be signed (it has a key)",
                )
            return None
        key = self.registry.keys.get(key_id)
        if key is None:
            return chain, seq, f"signed with key {key_id!r}, which the agent registry does not hold here"
        if who is None or key.agent_id != who.agent_id:
            return chain, seq, f"signed with key {key_id} of agent {key.agent_id!r}, not of {agent!r}"
        if not key.active:
            return chain, seq, f"signed with key {key_id} after its revocation at {key.revoked_at}"
        return None

    def _note(self, chain: str, seq: int, at: str, agent: str, key_id: str | None) -> None:
        """Remember what finish() needs of an entry outside the registry chain."""
        dated = (at, chain, seq)
        if key_id is None:
            latest = self._unsigned.get(agent)
            if latest is None or at > latest[0]:
                self._unsigned[agent] = dated
            self._last_unsigned[chain, agent] = seq
            return
        self._first_signed.setdefault((chain, agent), seq)
        span = self._signed.get((key_id, agent))
        if span is None:
            self._signed[key_id, agent] = (dated, dated)
        elif at < span[0][0]:
            self._signed[key_id, agent] = (dated, span[1])
        elif at > span[1][0]:
            self._signed[key_id, agent] = (span[0], dated)

    def _public(self, key_id: str) -> Ed25519PublicKey:
        public = self._publics.get(key_id)
        if public is None:
            public = self._publics[key_id] = signing.parse_public(self.registry.keys[key_id].public_key)
        return public

    def finish(self) -> Failure | None:
        """Judge the entries outside the registry chain against the whole registry (module
        docstring), then verify the last signature of each stream (with ``every``: the
        signatures whose key was not folded yet when they came; the others were verified then)."""
        if failed := self._placement():
            return failed
        for key_id, stmt, signature, chain, seq in self._unchecked:
            if not signing.verify(self._public(key_id), stmt, signature):
                return chain, seq, f"the signature does not verify with key {key_id}"
        if self.every:
            return None
        for st in self.streams.values():
            if not signing.verify(self._public(st.key_id), st.statement, st.signature):
                return st.chain, st.seq, f"the signature does not verify with key {st.key_id}"
        return None

    def _placement(self) -> Failure | None:
        for (key_id, agent), (first, last) in self._signed.items():
            if failed := self._judge(first, agent, key_id, final=True) or self._judge(
                last, agent, key_id, final=True
            ):
                return failed
        for agent, dated in self._unsigned.items():
            if failed := self._judge(dated, agent, None, final=True):
                return failed
        return self._chain_order()

    def _judge(self, dated: Dated, agent: str, key_id: str | None, *, final: bool) -> Failure | None:
        """Whether the registry allows an entry by ``agent`` dated ``dated`` (signed with
        ``key_id``). With the registry folded so far (not ``final``), only what later events
        cannot change is decided: a key not folded yet passes here."""
        at, chain, seq = dated
        registry = self.registry
        who = registry.resolve(agent)
        if key_id is not None:
            key = registry.keys.get(key_id)
            if key is None:
                if not final:
                    return None
                return chain, seq, f"signed with key {key_id!r}, which the agent registry does not hold"
            if who is None or key.agent_id != who.agent_id:
                return chain, seq, f"signed with key {key_id} of agent {key.agent_id!r}, not of {agent!r}"
            since, until = self._limit("key", key_id, lambda: key_window(key))
            if at < since:
                return chain, seq, f"dated {at}, before key {key_id} was added at {key.added_at}"
            if until is not None and at >= until:
                return (
                    chain,
                    seq,
                    f"signed with key {key_id} after its revocation at {key.revoked_at} (dated {at})",
                )
        if who is None:
            return None
        disabled = self._limit("disabled", who.agent_id, lambda: disabled_from(who))
        if disabled is not None and at >= disabled:
            return (
                chain,
                seq,
                f"agent {agent!r} wrote after it was disabled at {who.disabled_at} (dated {at})",
            )
        must_sign = self._limit("must sign", who.agent_id, lambda: must_sign_from(who, registry))
        if key_id is None and must_sign is not None and at >= must_sign:
            return (
                chain,
                seq,
                f"unsigned entry by agent {agent!r}, whose writes must be signed (dated {at}; it has had a "
                f"key since {must_sign})",
            )
        return None

    def _limit(self, what: str, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, kept until the registry changes (a time is parsed once, not per entry)."""
        found = self._limits.get((what, name), self)
        if found is self:
            found = self._limits[what, name] = compute()
        return found

    def _chain_order(self) -> Failure | None:
        """No unsigned entry of an agent follows, in its chain, a signed one of the same agent."""
        signed: dict[tuple[str, str], int] = {}  # (chain, agent id) → seq of the first signed
        for (chain, name), seq in self._first_signed.items():
            who = self.registry.resolve(name)
            if who is not None:
                key = (chain, who.agent_id)
                signed[key] = min(seq, signed.get(key, seq))
        for (chain, name), seq in self._last_unsigned.items():
            who = self.registry.resolve(name)
            first = None if who is None else signed.get((chain, who.agent_id))
            if first is not None and seq > first:
                return (
                    chain,
                    seq,
                    f"unsigned entry by agent {name!r} after its signed entry at seq {first} of this chain",
                )
        return None


__all__ = ["SLACK_S", "Failure", "SignatureCheck", "disabled_from", "key_window", "must_sign_from", "shifted"]
