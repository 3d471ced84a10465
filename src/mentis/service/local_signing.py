"""Local signing: a process started with ``MENTIS_SIGNING_KEY`` signs its agent's writes.

The key must be registered (``mentis agent keygen`` does it); its agent, from the registry, is
the one whose writes this process signs, and the process's agent when ``MENTIS_AGENT_ID`` is not
set (setting it to another agent is a ConfigError). ``Memory`` is given the :class:`LocalSigner`
when it is opened, and runs each write by that agent inside :meth:`LocalSigner.sealing`: one
write at a time, so the stream's statements reach the store in the order they were signed (on
PostgreSQL two chains' writes commit independently, and a statement whose predecessor has not
committed is refused), and a new stream after any failure, so a stream never has a gap.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from mentis.config import Settings
from mentis.errors import ConfigError
from mentis.ledger import signing
from mentis.store.protocol import Store
from mentis.store.seal import Seal


class LocalSigner:
    """The signing stream of the process's agent, and the lock its writes take."""

    def __init__(self, signer: signing.Signer) -> None:
        self.signer = signer
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, store: Store, settings: Settings) -> LocalSigner | None:
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

    @contextmanager
    def sealing(self) -> Iterator[Seal]:
        """The seal of one write by this agent, signed with the stream; held for the whole write
        (one at a time), and the stream restarted when the write fails."""
        with self._lock:
            try:
                yield Seal(sign=self.signer.sign)
            except BaseException:
                self.signer.restart()
                raise


__all__ = ["LocalSigner"]
