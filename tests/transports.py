"""One operation, run through each transport a user has: MCP (the official client over streamable
HTTP), REST, and the CLI (typer's CliRunner on the same SQLite file).

``Call(transport, live, env)("search", {...})`` runs the operation named as in ``operations.py``
with that input and returns ``("ok", result as JSON)`` or ``(error code, message)``; ``.direct``
gives the same pair from the service itself for the same caller, so a test proves a transport thin
by comparing the two. The CLI has no option for some inputs (an unknown field, current file
hashes): asking it for one fails the test instead of dropping the field.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import httpx2
from typer.testing import CliRunner

from mentis.cli import app
from mentis.errors import MentisError
from mentis.memory import Caller, Memory
from mentis.model import parse
from mentis.operations import OPERATIONS

from .http_support import LiveServer, mcp_client

TRANSPORTS = ("mcp", "rest", "cli")
AGENT = "parity"
"""The agent every transport writes as: the token's over MCP and REST, MENTIS_AGENT_ID on the CLI."""


def _error_classes(base: type[MentisError] = MentisError) -> list[type[MentisError]]:
    return [base, *(c for sub in base.__subclasses__() for c in _error_classes(sub))]


ERROR_CODES = {cls.exit_code: cls.code for cls in _error_classes()}
"""CLI exit code -> error code (typer's own usage errors exit 2, as InvalidInput does)."""


def direct(memory: Memory, caller: Caller, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
    """The service's own answer: what every transport must give back."""
    (op,) = [op for op in OPERATIONS if op.name == name]
    try:
        return "ok", op.call(memory, caller, parse(op.input, arguments)).model_dump(mode="json")
    except MentisError as exc:
        return exc.code, exc.message


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _options(arguments: dict[str, Any], names: dict[str, str]) -> list[str]:
    argv: list[str] = []
    for key, value in arguments.items():
        if key not in names:
            raise AssertionError(f"the CLI has no option for {key!r}")
        for item in value if isinstance(value, list) else [value]:
            argv += [names[key], str(item)]
    return argv


def cli_argv(name: str, arguments: dict[str, Any]) -> list[str]:
    """The command line that runs operation ``name`` with ``arguments`` (today's command names)."""
    args = dict(arguments)
    if name == "search":
        return ["search", args.pop("query"), *_options(args, {"repository": "--repo", "limit": "--limit"})]
    if name == "recall":
        sql = [args.pop("sql")] if "sql" in args else []
        params = [f"{k}={v}" for k, v in (args.pop("params", None) or {}).items()]
        return [
            "recall",
            *sql,
            *_options(args, {"repository": "--repo", "task_id": "--task"}),
            *(a for p in params for a in ("--param", p)),
        ]
    if name == "verify_integrity":
        return ["verify", *_options(args, {"repository": "--repo"})]
    if name in ("mark_conclusion_outdated", "forget_attempt"):
        command = "outdated" if name == "mark_conclusion_outdated" else "forget"
        head = [command, args.pop("attempt_id")] if "attempt_id" in args else [command]
        return [
            *head,
            *_options(args, {k: _flag(k) for k in ("reason", "latest_commit")} | {"repository": "--repo"}),
        ]
    if name == "record_attempt":
        check = args.pop("check", None) or {}
        context = args.pop("code_context", None) or {}
        if set(context) - {"commit"}:
            raise AssertionError(f"the CLI has no option for code_context {sorted(context)}")
        names = {"repository": "--repo", "task_id": "--task", "task_title": "--title", "files": "--file"}
        names |= {k: _flag(k) for k in ("action", "observation", "inference")} | {"tags": "--tag"}
        checks = {"command": "--check-command", "status": "--check-status", "exit_code": "--exit-code"}
        return [
            "record",
            *_options(args, names),
            *_options(check, checks),
            *_options(context, {"commit": "--commit"}),
        ]
    if name == "stats":
        return ["stats", *_options(args, {"repository": "--repo"})]
    raise AssertionError(f"no CLI command is mapped for {name!r} here")


class Call:
    """Runs operations through one transport against one live server's store."""

    def __init__(
        self, transport: str, live: LiveServer, env: dict[str, str], repositories: tuple[str, ...] = ("*",)
    ) -> None:
        self.transport = transport
        self.live = live
        self.env = env
        self.token = live.token("write", repositories, agent=AGENT)
        self.caller = Caller(AGENT, repositories=None if transport == "cli" else repositories)
        """Who the service sees: the token's holder, or on the CLI the store's (unscoped) owner."""

    def __repr__(self) -> str:
        return f"Call({self.transport})"

    def scoped(self, *repositories: str) -> Call:
        """The same transport for a write token limited to ``repositories`` (not the CLI: no token)."""
        assert self.transport != "cli", "the CLI runs as the store's owner and takes no token"
        return Call(self.transport, self.live, self.env, repositories)

    def direct(self, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
        """The service's own answer to this transport's caller."""
        return direct(self.live.memory, self.caller, name, arguments)

    def __call__(self, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
        if self.transport == "mcp":
            return anyio.run(self._mcp, name, arguments)
        if self.transport == "rest":
            return self._rest(name, arguments)
        return self._cli(name, arguments)

    async def _mcp(self, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
        with anyio.fail_after(30):
            async with mcp_client(self.live, self.token) as client:
                result = await client.call_tool(name, arguments)
        if not result.is_error:
            return "ok", result.structured_content
        text = result.content[0].text  # type: ignore[union-attr]
        found = re.match(r"^Error executing tool \w+: \[(\w+)\] (.*)$", text, re.DOTALL)
        assert found, text
        return found.group(1), found.group(2)

    def _rest(self, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx2.Client(base_url=self.live.url, headers=headers, timeout=30) as http:
            response = http.post(f"/v1/{name}", json=arguments)
        body = response.json()
        if response.status_code == 200:
            return "ok", body
        return body["error"]["code"], body["error"]["message"]

    def _cli(self, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
        done = CliRunner().invoke(app, [*cli_argv(name, arguments), "--json"], env=self.env)
        if done.exit_code == 0:
            return "ok", json.loads(done.stdout)
        assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
        line = done.stderr.strip()
        assert line.startswith("error: ") and "\n" not in line, done.stderr
        return ERROR_CODES[done.exit_code], line.removeprefix("error: ")
