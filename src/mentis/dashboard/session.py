"""Dashboard sessions and CSRF tokens, signed with HMAC-SHA256.

The session cookie reads ``<token id>.<expires>.<nonce>.<signature>``: the id of the token the
person signed in with (``-`` before signing in, and under ``--no-auth``), a Unix expiry time, 16
random bytes and the HMAC of the rest under a secret. The cookie never holds the token's secret;
the token itself is looked up on every request, so revoking or expiring it ends the session at once.

The CSRF token of a form is the HMAC of the session's nonce (session-bound): a form replayed
without it, with another session's, or after signing in again is refused. A new nonce is issued
at sign-in, so a session fixed before sign-in does not survive it.

The secret is per process unless one is configured, so restarting the server signs everyone out,
and replicas behind one address need the same configured secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "mentis_session"
ANONYMOUS = "-"
DEFAULT_TTL_S = 12 * 3600
_COOKIE_FORM = re.compile(r"^(-|[0-9a-f]{12})\.([0-9]{1,12})\.([0-9a-f]{32})\.([0-9a-f]{64})$")


@dataclass(frozen=True)
class Session:
    token_id: str
    expires: int
    nonce: str

    @property
    def signed_in(self) -> bool:
        return self.token_id != ANONYMOUS


class Signer:
    """Issues and checks session cookies and CSRF tokens under one secret."""

    def __init__(
        self, secret: bytes | None = None, ttl_s: int = DEFAULT_TTL_S, clock: Callable[[], float] = time.time
    ) -> None:
        if secret is not None and len(secret) < 32:
            raise ValueError("a session secret needs at least 32 bytes")
        self._secret = secret or secrets.token_bytes(32)
        self.ttl_s = ttl_s
        self._clock = clock

    def _mac(self, purpose: bytes, text: str) -> str:
        return hmac.new(self._secret, purpose + b"\0" + text.encode(), hashlib.sha256).hexdigest()

    def issue(self, token_id: str = ANONYMOUS, expires: int | None = None) -> tuple[str, Session]:
        """A new session (fresh nonce) and its cookie value; ``expires`` defaults to now + ttl."""
        if expires is None:
            expires = int(self._clock()) + self.ttl_s
        session = Session(token_id, expires, secrets.token_hex(16))
        payload = f"{session.token_id}.{session.expires}.{session.nonce}"
        return f"{payload}.{self._mac(b'session', payload)}", session

    def read(self, value: str | None) -> tuple[Session | None, str]:
        """(the session, "") for a valid cookie, else (None, why): ``missing``, ``forged`` or ``expired``."""
        if not value:
            return None, "missing"
        found = _COOKIE_FORM.match(value)
        if found is None:
            return None, "forged"
        token_id, expires, nonce, mac = found.groups()
        if not hmac.compare_digest(self._mac(b"session", f"{token_id}.{expires}.{nonce}"), mac):
            return None, "forged"
        if int(expires) <= self._clock():
            return None, "expired"
        return Session(token_id, int(expires), nonce), ""

    def csrf(self, session: Session) -> str:
        return self._mac(b"csrf", session.nonce)

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(self.csrf(session), given)
