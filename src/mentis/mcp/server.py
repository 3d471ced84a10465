"""MCP tools: thin adapters over :class:`mentis.service.memory.Memory` (official ``mcp`` SDK, MCPServer).

Each tool is generated from its input model in ``mentis.api``: the published input schema is
that model's JSON schema (``additionalProperties: false`` at every level), and the arguments are
validated by the same model the CLI uses, so limits and messages are defined once. MCPServer
builds an arguments model from a function signature that ignores unknown top-level arguments;
we replace it with a pass-through so the input model sees, and rejects, every key.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict

from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import Forbidden, MentisError
from mentis.mcp.render import render
from mentis.mcp.resources import add_resources_and_prompts
from mentis.mcp.schema import lean
from mentis.service.access import resolve_caller
from mentis.service.memory import Caller, Memory
from mentis.service.operations import BY_NAME, Operation
from mentis.service.profiles import Profile, parse_profile
from mentis.service.signed_writes import PHASES
from mentis.service.tokens import CALLER_SCOPE_KEY
from mentis.version import __version__

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
Mentis remembers what coding agents tried on this code. Before you work on a problem, and when
stuck, call `search` with it in your own words, and `recall` a promising task's history. After
each check you run (tests, build, lint), call `record_attempt`, failed checks too. When a recorded
conclusion no longer holds, call `mark_conclusion_outdated` with the reason.
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


@functools.cache
def _make_tool(op: Operation, profile: Profile) -> Tool:
    """``op``'s tool as ``profile`` offers it. Made once per process and shared by every server
    built in it (the tool holds no state: its Memory comes from the server's lifespan), because
    generating the schemas takes pydantic most of a server's start (~10 ms a tool)."""

    def run(ctx: Context[Any, Any], **arguments: Any) -> CallToolResult:
        memory: Memory = ctx.request_context.lifespan_context
        try:
            request = parse(op.input, arguments)
            inner = getattr(request, "tool", None) if op.name in PHASES else None
            if inner in BY_NAME and not profile.offers(inner):  # a phase runs only the profile's tools
                raise ToolError(f"Unknown tool: {inner}")
            result = op.call(memory, caller_from(ctx, memory.settings), request)
        except MentisError as exc:
            raise ToolError(f"[{exc.code}] {exc}") from exc
        return CallToolResult(
            content=[TextContent(type="text", text=render(result))],
            structured_content=result.model_dump(mode="json", by_alias=True),
        )

    run.__name__ = op.name
    run.__annotations__ = {"ctx": Context, "arguments": Any, "return": op.output}
    # Only the hints a client acts on (auto-approving reads, confirming destructive writes), where
    # they differ from MCP's defaults (read-only false, destructive true): every hint costs tokens
    # in every tools/list.
    annotations = ToolAnnotations(
        read_only_hint=True if not op.writes else None,
        destructive_hint=False if op.writes and not op.destructive else None,
    )
    tool = Tool.from_function(run, name=op.name, description=op.description, annotations=annotations)
    tool.fn_metadata.arg_model = _PassThrough
    tool.parameters = lean(op.input.model_json_schema())
    assert tool.fn_metadata.output_schema is not None  # from the return annotation, op.output
    tool.fn_metadata.output_schema = lean(tool.fn_metadata.output_schema, output=True)
    return tool


def build_server(memory: Memory, profile: Profile | None = None) -> MCPServer[Memory]:
    """An MCP server over an already opened (and verified) ``memory``, offering the tools of
    ``profile`` (default: the ``default`` profile)."""
    profile = profile or parse_profile(None)

    @asynccontextmanager
    async def lifespan(_: MCPServer[Memory]) -> AsyncIterator[Memory]:
        yield memory

    server = MCPServer(
        name="mentis",
        instructions=INSTRUCTIONS,
        version=__version__,
        tools=[_make_tool(BY_NAME[name], profile) for name in profile.names],
        lifespan=lifespan,
        log_level="WARNING",
    )
    add_resources_and_prompts(server, lambda ctx: caller_from(ctx, memory.settings))
    return server
