"""Bearer tokens for the HTTP transport: create, list, revoke and look up.

A token reads ``mentis_<id>_<secret>``. The ``id`` (12 hex digits) is public and names the token in
``mentis token list``; the ``secret`` is 32 random bytes (URL-safe base64). Only
``HMAC-SHA256(salt, secret)`` with a random per-token salt is stored, and it is compared with
:func:`hmac.compare_digest`, so the token itself cannot be read back from the store.

Tokens are credentials, not memory: they live in the store's own database, in a ``tokens`` table
outside the ledger (``mentis.store.shared.tokens``): the SQLite store file, or the PostgreSQL database of
``MENTIS_DATABASE_URL`` (:meth:`TokenStore.open`), so replicas on one database share them. They never
enter an export, and ``recall`` SQL cannot read the table. Nothing is cached: a revocation holds
on every server at its next request.

A token maps to a :class:`~mentis.service.access.Caller` (:meth:`TokenInfo.caller`): its agent name is the
caller's ``agent_id``, its repository patterns the caller's ``repositories``; ``read`` cannot write;
``admin`` may do everything on every repository. :mod:`mentis.service.access` holds the rules
every operation applies.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, cast

import orjson

from mentis.config import Settings
from mentis.errors import Conflict, InvalidInput, NotFound
from mentis.service.access import Caller
from mentis.store.shared.tokens import SqliteTokens, TokenTable

Scope = Literal["read", "write", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "write", "admin")
CALLER_SCOPE_KEY = "mentis.caller"
"""Key of the ASGI scope under which the auth middleware attaches the request's Caller."""
TOKEN_PREFIX = "mentis"
MAX_PATTERNS = 64
MAX_PATTERN_CHARS = 256

_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"
_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_TIME)


