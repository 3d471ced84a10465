"""Real Ed25519 keys in the agent registry, and the client's half of a remote signed write."""

from __future__ import annotations

import uuid
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mentis.api.signed import PrepareWriteInput, PrepareWriteResult, SignedWriteInput, SignedWriteResult
from mentis.ledger import registry as agents
from mentis.ledger import signing
from mentis.service.memory import Caller, Memory
from mentis.service.signed_writes import prepare_write, signed_write
from mentis.store.protocol import Store


def register_key(store: Store, agent: str, key: Ed25519PrivateKey | None = None) -> Ed25519PrivateKey:
    """Register ``agent`` with a (new) key through the store's registry events, as an admin would."""
    key = key or Ed25519PrivateKey.generate()
    public = key.public_key()
    at = signing.now_iso()
    register = agents.event("register", agent, at, "admin", display_name=agent, description="", aliases=[])
    store.append_agent_event(str(uuid.uuid4()), at, "admin", register)
    at = signing.now_iso()
    add = agents.event(
        "key_add",
        agent,
        at,
        "admin",
        key_id=signing.key_id_of(public),
        public_key=signing.public_text(public),
    )
    store.append_agent_event(str(uuid.uuid4()), at, "admin", add)
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
