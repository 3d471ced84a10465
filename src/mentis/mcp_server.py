"""MCP tools: thin adapters over :class:`mentis.memory.Memory` (official ``mcp`` SDK, MCPServer).

Each tool is generated from its input model in ``mentis.model``: the published input schema is
that model's JSON schema (``additionalProperties: false`` at every level), and the arguments are
validated by the same model the CLI uses, so limits and messages are defined once. MCPServer
builds an arguments model from a function signature that ignores unknown top-level arguments;
we replace it with a pass-through so the input model sees, and rejects, every key.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict

from mentis import __version__
from mentis.errors import MentisError
from mentis.memory import Caller, Memory
from mentis.model import (
    ForgetInput,
    MarkOutdatedInput,
    RecallInput,
    RecordAttemptInput,
    SearchInput,
    Strict,
    parse,
)

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
Mentis is a shared memory of what coding agents tried. Before working on a problem, call
`search` with a description of it in your own words: earlier attempts (passed, failed, or
marked outdated) show what was already learned. After each attempt, call `record_attempt` with
the action, what you observed, your inference kept apart, and the check you ran. When a
conclusion turns out wrong or stale, call `mark_conclusion_outdated` instead of recording over it.
"""


class VerifyInput(Strict):
    repository: str | None = None


class _PassThrough(ArgModelBase):
    """Accepts any arguments and hands them on unchanged to the tool's own input model."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


def caller_from(ctx: Context[Any, Any]) -> Caller:
    """The agent identity: MENTIS_AGENT_ID from the harness config, else the client's name."""
    agent = os.environ.get("MENTIS_AGENT_ID")
    if not agent:
        params = ctx.session.client_params if ctx.session is not None else None
        agent = params.client_info.name if params is not None else None
    return Caller(agent_id=agent or "unknown-agent")


def _make_tool(
    name: str,
    model: type[BaseModel],
    call: Callable[[Memory, Caller, Any], BaseModel],
    output: type[BaseModel],
    description: str,
    annotations: ToolAnnotations,
) -> Tool:
    def run(ctx: Context[Any, Any], **arguments: Any) -> BaseModel:
        memory: Memory = ctx.request_context.lifespan_context
        try:
            req = parse(model, arguments)
            return call(memory, caller_from(ctx), req)
        except MentisError as exc:
            raise ToolError(f"[{exc.code}] {exc}") from exc

    run.__name__ = name
    run.__annotations__ = {"ctx": Context, "arguments": Any, "return": output}
    tool = Tool.from_function(run, name=name, description=description, annotations=annotations)
    tool.fn_metadata.arg_model = _PassThrough
    tool.parameters = model.model_json_schema()
    return tool


def _tools() -> list[Tool]:
    from mentis.model import (
        ForgetResult,
        MarkOutdatedResult,
        RecallResult,
        RecordAttemptResult,
        SearchResult,
        VerifyResult,
    )

    write = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False)
    read = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return [
        _make_tool(
            "record_attempt",
            RecordAttemptInput,
            lambda m, c, r: m.record_attempt(c, r),
            RecordAttemptResult,
            "Record one attempt at a task: the action you took, the files it touched, what you "
            "observed, an optional inference (kept apart from the observation), and the check you "
            "ran (command + passed/failed; omit it when nothing was verified). Creates the task on "
            "its first attempt. Returns the attempt id and its ledger position.",
            write,
        ),
        _make_tool(
            "search",
            SearchInput,
            lambda m, c, r: m.search(c, r),
            SearchResult,
            "Find tasks where agents already worked on a problem, from a description in your own "
            "words. Returns tasks best first, each with one matching attempt, its status "
            "(passed/failed/unverified), its newest correction if it was marked outdated, and the "
            "score parts. Pass current_file_hashes to learn which results touch files that changed.",
            read,
        ),
        _make_tool(
            "recall",
            RecallInput,
            lambda m, c, r: m.recall(c, r),
            RecallResult,
            "Read a task's full history (repository + task_id), or run read-only SQL (sql, params) "
            "over the views tasks, attempts and corrections. SQL results are capped at 100 rows and "
            "512,000 bytes (truncation is flagged) and 5 seconds.",
            read,
        ),
        _make_tool(
            "mark_conclusion_outdated",
            MarkOutdatedInput,
            lambda m, c, r: m.mark_conclusion_outdated(c, r),
            MarkOutdatedResult,
            "Mark an attempt's conclusion as outdated, with the reason (and the commit where you saw "
            "it). The attempt itself never changes; every correction is kept and the newest is shown "
            "with the attempt in search results.",
            write,
        ),
        _make_tool(
            "forget_attempt",
            ForgetInput,
            lambda m, c, r: m.forget_attempt(c, r),
            ForgetResult,
            "Erase an attempt's content (and its corrections) from the memory, e.g. when it holds a "
            "secret. The ledger keeps a tombstone (who, when, why), so the chain still verifies.",
            ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
        ),
        _make_tool(
            "verify_integrity",
            VerifyInput,
            lambda m, c, r: m.verify_integrity(c, r.repository),
            VerifyResult,
            "Verify the hash chains of the ledger (all repositories, or one). Fails with the chain, "
            "seq and what did not match when the store was altered.",
            read,
        ),
    ]


def build_server(memory: Memory) -> MCPServer[Memory]:
    """An MCP server over an already opened (and verified) ``memory``."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[Memory]) -> AsyncIterator[Memory]:
        yield memory

    return MCPServer(
        name="mentis",
        instructions=INSTRUCTIONS,
        version=__version__,
        tools=_tools(),
        lifespan=lifespan,
        log_level="WARNING",
    )
