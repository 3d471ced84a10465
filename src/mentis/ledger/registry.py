"""The agent registry: agents, their Ed25519 public keys and who was disabled, folded from the
bodies of the system chain :data:`mentis.ledger.links.AGENTS_CHAIN` (entry kind ``agent``).

A body is one event (canonical JSON)::

    {"op": "register",   "agent_id", "display_name", "description", "aliases": [...], "at", "by"}
    {"op": "key_add",    "agent_id", "key_id", "public_key", "at", "by"}
    {"op": "key_revoke", "agent_id", "key_id", "reason", "at", "by"}
    {"op": "disable",    "agent_id", "reason", "at", "by"}

:meth:`Registry.apply` is the one rule for what may follow what (the store checks a new event
with it before appending, and verification folds the chain with it): a key is added to a
registered, enabled agent, its ``key_id`` is :func:`mentis.ledger.signing.key_id_of` of its public key
and is new; only an active key is revoked; aliases name no other agent. Nothing here touches a
store.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from mentis.errors import InvalidInput, RegistryError
from mentis.ledger import signing
from mentis.ledger.links import RESERVED_PREFIX

OPS = ("register", "key_add", "key_revoke", "disable")
AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$")
MAX_TEXT = 1000
MAX_ALIASES = 16


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str
    agent_id: str
    public_key: str
    added_at: str
    added_by: str
    revoked_at: str | None = None
    reason: str | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def to_json(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "public_key": self.public_key,
            "added_at": self.added_at,
            "added_by": self.added_by,
            "revoked_at": self.revoked_at,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class AgentRecord:
    agent_id: str
    display_name: str
    description: str
    aliases: tuple[str, ...]
    registered_at: str
    registered_by: str
    keys: tuple[str, ...] = ()
    disabled_at: str | None = None
    disabled_reason: str | None = None


@dataclass
class Registry:
    """The registry as of some point of the chain; :meth:`apply` advances it by one event."""

    agents: dict[str, AgentRecord] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    keys: dict[str, KeyRecord] = field(default_factory=dict)
    events: int = 0

    @classmethod
    def from_bodies(cls, bodies: Iterable[dict[str, Any]]) -> Registry:
        reg = cls()
        for body in bodies:
            reg.apply(body)
        return reg

    def copy(self) -> Registry:
        return Registry(dict(self.agents), dict(self.aliases), dict(self.keys), self.events)

    def resolve(self, name: str) -> AgentRecord | None:
        """The agent ``name`` is the id or an alias of, if any."""
        found = self.agents.get(name)
        if found is None and name in self.aliases:
            found = self.agents[self.aliases[name]]
        return found

    def must_sign(self, name: str) -> bool:
        """True once ``name``'s agent has had a key: its writes must be signed from then on
        (revoking every key does not make unsigned writes acceptable again)."""
        agent = self.resolve(name)
        return agent is not None and bool(agent.keys)

    def apply(self, body: dict[str, Any]) -> None:
        """Fold one event in; RegistryError (nothing changed) when it is malformed or may not follow."""
        op = _text(body, "op")
        if op not in OPS:
            raise RegistryError(f"unknown registry op {op!r}; expected one of {', '.join(OPS)}")
        want = {
            "register": {"display_name", "description", "aliases"},
            "key_add": {"key_id", "public_key"},
            "key_revoke": {"key_id", "reason"},
            "disable": {"reason"},
        }[op] | {"op", "agent_id", "at", "by"}
        if set(body) != want:
            raise RegistryError(f"a {op} event has the fields {', '.join(sorted(want))}")
        agent_id, at, by = _text(body, "agent_id"), _text(body, "at"), _text(body, "by")
        getattr(self, f"_{op}")(body, agent_id, at, by)
        self.events += 1

    def _register(self, body: dict[str, Any], agent_id: str, at: str, by: str) -> None:
        check_agent_id(agent_id)
        if self.resolve(agent_id) is not None:
            raise RegistryError(f"agent {agent_id!r} is already registered", "conflict")
        aliases = body["aliases"]
        if not isinstance(aliases, list) or len(aliases) > MAX_ALIASES:
            raise RegistryError(f"aliases must be a list of at most {MAX_ALIASES} agent names")
        for alias in aliases:
            check_agent_id(alias, "alias")
            if alias == agent_id or self.resolve(alias) is not None or aliases.count(alias) > 1:
                raise RegistryError(f"alias {alias!r} already names an agent", "conflict")
        self.agents[agent_id] = AgentRecord(
            agent_id, _text(body, "display_name"), _text(body, "description"), tuple(aliases), at, by
        )
        for alias in aliases:
            self.aliases[alias] = agent_id

    def _enabled(self, agent_id: str) -> AgentRecord:
        agent = self.agents.get(agent_id)
        if agent is None:
            raise RegistryError(f"no agent {agent_id!r} is registered; register it first", "not_found")
        if agent.disabled_at is not None:
            raise RegistryError(
                f"agent {agent_id!r} is disabled (for good: register a new agent id)", "conflict"
            )
        return agent

    def _key_add(self, body: dict[str, Any], agent_id: str, at: str, by: str) -> None:
        agent = self._enabled(agent_id)
        public_text, key_id = _text(body, "public_key"), _text(body, "key_id")
        try:
            public = signing.parse_public(public_text)
        except InvalidInput as exc:
            raise RegistryError(exc.message) from None
        if signing.key_id_of(public) != key_id:
            raise RegistryError(f"key_id {key_id!r} is not the id of its public key")
        if key_id in self.keys:
            raise RegistryError(
                f"key {key_id} is already registered (to {self.keys[key_id].agent_id!r})", "conflict"
            )
        self.keys[key_id] = KeyRecord(key_id, agent_id, public_text, at, by)
        self.agents[agent_id] = replace(agent, keys=(*agent.keys, key_id))

    def _key_revoke(self, body: dict[str, Any], agent_id: str, at: str, by: str) -> None:
        key = self.keys.get(_text(body, "key_id"))
        if key is None or key.agent_id != agent_id:
            raise RegistryError(f"agent {agent_id!r} has no key {body['key_id']!r}", "not_found")
        if not key.active:
            raise RegistryError(f"key {key.key_id} was already revoked at {key.revoked_at}", "conflict")
        self.keys[key.key_id] = replace(key, revoked_at=at, reason=_text(body, "reason"))

    def _disable(self, body: dict[str, Any], agent_id: str, at: str, by: str) -> None:
        agent = self._enabled(agent_id)
        self.agents[agent_id] = replace(agent, disabled_at=at, disabled_reason=_text(body, "reason"))


def check_agent_id(name: object, what: str = "agent_id") -> str:
    if not isinstance(name, str) or not AGENT_ID.match(name) or name.startswith(RESERVED_PREFIX):
        raise RegistryError(
            f"{what} {name!r} must be 1-128 letters, digits or ._:@/- starting with a letter or digit"
        )
    return name


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise RegistryError(f"registry event field {key!r} must be a string of at most {MAX_TEXT} characters")
    return value


__all__ = ["AgentRecord", "KeyRecord", "Registry", "check_agent_id"]
