"""How a hook reaches the memory: a running ``mentis serve --http`` (fast: no model to load), or
the store in this process (the fallback: opens the store and loads the embedding model on
every call; ``bench/hooks.py`` measures both).

Both take and return the JSON of the ``record_attempt`` and ``search`` operations, so the hook
never holds a rule of its own: the server (or ``Memory``) validates and scopes every call.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mentis.errors import ConfigError, HookCallFailed

HTTP_TIMEOUT_S = 5.0
HOOK_BUSY_TIMEOUT_MS = 3_000


class HttpBackend:
    """REST calls to ``POST {url}/v1/<operation>`` with the token from a file (standard library only)."""

    def __init__(self, url: str, token_file: Path | None) -> None:
        self.url = url
        self.token: str | None = None
        if token_file is not None:
            try:
                self.token = token_file.read_text().strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read the hook token file {token_file} ({exc.strerror}); "
                    "create one with `mentis token create` or fix [server] token_file in hooks.toml"
                ) from None
            if not self.token:
                raise ConfigError(f"the hook token file {token_file} is empty")

    def call(self, operation: str, body: dict[str, Any]) -> dict[str, Any]:
        import urllib.error  # here, not at the top: the hook's start-up pays only when it calls
        import urllib.request

        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(
            f"{self.url}/v1/{operation}", data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
                data = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise HookCallFailed(f"{operation} at {self.url}: HTTP {exc.code} {_error_text(exc)}") from None
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise HookCallFailed(
                f"{operation}: cannot reach {self.url} ({reason}); is `mentis serve --http` running?"
            ) from None
        except ValueError:
            raise HookCallFailed(f"{operation} at {self.url}: the answer is not JSON") from None
        if not isinstance(data, dict):
            raise HookCallFailed(f"{operation} at {self.url}: the answer is not a JSON object")
        return data

    def close(self) -> None:
        return None


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        error = json.loads(exc.read()).get("error", {})
        return f"{error.get('code', '')}: {error.get('message', '')}"
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)


class LocalBackend:
    """The store opened in this process, as the CLI opens it (``MENTIS_DB``, ``MENTIS_HOME``…)."""

    def __init__(self, agent_id: str) -> None:
        from mentis.config import Settings
        from mentis.service.access import resolve_caller
        from mentis.service.memory import Memory
        from mentis.store.sqlite import connection as sqlite_base

        # a hook waits on a locked store for seconds, not the 30 s a CLI or server may wait
        sqlite_base.BUSY_TIMEOUT_MS = min(sqlite_base.BUSY_TIMEOUT_MS, HOOK_BUSY_TIMEOUT_MS)

        settings = Settings.from_env()
        self.memory = Memory.open(settings)
        self.caller = resolve_caller(self.memory.settings, default=agent_id)  # the signing key's agent

    def call(self, operation: str, body: dict[str, Any]) -> dict[str, Any]:
        from mentis.api.common import parse
        from mentis.service.operations import BY_NAME

        op = BY_NAME[operation]
        result = op.call(self.memory, self.caller, parse(op.input, body))
        out: dict[str, Any] = result.model_dump(mode="json")
        return out

    def close(self) -> None:
        self.memory.close()


if TYPE_CHECKING:
    import urllib.error

Backend = HttpBackend | LocalBackend


def check_local_allowed() -> None:
    """``MENTIS_HOOK_LOCAL=0``: a hook without a server must not open the store itself."""
    if os.environ.get("MENTIS_HOOK_LOCAL", "1") == "0":
        raise ConfigError(
            "no hook server configured ([server] url in hooks.toml or MENTIS_HOOK_URL) and "
            "MENTIS_HOOK_LOCAL=0 forbids opening the store in the hook"
        )


def open_backend(url: str | None, token_file: Path | None, agent_id: str) -> Backend:
    if url:
        return HttpBackend(url, token_file)
    check_local_allowed()
    return LocalBackend(agent_id)
