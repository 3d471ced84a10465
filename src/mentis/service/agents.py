"""The agent registry operations (admin scope): register an agent, add or revoke a key, disable
an agent, list and show them. Each write appends one event to the registry chain through the
store (``mentis.store.shared.agents``), which checks it against the registry as it stands."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from mentis.api.models import LedgerRef, NonEmptyText, Out, Strict, Text, Title
from mentis.errors import NotFound
from mentis.ledger import signing
from mentis.ledger.bodies import AgentEventBody
from mentis.ledger.registry import AgentRecord, Registry, RegistryError, check_agent_id
from mentis.service.access import Caller, may_admin
from mentis.service.context import ServiceContext
from mentis.store.seal import Seal


def _agent_name(value: str) -> str:
    try:
        return check_agent_id(value)
    except RegistryError as exc:
        raise ValueError(str(exc)) from None


AgentName = Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_agent_name)]
KeyId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^ed25519:[0-9a-f]{32}$")]


class RegisterAgentInput(Strict):
    agent_id: AgentName
    display_name: Title = ""
    description: Text = ""
    aliases: list[AgentName] = Field(default_factory=list, max_length=16)


class AddAgentKeyInput(Strict):
    agent_id: AgentName
    public_key: str = Field(min_length=1, max_length=100)


class RevokeAgentKeyInput(Strict):
    agent_id: AgentName
    key_id: KeyId
    reason: NonEmptyText


class DisableAgentInput(Strict):
    agent_id: AgentName
    reason: NonEmptyText


class ListAgentsInput(Strict):
    pass


class ShowAgentInput(Strict):
    agent_id: AgentName


class KeyOut(Out):
    key_id: str
    public_key: str
    added_at: str
    added_by: str
    revoked_at: str | None
    reason: str | None


class AgentOut(Out):
    agent_id: str
    display_name: str
    description: str
    aliases: list[str]
    registered_at: str
    registered_by: str
    disabled_at: str | None
    disabled_reason: str | None
    must_sign: bool
    keys: list[KeyOut]


class AgentResult(Out):
    agent: AgentOut
    key_id: str | None = None
    ledger: LedgerRef


class ListAgentsResult(Out):
    agents: list[AgentOut]


def agent_out(registry: Registry, agent: AgentRecord) -> AgentOut:
    return AgentOut(
        agent_id=agent.agent_id,
        display_name=agent.display_name,
        description=agent.description,
        aliases=list(agent.aliases),
        registered_at=agent.registered_at,
        registered_by=agent.registered_by,
        disabled_at=agent.disabled_at,
        disabled_reason=agent.disabled_reason,
        must_sign=bool(agent.keys),
        keys=[KeyOut(**registry.keys[k].to_json()) for k in agent.keys],
    )


class AgentOps:
    """The registry operations over one :class:`ServiceContext`."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def _append(self, caller: Caller, body: AgentEventBody, seal: Seal) -> AgentResult:
        may_admin(caller)
        entry, registry = self.ctx.store.append_agent_event(body, seal)
        return AgentResult(
            agent=agent_out(registry, registry.agents[body.agent_id]),
            key_id=body.key_id,
            ledger=LedgerRef(seq=entry.seq, hash=entry.hash),
        )

    def register_agent(self, caller: Caller, req: RegisterAgentInput, seal: Seal) -> AgentResult:
        body = AgentEventBody(
            op="register",
            agent_id=req.agent_id,
            by=caller.agent_id,
            display_name=req.display_name or req.agent_id,
            description=req.description,
            aliases=list(req.aliases),
        )
        return self._append(caller, body, seal)

    def add_agent_key(self, caller: Caller, req: AddAgentKeyInput, seal: Seal) -> AgentResult:
        public = signing.parse_public(req.public_key)
        body = AgentEventBody(
            op="key_add",
            agent_id=req.agent_id,
            by=caller.agent_id,
            key_id=signing.key_id_of(public),
            public_key=signing.public_text(public),
        )
        return self._append(caller, body, seal)

    def revoke_agent_key(self, caller: Caller, req: RevokeAgentKeyInput, seal: Seal) -> AgentResult:
        body = AgentEventBody(
            op="key_revoke", agent_id=req.agent_id, by=caller.agent_id, key_id=req.key_id, reason=req.reason
        )
        return self._append(caller, body, seal)

    def disable_agent(self, caller: Caller, req: DisableAgentInput, seal: Seal) -> AgentResult:
        body = AgentEventBody(op="disable", agent_id=req.agent_id, by=caller.agent_id, reason=req.reason)
        return self._append(caller, body, seal)

    def list_agents(self, caller: Caller, req: ListAgentsInput) -> ListAgentsResult:
        """Every caller may read the registry (it holds public keys only); changing it is admin's."""
        registry = self.ctx.store.agent_registry()
        return ListAgentsResult(agents=[agent_out(registry, a) for a in registry.agents.values()])

    def show_agent(self, caller: Caller, req: ShowAgentInput) -> AgentOut:
        registry = self.ctx.store.agent_registry()
        agent = registry.resolve(req.agent_id)
        if agent is None:
            raise NotFound(f"no agent {req.agent_id!r} is registered; `mentis agent list` shows them")
        return agent_out(registry, agent)


__all__ = [
    "AddAgentKeyInput",
    "AgentOps",
    "AgentOut",
    "AgentResult",
    "DisableAgentInput",
    "KeyOut",
    "ListAgentsInput",
    "ListAgentsResult",
    "RegisterAgentInput",
    "RevokeAgentKeyInput",
    "ShowAgentInput",
]
