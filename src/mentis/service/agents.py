"""The agent registry operations (admin scope): register an agent, add or revoke a key, disable
an agent, list and show them. Each write appends one event to the registry chain through the
store (``mentis.store.shared.agents``), which checks it against the registry as it stands."""

from __future__ import annotations

from mentis.api.agents import (
    AddAgentKeyInput,
    AgentOut,
    AgentResult,
    DisableAgentInput,
    KeyOut,
    ListAgentsInput,
    ListAgentsResult,
    RegisterAgentInput,
    RevokeAgentKeyInput,
    ShowAgentInput,
)
from mentis.api.common import LedgerRef
from mentis.errors import NotFound
from mentis.ledger import signing
from mentis.ledger.bodies import AgentEventBody
from mentis.ledger.registry import AgentRecord, Registry
from mentis.service.access import Caller, may_admin
from mentis.service.context import ServiceContext
from mentis.store.seal import Seal


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
            ledger=LedgerRef.of(entry),
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


__all__ = ["AgentOps", "agent_out"]
