"""The web dashboard at ``/dashboard``: server-rendered pages over the service, signed sessions.

:func:`build_dashboard` returns the ASGI app that :func:`mentis.http.app.build_app` mounts. The
bearer-token middleware lets ``/dashboard`` through; this app signs people in with the same tokens
(:mod:`mentis.dashboard.session`) and passes each request's Caller to the service.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from mentis.dashboard.actions import Actions
from mentis.dashboard.branches import BranchPages
from mentis.dashboard.core import SECURITY_HEADERS, STATIC, Handler, State, error_page, make_env, page
from mentis.dashboard.pages import Pages
from mentis.dashboard.registry import RegistryPages
from mentis.dashboard.review import ReviewPages
from mentis.dashboard.session import DEFAULT_TTL_S, Signer
from mentis.dashboard.webhooks import WebhookPages
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore


def build_dashboard(
    memory: Memory,
    tokens: TokenStore | None,
    *,
    anonymous: Caller | None,
    secure: bool,
    secret: bytes | None = None,
    ttl_s: int = DEFAULT_TTL_S,
) -> Starlette:
    """The dashboard over ``memory``; ``tokens`` None (with an ``anonymous`` caller) is --no-auth."""
    if tokens is None and anonymous is None:
        raise ValueError("the dashboard needs a token store, or an anonymous caller for --no-auth")
    state = State(memory, tokens, Signer(secret, ttl_s), secure, anonymous, make_env())
    pages = Pages(state)
    actions = Actions(state, pages)
    registry = RegistryPages(state)
    review = ReviewPages(state)
    webhooks = WebhookPages(state)
    branches = BranchPages(state)

    def get(path: str, handler: Handler, public: bool = False) -> Route:
        return Route(path, page(state, handler, public=public), methods=["GET"])

    def post(path: str, handler: Handler, public: bool = False) -> Route:
        return Route(path, page(state, handler, public=public), methods=["POST"])

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = {404: "There is no such page.", 405: "That method is not allowed here."}.get(
            status, "internal error; see the server log"
        )
        response = error_page(state, None, status, message, "/dashboard")
        response.headers.update(SECURITY_HEADERS)
        return response

    routes = [
        get("/", pages.repositories),
        get("/login", pages.login, public=True),
        post("/login", actions.login, public=True),
        post("/logout", actions.logout, public=True),
        get("/tasks", pages.tasks),
        get("/task", pages.task),
        get("/search", pages.search),
        get("/thoughts", pages.thoughts),
        get("/thought", pages.thought),
        get("/forget", pages.forget),
        get("/admin", pages.admin),
        post("/verify", actions.verify),
        post("/outdated", actions.outdated),
        post("/forget", actions.forget),
        post("/relate", actions.relate),
        post("/publish", actions.publish),
        post("/admin/tokens", actions.create_token),
        post("/admin/revoke", actions.revoke_token),
        get("/agents", registry.agents),
        get("/agent", registry.agent),
        post("/agents/register", registry.register_agent),
        post("/agents/key", registry.add_key),
        post("/agents/revoke-key", registry.revoke_key),
        post("/agents/disable", registry.disable_agent),
        get("/skills", registry.skills),
        get("/skill", registry.skill),
        post("/skills/deprecate", registry.deprecate_skill),
        post("/skills/revoke", registry.revoke_skill),
        get("/review", review.queue),
        get("/proposal", review.proposal),
        post("/review/accept", review.accept),
        post("/review/reject", review.reject),
        get("/webhooks", webhooks.webhooks),
        get("/webhook", webhooks.webhook),
        post("/webhooks/create", webhooks.create),
        post("/webhooks/delete", webhooks.delete),
        post("/webhooks/redeliver", webhooks.redeliver),
        get("/branches", branches.branches),
        post("/branches/create", branches.create),
        post("/branches/merge", branches.merge),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: not_found, Exception: not_found})


__all__ = ["build_dashboard"]
