"""MCP resources and prompts: a task's history and a repository's recent context to attach, and two
prompts for the moments an agent should reach for Mentis.

Resources (templates; a client expands them, RFC 6570):

- ``mentis://tasks/{+repository}/{task_id}``: a task's attempts, as ``recall`` gives them (a task id
  holding ``/`` is written ``%2F``);
- ``mentis://context/{+repository}``: a repository's newest tasks and thoughts.

Prompts: ``before_you_start`` (what was tried on a problem: a search, rendered) and
``record_what_you_checked`` (how to record the check just run). Both are read through the service
as the caller, so they are scoped exactly as the tools are; a resource of a repository the caller
may not read is "not found", worded as for one that does not exist, so it names nothing of it.
Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.mcpserver.prompts.base import Message, Prompt
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from mentis.api.attempts import RecallInput, SearchInput
from mentis.api.common import parse
from mentis.api.thoughts import RecentContextInput
from mentis.errors import Forbidden, MentisError, NotFound
from mentis.mcp.render import render
from mentis.service.memory import Caller, Memory

TASK_URI = "mentis://tasks/{+repository}/{task_id}"
CONTEXT_URI = "mentis://context/{+repository}"
RECENT_TASKS = 10
RECENT_THOUGHTS = 20
SEARCH_LIMIT = 5


CallerOf = Callable[[Context[Any, Any]], Caller]


class CheckedPrompt(Prompt):
    """A prompt whose missing required argument is an invalid-params error naming it (the SDK's
    own check raises a plain exception, which reaches the client as an internal error)."""

    async def render(self, arguments: dict[str, Any] | None, context: Context[Any, Any]) -> Any:
        given = set(arguments or {})
        missing = [a.name for a in self.arguments or () if a.required and a.name not in given]
        if missing:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"prompt {self.name} needs the argument(s) {', '.join(missing)}; "
                f"it takes {', '.join(a.name for a in self.arguments or ())}",
            )
        messages: list[Message] = await super().render(arguments, context)  # type: ignore[assignment]
        return messages


def _memory(ctx: Context[Any, Any]) -> Memory:
    memory: Memory = ctx.request_context.lifespan_context
    return memory


def _missing(uri: str) -> ResourceNotFoundError:
    return ResourceNotFoundError(f"no resource {uri} (or this caller may not read it)")


def task_history(caller_of: CallerOf, repository: str, task_id: str, ctx: Context[Any, Any]) -> str:
    """A task's attempts, each with its check and corrections (what ``recall`` gives)."""
    uri = f"mentis://tasks/{repository}/{task_id}"
    try:
        req = parse(RecallInput, {"repository": repository, "task_id": task_id})
        history = _memory(ctx).recall(caller_of(ctx), req)
    except (NotFound, Forbidden) as exc:
        raise _missing(uri) from exc
    except MentisError as exc:
        raise ResourceError(f"[{exc.code}] {exc}") from exc
    return f"task {task_id} in {repository}\n{render(history)}"


def repository_context(caller_of: CallerOf, repository: str, ctx: Context[Any, Any]) -> str:
    """A repository's newest tasks and its newest thoughts (the catch-up note of ``recent_context``)."""
    memory, caller = _memory(ctx), caller_of(ctx)
    sql = (
        "select task_id, title, attempt_count, created_at from tasks where repository = :r "
        f"order by created_at desc limit {RECENT_TASKS}"
    )
    try:
        tasks = memory.recall(caller, parse(RecallInput, {"sql": sql, "params": {"r": repository}}))
        recent = parse(RecentContextInput, {"repository": repository, "limit": RECENT_THOUGHTS})
        thoughts = memory.recent_context(caller, recent)
    except (NotFound, Forbidden) as exc:
        raise _missing(f"mentis://context/{repository}") from exc
    except MentisError as exc:
        raise ResourceError(f"[{exc.code}] {exc}") from exc
    if not tasks.rows and not thoughts.thoughts:
        raise _missing(f"mentis://context/{repository}")
    return "\n".join(
        [
            f"{repository}: newest tasks (their attempts: mentis://tasks/{repository}/TASK_ID)",
            render(tasks),
            "",
            render(thoughts) if thoughts.thoughts else "no thoughts recorded",
        ]
    )


def before_you_start(
    caller_of: CallerOf, problem: str, ctx: Context[Any, Any], repository: str | None = None
) -> str:
    """What agents already tried on a problem: read it before you start."""
    try:
        req = parse(SearchInput, {"query": problem, "repository": repository, "limit": SEARCH_LIMIT})
        found = _memory(ctx).search(caller_of(ctx), req)
    except MentisError as exc:
        raise MCPError(code=INVALID_PARAMS, message=f"[{exc.code}] {exc}") from exc
    return "\n".join(
        [
            f"Before you start on this problem, read what agents already tried: {problem}",
            "",
            render(found),
            "",
            "Read a promising task's attempts with recall (repository + task_id). Don't repeat what "
            "failed or was marked outdated; a passed check speaks only for the code it ran on. After "
            "each check you run, call record_attempt.",
        ]
    )


def record_what_you_checked(repository: str, task_id: str, check: str | None = None) -> str:
    """How to record the check you just ran, so the next agent need not repeat it."""
    ran = f" (`{check}`)" if check else ""
    return (
        f"Record the check you just ran{ran} on task {task_id} in {repository}: call record_attempt with "
        f'repository "{repository}", task_id "{task_id}", the action you took, the files it touched, '
        "what you observed (facts only), your inference apart, and check {command, status "
        "passed|failed, exit_code}. Record it even when it failed. If it shows an earlier conclusion "
        "no longer holds, call mark_conclusion_outdated on that attempt with the reason."
    )


def add_resources_and_prompts(server: MCPServer[Memory], caller_of: CallerOf) -> None:
    """Register the resources and prompts on ``server``; ``caller_of`` gives a request's Caller."""

    def task(repository: str, task_id: str, ctx: Context[Any, Any]) -> str:
        """A task's attempts, each with its check and corrections (what recall gives)."""
        return task_history(caller_of, repository, task_id, ctx)

    def context(repository: str, ctx: Context[Any, Any]) -> str:
        """A repository's newest tasks and thoughts."""
        return repository_context(caller_of, repository, ctx)

    def before(problem: str, ctx: Context[Any, Any], repository: str | None = None) -> str:
        """Before you start: what agents already tried on this problem."""
        return before_you_start(caller_of, problem, ctx, repository)

    server.resource(TASK_URI, name="task", mime_type="text/plain")(task)
    server.resource(CONTEXT_URI, name="repository-context", mime_type="text/plain")(context)
    server.add_prompt(CheckedPrompt.from_function(before, name="before_you_start"))
    server.add_prompt(CheckedPrompt.from_function(record_what_you_checked))
