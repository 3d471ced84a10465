"""How a hook reaches the memory: the ``mentis serve --http`` named in hooks.toml ``[server] url``
(it wins), else the background server every hook of this user and store shares
(:mod:`mentis.integrations.hooks.background`, started by the first hook that needs it).

Either way it is a REST call taking and returning the JSON of the ``record_attempt`` and
``search`` operations, so the hook never holds a rule of its own: the server validates and
scopes every call. ``bench/hooks.py`` measures both.
"""

from __future__ import annotations

import http.client
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mentis.config import Settings
from mentis.errors import ConfigError, HookCallFailed
from mentis.integrations.hooks import background
from mentis.integrations.hooks.background import Client
from mentis.integrations.hooks.config import check_local_allowed

__all__ = ["Backend", "HookCallFailed", "open_backend"]

CALL_TIMEOUT_S = 10.0


class Backend:
    """``POST <prefix>/v1/<operation>`` over a connection (standard library only)."""

    def __init__(self, client: Client, where: str, prefix: str = "") -> None:
        self.client = client
        self.where = where
        self.prefix = prefix

    @classmethod
    def at_url(cls, url: str, token_file: Path | None) -> Backend:
        """The server at ``url``, with the bearer token read from ``token_file``."""
        token = None
        if token_file is not None:
            try:
                token = token_file.read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read the hook token file {token_file} ({exc.strerror}); "
                    "create one with `mentis token create` or fix [server] token_file in hooks.toml"
                ) from None
            if not token:
                raise ConfigError(f"the hook token file {token_file} is empty")
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(host, port, timeout=CALL_TIMEOUT_S)
        else:
            connection = http.client.HTTPConnection(host, port, timeout=CALL_TIMEOUT_S)
        return cls(Client(connection, token=token), url, parts.path.rstrip("/"))

    def call(self, operation: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            status, data = self.client.request("POST", f"{self.prefix}/v1/{operation}", body)
        except (OSError, http.client.HTTPException) as exc:
            hint = "is `mentis serve --http` running?" if self.where.startswith("http") else "see its log"
            raise HookCallFailed(f"{operation}: cannot reach {self.where} ({_reason(exc)}); {hint}") from None
        except ValueError:
            raise HookCallFailed(f"{operation} at {self.where}: the answer is not JSON") from None
        if status >= 400:
            raise HookCallFailed(f"{operation} at {self.where}: HTTP {status} {_error_text(data)}")
        if not isinstance(data, dict):
            raise HookCallFailed(f"{operation} at {self.where}: the answer is not a JSON object")
        return data

    def close(self) -> None:
        self.client.close()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _error_text(data: object) -> str:
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return f"{error.get('code', '')}: {error.get('message', '')}"
    return "(no error message)"


def open_backend(
    url: str | None, token_file: Path | None, settings: Settings, agent: str, idle_s: int
) -> Backend:
    """The server at ``url``, else this store's background server (started when none answers)."""
    if url:
        return Backend.at_url(url, token_file)
    check_local_allowed()
    client = background.reach(settings, settings.agent_id or agent, idle_s)
    client.set_timeout(CALL_TIMEOUT_S)
    return Backend(client, f"the background server on {background.place(settings).socket}")
