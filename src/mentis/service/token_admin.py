"""Token administration for callers of the service (the dashboard's admin page).

The CLI manages tokens as whoever may open the store (the file's owner, or a user of the PostgreSQL
database); over HTTP only an admin caller may: one with
write scope on every repository (an ``admin`` token, or ``--no-auth`` on loopback). The rule is
here once; the dashboard only parses, calls and formats.
"""

from __future__ import annotations

from datetime import UTC, datetime

from mentis.errors import Forbidden
from mentis.service.context import Caller
from mentis.service.tokens import TokenInfo, TokenStore, parse_duration


def is_admin(caller: Caller) -> bool:
    return caller.can_write and caller.repositories is None


def require_admin(caller: Caller) -> None:
    if not is_admin(caller):
        raise Forbidden("only an admin token may manage tokens; `mentis token create --scope admin`")


def list_tokens(caller: Caller, tokens: TokenStore) -> list[TokenInfo]:
    require_admin(caller)
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
    require_admin(caller)
    expires_at = datetime.now(UTC) + parse_duration(expires) if expires else None
    return tokens.create(scope=scope, repositories=repositories, agent=agent, expires_at=expires_at)


def revoke_token(caller: Caller, tokens: TokenStore, token_id: str) -> TokenInfo:
    require_admin(caller)
    return tokens.revoke(token_id)
