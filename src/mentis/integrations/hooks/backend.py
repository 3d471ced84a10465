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

__all__ = ["Backend", "HookCallFailed", "existing_branch", "open_backend", "record_attempt"]

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


def record_attempt(backend: Backend, body: dict[str, Any]) -> dict[str, Any]:
    """Record the hook's attempt; one that names a memory ``branch`` (``[branches] follow_git``)
    first makes sure that branch exists: ``branch_from`` with ``exist_ok``, which forks it from the
    main line's head now on its first use and leaves an existing one as it is."""
    branch = body.get("branch")
    if branch is not None:
        backend.call("branch_from", {"repository": body["repository"], "branch": branch, "exist_ok": True})
    return backend.call("record_attempt", body)


def existing_branch(backend: Backend, repository: str, branch: str | None) -> str | None:
    """``branch`` when the memory has it, else None (the main line): a search from a checkout on a
    branch nothing was recorded on yet reads the main line, and creates nothing."""
    if branch is None:
        return None
    known = backend.call("list_branches", {"repository": repository}).get("branches", [])
    return branch if any(isinstance(b, dict) and b.get("branch") == branch for b in known) else None


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
