"""A new signing key for an agent (``mentis agent keygen``): the private key goes to a file of its
own (PEM, mode 0600, never printed), the agent is registered if it is new and the public key added
to it; when the registry refuses, the key file is removed, so no unregistered key is left behind."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mentis.api.agents import AddAgentKeyInput, RegisterAgentInput
from mentis.api.common import parse
from mentis.ledger import signing
from mentis.service.access import Caller
from mentis.service.memory import Memory


@dataclass(frozen=True)
class NewKey:
    agent_id: str
    key_id: str
    path: Path

    @property
    def env(self) -> str:
        """The setting that makes ``mentis serve`` sign with this key."""
        return f"MENTIS_SIGNING_KEY={self.path}"

    def to_json(self) -> dict[str, Any]:
        return {"agent_id": self.agent_id, "key_id": self.key_id, "path": str(self.path), "env": self.env}


def default_key_path(home: Path, agent_id: str, key_id: str) -> Path:
    """``$MENTIS_HOME/keys/<agent>-<part of the key id>.pem``, the agent id made a safe file name."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", agent_id)
    return home / "keys" / f"{slug}-{key_id[8:16]}.pem"


def create_agent_key(memory: Memory, caller: Caller, agent_id: str, out: Path | None = None) -> NewKey:
    """Make an Ed25519 key for ``agent_id``, write it to ``out`` (default :func:`default_key_path`;
    never over an existing file) and register its public half; on any failure no key file remains."""
    key = Ed25519PrivateKey.generate()
    public, key_id = signing.public_text(key.public_key()), signing.key_id_of(key.public_key())
    add = parse(AddAgentKeyInput, {"agent_id": agent_id, "public_key": public})
    path = signing.write_private_key(key, out or default_key_path(memory.settings.home, agent_id, key_id))
    try:
        if memory.store.agent_registry().resolve(agent_id) is None:
            memory.register_agent(caller, parse(RegisterAgentInput, {"agent_id": agent_id}))
        memory.add_agent_key(caller, add)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return NewKey(agent_id, key_id, path)
