"""Real Ed25519 keys in the agent registry, and the client's half of a remote signed write."""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mentis.api.signed import PrepareWriteInput, PrepareWriteResult, SignedWriteInput, SignedWriteResult
from mentis.ledger import signing
from mentis.ledger.bodies import AgentEventBody
from mentis.service.memory import Caller, Memory
from mentis.service.operations import prepare_write, signed_write
from mentis.store.protocol import Store
from mentis.store.seal import Seal


def register_key(store: Store, agent: str, key: Ed25519PrivateKey | None = None) -> Ed25519PrivateKey:
    """Register ``agent`` with a (new) key through the store's registry events, as an admin would."""
    key = key or Ed25519PrivateKey.generate()
    public = key.public_key()
    register = AgentEventBody(
        op="register", agent_id=agent, by="admin", display_name=agent, description="", aliases=[]
    )
    store.append_agent_event(register, Seal())
    add = AgentEventBody(
        op="key_add",
        agent_id=agent,
        by="admin",
        key_id=signing.key_id_of(public),
        public_key=signing.public_text(public),
    )
    store.append_agent_event(add, Seal())
    return key


def prepare(memory: Memory, caller: Caller, tool: str, arguments: dict[str, Any]) -> PrepareWriteResult:
    return prepare_write(memory, caller, PrepareWriteInput(tool=tool, arguments=arguments))


def fields_of(p: PrepareWriteResult) -> signing.Unsigned:
    return signing.Unsigned(p.chain, p.kind, p.id, p.at, p.agent, p.body_hash)


def sign_and_write(
    memory: Memory,
    caller: Caller,
    signer: signing.Signer,
    tool: str,
    arguments: dict[str, Any],
) -> SignedWriteResult:
    """Both phases, as the proxy runs them."""
    p = prepare(memory, caller, tool, arguments)
    key_id, sig = signer.sign(fields_of(p))
    return signed_write(
        memory,
        caller,
        SignedWriteInput(
            tool=tool, arguments=arguments, id=p.id, at=p.at, key_id=key_id, sig=sig, body_hash=p.body_hash
        ),
    )


def ledger(memory: Memory) -> list[str]:
    return [e.hash for e, _ in memory.store.iter_ledger()]
