"""The agent registry operations' inputs and outputs (register_agent, add_agent_key,
revoke_agent_key, disable_agent, list_agents, show_agent)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from mentis.api.common import LedgerRef, NonEmptyText, Out, Strict, Text, Title
from mentis.errors import RegistryError
from mentis.ledger.registry import check_agent_id


def _agent_name(value: str) -> str:
    try:
        return check_agent_id(value)
    except RegistryError as exc:
        raise ValueError(str(exc)) from None


AgentName = Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_agent_name)]
KeyId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^ed25519:[0-9a-f]{32}$")]

# ---------------------------------------------------------------- inputs


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


# ---------------------------------------------------------------- outputs


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
