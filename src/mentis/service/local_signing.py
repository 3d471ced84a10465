"""Local signing: a process started with ``MENTIS_SIGNING_KEY`` signs its agent's writes.

The key must be registered (``mentis agent keygen`` does it); its agent, from the registry, is
the one whose writes this process signs, and the process's agent when ``MENTIS_AGENT_ID`` is not
set (setting it to another agent is a ConfigError). :meth:`LocalSigning.wrap` runs a write by that
agent inside :func:`mentis.ledger.signing.signing_with` (one write at a time, so the stream's statements
reach the store in order) and starts a new stream after any failure, so a stream never has a gap.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from functools import wraps
from typing import Any, TypeVar

from mentis.config import Settings
from mentis.errors import ConfigError
from mentis.ledger import signing
from mentis.store.protocol import Store

T = TypeVar("T")


class LocalSigning:
    """One :class:`mentis.ledger.signing.Signer` for the process's agent."""

    def __init__(self, signer: signing.Signer) -> None:
        self.signer = signer
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, store: Store, settings: Settings) -> LocalSigning | None:
        """None without ``MENTIS_SIGNING_KEY``; ConfigError when the key cannot sign here."""
        if settings.signing_key is None:
            return None
        key = signing.load_private_key(settings.signing_key)
        key_id = signing.key_id_of(key.public_key())
        found = store.agent_key(key_id)
        if found is None:
            raise ConfigError(
                f"the signing key {settings.signing_key} ({key_id}) is not in the agent registry; "
                "register it with `mentis agent keygen` or `mentis agent add-key`"
            )
        agent, _, _, revoked_at = found
        if revoked_at is not None:
            raise ConfigError(
                f"the signing key {settings.signing_key} ({key_id}) was revoked at {revoked_at}; "
                "make a new one with `mentis agent keygen`"
            )
        if settings.agent_id is not None and settings.agent_id != agent:
            raise ConfigError(
                f"MENTIS_AGENT_ID is {settings.agent_id!r} but the signing key {key_id} belongs to "
                f"agent {agent!r}; unset one or make them agree"
            )
        return cls(signing.Signer(key, agent))

    @property
    def agent(self) -> str:
        return self.signer.agent

    def install(self, memory: Any, settings: Settings) -> Settings:
        """Wrap every write operation of ``memory`` (each operation in ``mentis.service.operations`` that
        writes: signed once, here); returns ``settings`` with this agent when none was set."""
        from mentis.service.operations import OPERATIONS  # it imports mentis.service.memory

        for op in OPERATIONS:
            if op.writes and hasattr(memory, op.name):  # prepare/signed_write carry their own signature
                setattr(memory, op.name, self.wrap(getattr(memory, op.name)))
        return settings if settings.agent_id is not None else replace(settings, agent_id=self.agent)

    def wrap(self, write: Callable[..., T]) -> Callable[..., T]:
        """``write(caller, ...)`` signed when the caller is this signer's agent."""

        @wraps(write)
        def signed(caller: Any, *args: Any, **kwargs: Any) -> T:
            if getattr(caller, "agent_id", None) != self.signer.agent or signing.current_sign() is not None:
                return write(caller, *args, **kwargs)  # another agent's, or a remote signing phase's
            with self._lock, signing.signing_with(self.signer.sign):
                try:
                    return write(caller, *args, **kwargs)
                except BaseException:
                    self.signer.restart()
                    raise

        return signed


__all__ = ["LocalSigning"]
