"""MCP tools: thin adapters over :class:`mentis.service.memory.Memory` (official ``mcp`` SDK, MCPServer).

Each tool is generated from its input model in ``mentis.api``: the published input schema is
that model's JSON schema (``additionalProperties: false`` at every level), and the arguments are
validated by the same model the CLI uses, so limits and messages are defined once. MCPServer
builds an arguments model from a function signature that ignores unknown top-level arguments;
we replace it with a pass-through so the input model sees, and rejects, every key.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict

from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import Forbidden, MentisError
from mentis.service.access import resolve_caller
from mentis.service.memory import Caller, Memory
from mentis.service.operations import OPERATIONS, Operation
from mentis.service.tokens import CALLER_SCOPE_KEY
from mentis.version import __version__

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
Mentis is a shared memory of what coding agents tried. Before working on a problem, call
`search` with a description of it in your own words: earlier attempts (passed, failed, or
marked outdated) show what was already learned. After each attempt, call `record_attempt` with
the action, what you observed, your inference kept apart, and the check you ran. When a
conclusion turns out wrong or stale, call `mark_conclusion_outdated` instead of recording over it.
"""


class _PassThrough(ArgModelBase):
    """Accepts any arguments and hands them on unchanged to the tool's own input model."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.__pydantic_extra__ or {})


def caller_from(ctx: Context[Any, Any], settings: Settings) -> Caller:
    """Over HTTP, the Caller the auth middleware attached (the token's agent and scope); over
    stdio, the one :func:`resolve_caller` gives for the client's reported name."""
    request = ctx.request_context.request
    if request is not None:
        caller = getattr(request, "scope", {}).get(CALLER_SCOPE_KEY)
        if not isinstance(caller, Caller):
            raise Forbidden("this HTTP request carries no authenticated caller")
        return resolve_caller(settings, authenticated=caller)
    params = ctx.session.client_params if ctx.session is not None else None
    return resolve_caller(settings, client_name=params.client_info.name if params is not None else None)


def _make_tool(op: Operation) -> Tool:
    def run(ctx: Context[Any, Any], **arguments: Any) -> BaseModel:
        memory: Memory = ctx.request_context.lifespan_context
        try:
            return op.call(memory, caller_from(ctx, memory.settings), parse(op.input, arguments))
        except MentisError as exc:
            raise ToolError(f"[{exc.code}] {exc}") from exc

    run.__name__ = op.name
    run.__annotations__ = {"ctx": Context, "arguments": Any, "return": op.output}
    annotations = ToolAnnotations(
        read_only_hint=not op.writes,
        destructive_hint=op.destructive,
        idempotent_hint=not op.writes,
        open_world_hint=False,
    )
    tool = Tool.from_function(run, name=op.name, description=op.description, annotations=annotations)
    tool.fn_metadata.arg_model = _PassThrough
    tool.parameters = op.input.model_json_schema()
    return tool


def build_server(memory: Memory) -> MCPServer[Memory]:
    """An MCP server over an already opened (and verified) ``memory``."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[Memory]) -> AsyncIterator[Memory]:
        yield memory

    return MCPServer(
        name="mentis",
        instructions=INSTRUCTIONS,
        version=__version__,
        tools=[_make_tool(op) for op in OPERATIONS],
        lifespan=lifespan,
        log_level="WARNING",
    )