def _parse_time(text: str) -> datetime:
    return datetime.strptime(text, _TIME).replace(tzinfo=UTC)


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s`` or ``2w`` as a positive time span."""
    found = _DURATION.match(text)
    if found is None or int(found.group(1)) == 0:
        raise InvalidInput(
            f"--expires {text!r}: expected a positive number and a unit, e.g. 30d, 12h, 90m, 2w",
            field="expires",
        )
    return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


@dataclass(frozen=True)
class TokenInfo:
    """Everything stored about a token except its secret (safe to list)."""

    id: str
    agent: str
    scope: Scope
    repositories: tuple[str, ...]
    created_at: str
    expires_at: str | None = None
    revoked_at: str | None = None

    def status(self, now: datetime | None = None) -> Literal["active", "expired", "revoked"]:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and _parse_time(self.expires_at) <= (now or datetime.now(UTC)):
            return "expired"
        return "active"

    def caller(self) -> Caller:
        if self.scope == "admin":
            return Caller(agent_id=self.agent, can_write=True, repositories=None, admin=True)
        return Caller(agent_id=self.agent, can_write=self.scope == "write", repositories=self.repositories)

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "agent": self.agent,
            "scope": self.scope,
            "repositories": list(self.repositories),
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
            "status": self.status(),
        }


def _digest(salt: bytes, secret: str) -> bytes:
    return hmac.new(salt, secret.encode("utf-8"), hashlib.sha256).digest()


def _checked_name(value: str, what: str) -> str:
    if not value or value != value.strip() or len(value) > MAX_PATTERN_CHARS:
        raise InvalidInput(
            f"{what} {value!r} must be 1 to {MAX_PATTERN_CHARS} characters without surrounding whitespace",
            field=what,
        )
    if any(ord(ch) < 32 for ch in value):
        raise InvalidInput(f"{what} {value!r} must not contain control characters", field=what)
    return value


class TokenStore:
    """Tokens and their rules, over the ``tokens`` table of a store (a path: its SQLite file)."""

    def __init__(self, table: str | Path | TokenTable) -> None:
        self.table = table if isinstance(table, TokenTable) else SqliteTokens(table)
        self.path = self.table.path

    @classmethod
    def open(cls, settings: Settings) -> TokenStore:
        """The tokens of the configured store: PostgreSQL with ``MENTIS_DATABASE_URL``, moving in
        the tokens the local file ``settings.db_path`` held before (once), else the SQLite file."""
        if settings.uses_postgres:
            from mentis.store.postgres.tokens import PostgresTokens

            assert settings.database_url is not None
            return cls(PostgresTokens(settings.database_url, legacy=settings.db_path))
        return cls(settings.db_path)

    def close(self) -> None:
        self.table.close()

    def create(
        self,
        *,
        scope: str,
        repositories: tuple[str, ...] = (),
        agent: str | None = None,
        expires_at: datetime | None = None,
    ) -> tuple[str, TokenInfo]:
        """A new token; returns the token (shown once, never stored) and what is stored about it."""
        made = self._create(scope, repositories, agent, expires_at)
        assert made is not None
        return made

    def create_first_admin(self) -> str | None:
        """An admin token (agent ``admin``), only on a store holding no token at all, else None."""
        made = self._create("admin", (), "admin", None, only_if_empty=True)
        return None if made is None else made[0]

    def _create(
        self,
        scope: str,
        repositories: tuple[str, ...],
        agent: str | None,
        expires_at: datetime | None,
        *,
        only_if_empty: bool = False,
    ) -> tuple[str, TokenInfo] | None:
        if scope not in SCOPES:
            raise InvalidInput(f"--scope {scope!r}: expected one of {', '.join(SCOPES)}", field="scope")
        patterns = tuple(_checked_name(p, "repository pattern") for p in repositories)
        if scope == "admin":
            patterns = ("*",)
        elif not patterns:
            raise InvalidInput(
                "a read or write token needs at least one --repo PATTERN (e.g. github.com/acme/*)",
                field="repo",
            )
        if len(patterns) > MAX_PATTERNS:
            raise InvalidInput(f"at most {MAX_PATTERNS} repository patterns per token", field="repo")
        token_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        info = TokenInfo(
            id=token_id,
            agent=_checked_name(agent, "agent") if agent is not None else f"token-{token_id}",
            scope=scope,
            repositories=patterns,
            created_at=_iso(datetime.now(UTC)),
            expires_at=_iso(expires_at) if expires_at is not None else None,
        )
        row = (
            info.id,
            info.agent,
            info.scope,
            orjson.dumps(list(patterns)).decode(),
            salt,
            _digest(salt, secret),
            info.created_at,
            info.expires_at,
        )
        if not self.table.insert(row, only_if_empty=only_if_empty):
            return None
        return f"{TOKEN_PREFIX}_{token_id}_{secret}", info

    @staticmethod
    def _info(row: tuple[object, ...]) -> TokenInfo:
        return TokenInfo(
            id=str(row[0]),
            agent=str(row[1]),
            scope=cast(Scope, row[2]),
            repositories=tuple(orjson.loads(cast(str, row[3]))),
            created_at=str(row[4]),
            expires_at=cast("str | None", row[5]),
            revoked_at=cast("str | None", row[6]),
        )

    def list(self) -> list[TokenInfo]:
        return [self._info(r) for r in self.table.select()]

    def count(self) -> int:
        return self.table.count()

    def revoke(self, token_id: str) -> TokenInfo:
        if not self.table.revoke(token_id, _iso(datetime.now(UTC))):
            if self.get(token_id) is None:
                raise NotFound(f"no token {token_id!r}; `mentis token list` shows the ids")
            raise Conflict(f"token {token_id} is already revoked")
        info = self.get(token_id)
        assert info is not None  # tokens are never deleted
        return info

    def get(self, token_id: str) -> TokenInfo | None:
        """The stored record of the token ``token_id`` (any status), or None."""
        rows = self.table.select(token_id)
        return self._info(rows[0]) if rows else None

    def lookup(self, token: str) -> TokenInfo | None:
        """The stored record of ``token`` when its secret matches, else None (in constant time).

        The record is returned even when expired or revoked; :meth:`TokenInfo.status` says which.
        """
        prefix, _, rest = token.partition("_")
        token_id, _, secret = rest.partition("_")
        rows: list[tuple[object, ...]] = []
        if prefix == TOKEN_PREFIX and re.fullmatch(r"[0-9a-f]{12}", token_id) and secret:
            rows = self.table.select(token_id, secret=True)
        salt, digest = (
            (bytes(cast(bytes, rows[0][7])), bytes(cast(bytes, rows[0][8]))) if rows else (b"\0" * 16, b"")
        )
        matches = hmac.compare_digest(_digest(salt, secret), digest)
        return self._info(rows[0][:7]) if rows and matches else None


ADMIN_TOKEN_FILE = "admin.token"


def bootstrap_admin(tokens: TokenStore, path: Path) -> bool:
    """On a store with no tokens at all, create an admin token and write it to ``path`` (mode 0600).

    Returns whether it did. This is what lets ``make run`` start an authenticated server in one step.
    """
    from mentis.store.shared.files import private_dir, write_private

    if tokens.count():
        return False
    private_dir(path.parent)  # with PostgreSQL nothing else may have made the home directory yet
    token = tokens.create_first_admin()
    if token is None:  # another server made it first
        return False
    write_private(path, (token + "\n").encode())
    return True
