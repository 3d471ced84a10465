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

from mentis.api.common import parse
from mentis.cli import app
from mentis.errors import MentisError
from mentis.service.memory import Caller, Memory
from mentis.service.operations import OPERATIONS

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


CLI: dict[str, tuple[str, tuple[str, ...], dict[str, str]]] = {
    # operation: (its command (words), fields given as arguments, field -> option; "a.b" is a nested field)
    "search": ("search", ("query",), {"repository": "--repo", "branch": "--branch", "limit": "--limit"}),
    "recall": ("recall", ("sql",), {"repository": "--repo", "task_id": "--task", "params": "--param"}),
    "verify_integrity": ("verify-integrity", (), {"repository": "--repo"}),
    "mark_conclusion_outdated": (
        "mark-conclusion-outdated",
        ("attempt_id",),
        {"repository": "--repo", "reason": "--reason", "latest_commit": "--latest-commit"},
    ),
    "forget_attempt": ("forget-attempt", ("attempt_id",), {"repository": "--repo", "reason": "--reason"}),
    "record_attempt": (
        "record-attempt",
        (),
        {
            "repository": "--repo",
            "branch": "--branch",
            "task_id": "--task",
            "task_title": "--title",
            "action": "--action",
            "observation": "--observation",
            "inference": "--inference",
            "files": "--file",
            "tags": "--tag",
            "check.command": "--check-command",
            "check.status": "--check-status",
            "check.exit_code": "--exit-code",
            "code_context.commit": "--commit",
        },
    ),
    "stats": ("stats", (), {"repository": "--repo"}),
    "read_skill": ("skills read", ("skill_id",), {"repository": "--repo", "version": "--version"}),
    "search_skills": ("skills search", ("query",), {"repository": "--repo", "limit": "--limit"}),
    "list_skills": ("skills list", (), {"repository": "--repo", "statuses": "--status"}),
    "skill_versions": ("skills versions", ("skill_id",), {"repository": "--repo"}),
    "deprecate_skill": ("skills deprecate", ("skill_id",), {"repository": "--repo", "reason": "--reason"}),
    "revoke_skill": ("skills revoke", ("skill_id",), {"repository": "--repo", "reason": "--reason"}),
    "delete_skill": ("skills delete", ("skill_id",), {"repository": "--repo", "reason": "--reason"}),
    "list_proposals": (
        "review list",
        (),
        {"status": "--status", "repository": "--repository", "limit": "--limit"},
    ),
    "show_proposal": ("review show", ("proposal_id",), {}),
    "accept_proposal": ("review accept", ("proposal_id",), {}),
    "reject_proposal": ("review reject", ("proposal_id",), {"reason": "--reason"}),
    "list_entity_types": ("entity-type list", (), {}),
    "append_thought": (
        "append-thought",
        ("content",),
        {"repository": "--repo", "type": "--type", "entity_type": "--entity-type"},
    ),
    "search_thoughts": (
        "search-thoughts",
        ("query",),
        {"repository": "--repo", "filters.entity_types": "--entity-type"},
    ),
    "upsert_entity_type": ("entity-type upsert", ("name",), {"description": "--description"}),
    "branch_from": (
        "branch from",
        ("branch",),
        {"repository": "--repo", "parent": "--parent", "fork_seq": "--fork-seq", "fork_hash": "--fork-hash"},
    ),
    "list_branches": ("branch list", (), {"repository": "--repo"}),
    "merge_branch": ("branch merge", ("branch",), {"repository": "--repo", "into": "--into"}),
}


def _flat(arguments: dict[str, Any], options: dict[str, str]) -> dict[str, Any]:
    """Nested objects the CLI spreads over options become "a.b" keys; parameters stay one dict."""
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if isinstance(value, dict) and key not in options:
            out |= {f"{key}.{k}": v for k, v in value.items()}
        else:
            out[key] = value
    return out


def cli_argv(name: str, arguments: dict[str, Any]) -> list[str]:
    """The command line that runs operation ``name`` with ``arguments``."""
    command, positional, options = CLI[name]
    args = _flat(arguments, options)
    argv = [*command.split(), *(str(args.pop(field)) for field in positional if field in args)]
    for key, value in args.items():
        if value is None:
            continue
        if key not in options:
            raise AssertionError(f"the CLI has no option for {key!r}")
        items = [f"{k}={v}" for k, v in value.items()] if isinstance(value, dict) else value
        for item in items if isinstance(items, list) else [items]:
            argv += [options[key], str(item)]
    return argv


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
