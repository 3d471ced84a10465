"""The dashboard's pages (GET): repositories, tasks, a task's timeline, search, thoughts, a thought,
the forget confirmation, admin and sign-in. Each reads through the service with ``ctx.caller``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mentis.api.attempts import SearchInput
from mentis.api.common import parse
from mentis.api.thoughts import GetThoughtInput, SearchThoughtsInput, TraverseInput
from mentis.dashboard.core import Ctx, State, int_param, markup, param, redirect, render, required_param
from mentis.dashboard.graph import Edge, Node, relation_svg
from mentis.errors import NotFound
from mentis.ledger.bodies import THOUGHT_ROLES, THOUGHT_TYPES
from mentis.service.browse import TimelineAttempt
from mentis.service.token_admin import list_tokens
from mentis.store.protocol import TASK_STATUSES

Form = Mapping[str, str]
CURATE_KINDS = ("Supersedes", "Invalidates")
WIDER = {"agent": ("repository",), "session": ("agent", "repository")}
"""The visibilities ``publish`` may widen each private one to (a scope is never narrowed)."""
PRIVATE = {
    "agent": "only its writer (and admins) may read it",
    "session": "only its writer in the session that wrote it (and admins) may read it",
}


class Pages:
    def __init__(self, state: State) -> None:
        self.state = state

    def login(self, request: Request, ctx: Ctx, form: Form) -> Response:
        if not ctx.auth or ctx.session.signed_in:
            return redirect(f"{ctx.base}/")
        why = param(request, "why")
        notes = {
            "expired": "Your session or token expired. Sign in again.",
            "revoked": "The token of this session was revoked. Sign in with another token.",
            "forged": "The session cookie was not valid. Sign in again.",
        }
        return render(self.state, ctx, "login.html", note=notes.get(why or ""), error=None)

    def repositories(self, request: Request, ctx: Ctx, form: Form) -> Response:
        rows = self.state.memory.repository_overview(ctx.caller)
        integrity = self.state.integrity
        chains = {}
        if integrity.result is not None:
            chains = {c.chain: c for c in integrity.result.chains if ctx.caller.sees(c.chain)}
        forks = {}  # a branch chain's row → its branch; the others → how many branches they have
        branch_counts: dict[str, int] = {}
        names = {r.repository for r in rows}
        for r in rows:
            if ":" in r.repository and r.repository.rsplit(":", 1)[0] in names:
                continue  # the branch of a repository listed here: its own row says so below
            found = self.state.memory.list_branches(ctx.caller, r.repository)
            branch_counts[r.repository] = len(found)
            forks.update({b.chain: b for b in found})
        return render(
            self.state,
            ctx,
            "repositories.html",
            nav="repos",
            rows=rows,
            integrity=integrity,
            chains=chains,
            forks=forks,
            branch_counts=branch_counts,
        )

    def tasks(self, request: Request, ctx: Ctx, form: Form) -> Response:
        repository = required_param(request, "repository")
        status, agent = param(request, "status"), param(request, "agent")
        found = self.state.memory.task_page(
            ctx.caller, repository, status=status, agent=agent, page=int_param(request, "page", 1)
        )
        return render(
            self.state,
            ctx,
            "tasks.html",
            nav="repos",
            found=found,
            status=status,
            agent=agent,
            statuses=TASK_STATUSES,
        )

    def task(self, request: Request, ctx: Ctx, form: Form) -> Response:
        repository, task_id = required_param(request, "repository"), required_param(request, "task_id")
        timeline = self.state.memory.task_timeline(ctx.caller, repository, task_id, param(request, "commit"))
        ids = [i.body.attempt_id for i in timeline.items if isinstance(i, TimelineAttempt)]
        seen = self.state.memory.visibilities(ctx.caller, ids)
        return render(
            self.state, ctx, "task.html", nav="repos", t=timeline, seen=seen, wider=WIDER, private=PRIVATE
        )

    def search(self, request: Request, ctx: Ctx, form: Form) -> Response:
        query, repository = param(request, "q"), param(request, "repository")
        result = None
        if query is not None:
            data: dict[str, Any] = {"query": query, "limit": 20}
            if repository is not None:
                data["repository"] = repository
            result = self.state.memory.search(ctx.caller, parse(SearchInput, data))
        repos = [r.repository for r in self.state.memory.repository_overview(ctx.caller)]
        return render(
            self.state,
            ctx,
            "search.html",
            nav="search",
            q=query,
            repository=repository,
            result=result,
            repos=repos,
        )

    def thoughts(self, request: Request, ctx: Ctx, form: Form) -> Response:
        keys = ("q", "repository", "type", "role", "agent", "tag", "entity_type", "source_session", "as_of")
        f = {k: param(request, k) for k in keys}
        include = param(request, "include_invalidated") is not None
        filters: dict[str, Any] = {}
        for key, name in (
            ("type", "types"),
            ("role", "roles"),
            ("agent", "agents"),
            ("tag", "tags"),
            ("entity_type", "entity_types"),
        ):
            if f[key] is not None:
                filters[name] = [f[key]]
        if f["source_session"] is not None:
            filters["source_session"] = f["source_session"]
        data: dict[str, Any] = {"filters": filters, "include_invalidated": include, "limit": 50}
        for key, name in (("q", "query"), ("repository", "repository"), ("as_of", "as_of")):
            if f[key] is not None:
                data[name] = f[key]
        result = self.state.memory.search_thoughts(ctx.caller, parse(SearchThoughtsInput, data))
        repos = [r.repository for r in self.state.memory.repository_overview(ctx.caller)]
        return render(
            self.state,
            ctx,
            "thoughts.html",
            nav="thoughts",
            f=f,
            include=include,
            result=result,
            repos=repos,
            types=THOUGHT_TYPES,
            roles=THOUGHT_ROLES,
        )

    def thought(self, request: Request, ctx: Ctx, form: Form) -> Response:
        thought_id = required_param(request, "id")
        memory = self.state.memory
        thought = memory.get_thought(ctx.caller, parse(GetThoughtInput, {"thought_id": thought_id}))
        around = memory.traverse_thoughts(
            ctx.caller, parse(TraverseInput, {"thought_id": thought_id, "depth": 1, "limit": 13})
        )
        others = [n for n in around.nodes if n.thought_id != thought_id]
        svg = relation_svg(
            Node(thought.thought_id, thought.content, thought.type),
            [Node(n.thought_id, n.content, n.type, dim=bool(n.invalidated_by)) for n in others],
            [Edge(e.from_id, e.kind, e.to_id) for e in around.edges],
            f"{ctx.base}/thought?id=",
        )
        return render(
            self.state,
            ctx,
            "thought.html",
            nav="thoughts",
            t=thought,
            others=others,
            edges=around.edges,
            names={n.thought_id: n.content for n in around.nodes},
            graph=markup(svg),
            types=THOUGHT_TYPES,
            kinds=CURATE_KINDS,
            seen=memory.visibilities(ctx.caller, [thought.thought_id]),
            wider=WIDER,
            private=PRIVATE,
        )

    def forget(self, request: Request, ctx: Ctx, form: Form) -> Response:
        repository, attempt_id = required_param(request, "repository"), required_param(request, "attempt_id")
        task_id = required_param(request, "task_id")
        timeline = self.state.memory.task_timeline(ctx.caller, repository, task_id)
        attempt = next(
            (i for i in timeline.items if isinstance(i, TimelineAttempt) and i.body.attempt_id == attempt_id),
            None,
        )
        if attempt is None:
            raise NotFound("no such attempt in this task (it may already be forgotten)")
        return render(self.state, ctx, "forget.html", nav="repos", t=timeline, a=attempt)

    def admin(self, request: Request, ctx: Ctx, form: Form, created: str | None = None) -> Response:
        tokens = list_tokens(ctx.caller, self.state.tokens) if self.state.tokens is not None else []
        return render(self.state, ctx, "admin.html", nav="admin", tokens=tokens, created=created)
