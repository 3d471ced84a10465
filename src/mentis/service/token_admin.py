"""Token administration for callers of the service (the dashboard's admin page).

The CLI manages tokens as whoever may open the store (the file's owner, or a user of the PostgreSQL
database); over HTTP only an admin caller may (:func:`mentis.service.access.may_admin`: an
``admin`` token, or ``--no-auth`` on loopback). The dashboard only parses, calls and formats.
"""

from __future__ import annotations

from datetime import UTC, datetime

from mentis.service.access import Caller, may_admin
from mentis.service.tokens import TokenInfo, TokenStore, parse_duration


def list_tokens(caller: Caller, tokens: TokenStore) -> list[TokenInfo]:
    may_admin(caller)
    return tokens.list()


def create_token(
    caller: Caller,
    tokens: TokenStore,
    *,
    scope: str,
    repositories: tuple[str, ...],
    agent: str | None,
    expires: str | None,
) -> tuple[str, TokenInfo]:
    """A new token (shown once) and its record; validation is :meth:`TokenStore.create`'s."""
    may_admin(caller)
    expires_at = datetime.now(UTC) + parse_duration(expires) if expires else None
    return tokens.create(scope=scope, repositories=repositories, agent=agent, expires_at=expires_at)


def revoke_token(caller: Caller, tokens: TokenStore, token_id: str) -> TokenInfo:
    may_admin(caller)
    return tokens.revoke(token_id)
