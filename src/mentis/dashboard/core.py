"""What every dashboard page shares: who is asking (session → token → Caller), CSRF on forms,
parameter parsing, rendering, and one error page for every :class:`~mentis.errors.MentisError`.

Handlers are plain functions ``(request, ctx, form) -> Response`` run in a worker thread (they call
the service, which blocks on the store). Authorisation is the service's: a handler passes
``ctx.caller`` on; templates only hide what the caller could not use anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio.to_thread
import jinja2
from markupsafe import Markup
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from mentis.api.verify import VerifyResult
from mentis.dashboard.session import COOKIE, Session, Signer
from mentis.errors import InvalidInput, MentisError
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenInfo, TokenStore

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
MAX_PARAM_CHARS = 8_192
COOKIE_PATH = "/dashboard"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer makes chromium send Origin: null on forms
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


@dataclass
class IntegrityState:
    """The last integrity check this process ran (the store was verified when it opened)."""

    at: str
    result: VerifyResult | None = None
    error: str | None = None


@dataclass
class State:
    memory: Memory
    tokens: TokenStore | None
    signer: Signer
    secure: bool
    anonymous: Caller | None
    env: jinja2.Environment
    integrity: IntegrityState = field(
        default_factory=lambda: IntegrityState(at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    )

    @property
    def auth(self) -> bool:
        return self.tokens is not None


@dataclass(frozen=True)
class Ctx:
    """Who is asking, for handlers and templates."""

    caller: Caller
    session: Session
    csrf: str
    auth: bool
    base: str
    token: TokenInfo | None = None

    @property
    def can_write(self) -> bool:
        return self.caller.can_write

    @property
    def is_admin(self) -> bool:
        """Whether the caller may manage tokens and agents (:func:`mentis.service.access.may_admin`)."""
        return self.caller.admin


Handler = Callable[[Request, Ctx, Mapping[str, str]], Response]


def make_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["short"] = lambda s, n=12: s if len(s) <= n else s[:n] + "…"
    env.globals["qs"] = lambda **kw: urlencode({k: v for k, v in kw.items() if v not in (None, "", False)})
    return env


def when(iso: str | None) -> str:
    """``2026-12-01T22:46:15.123456Z`` → ``2026-12-01 22:46 UTC``."""
    if not iso:
        return ""
    return f"{iso[:10]} {iso[11:16]} UTC"


def render(
    state: State, ctx: Ctx | None, name: str, http_status: int = 200, base: str = "/dashboard", **values: Any
) -> HTMLResponse:
    values.setdefault("nav", "")
    if "pending" not in values:
        values["pending"] = pending_count(state, ctx)
    html = state.env.get_template(name).render(ctx=ctx, base=ctx.base if ctx else base, **values)
    return HTMLResponse(html, status_code=http_status)


def pending_count(state: State, ctx: Ctx | None) -> int | None:
    """How many pending proposals the session may see, for the nav (one service call); None before
    signing in, or when the service cannot say."""
    if ctx is None or (ctx.auth and not ctx.session.signed_in):
        return None
    try:
        return state.memory.count_pending_proposals(ctx.caller)
    except MentisError:
        return None


def error_page(state: State, ctx: Ctx | None, status: int, message: str, base: str) -> HTMLResponse:
    titles = {400: "Bad request", 403: "Not allowed", 404: "Not found", 409: "Conflict", 422: "Invalid input"}
    title = titles.get(status, "Something went wrong")
    # error pages are drawn on the event loop: no store call for the nav's count
    return render(
        state, ctx, "error.html", status, base, title=title, status=status, message=message, pending=None
    )


def param(request: Request, name: str) -> str | None:
    """A query parameter, None when absent or blank; InvalidInput when absurdly long."""
    value = request.query_params.get(name)
    if value is None or not value.strip():
        return None
    if len(value) > MAX_PARAM_CHARS or "\x00" in value:
        raise InvalidInput(f"the {name} parameter is too long or holds a NUL character", name)
    return value.strip()


def required_param(request: Request, name: str) -> str:
    """A query parameter that must be there: InvalidInput naming it otherwise."""
    value = param(request, name)
    if value is None:
        raise InvalidInput(f"the {name} parameter is required", name)
    return value


def form_text(form: Mapping[str, str], name: str) -> str:
    """A form field, stripped, with a textarea's CRLF line ends as LF; "" when absent (the service
    names a missing required field)."""
    return (form.get(name) or "").replace("\r\n", "\n").strip()


def int_param(request: Request, name: str, default: int) -> int:
    value = param(request, name)
    if value is None:
        return default
    if not value.isdigit() or len(value) > 9:
        raise InvalidInput(f"the {name} parameter must be a whole number, not {value[:40]!r}", name)
    return int(value)


def redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _login_redirect(state: State, request: Request, why: str) -> Response:
    base = request.scope.get("root_path", "")
    query = urlencode({"why": why} if why in ("expired", "revoked", "forged") else {})
    response = redirect(f"{base}/login" + (f"?{query}" if query else ""))
    response.delete_cookie(COOKIE, path=COOKIE_PATH)
    return response


def page(state: State, handler: Handler, *, public: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a handler: session, caller, CSRF for POST, error page, security headers."""

    async def endpoint(request: Request) -> Response:
        base = str(request.scope.get("root_path", ""))
        session, why = state.signer.read(request.cookies.get(COOKIE))
        fresh: str | None = None
        if session is None and state.auth and not public:
            return _login_redirect(state, request, why)
        if session is None:
            fresh, session = state.signer.issue()
        token: TokenInfo | None = None
        if state.anonymous is not None:
            caller = state.anonymous
        elif session.signed_in:
            assert state.tokens is not None
            token = await anyio.to_thread.run_sync(state.tokens.get, session.token_id)
            status = token.status() if token is not None else "revoked"
            if token is None or status != "active":
                return _login_redirect(state, request, status)
            caller = token.caller()
        elif public:
            caller = Caller(agent_id="-", can_write=False, repositories=())
        else:
            return _login_redirect(state, request, "")
        ctx = Ctx(caller, session, state.signer.csrf(session), state.auth, base, token)
        form: dict[str, str] = {}
        if request.method == "POST":
            try:
                async with request.form(max_files=0, max_fields=50) as data:
                    for key, value in data.multi_items():
                        if isinstance(value, UploadFile):
                            raise InvalidInput("file uploads are not accepted", key)
                        form[key] = value
            except MentisError as exc:
                return _finish(state, error_page(state, ctx, 400, exc.message, base), fresh)
            except Exception:  # a malformed multipart or urlencoded body
                return _finish(state, error_page(state, ctx, 400, "the form could not be read", base), fresh)
            if not state.signer.csrf_ok(session, form.get("csrf")):
                message = (
                    "this form's security token is missing or out of date; reload the page and submit again"
                )
                return _finish(state, error_page(state, ctx, 403, message, base), fresh)
        try:
            response = await anyio.to_thread.run_sync(handler, request, ctx, form)
        except MentisError as exc:
            response = error_page(state, ctx, exc.http_status, exc.message, base)
        except Exception:
            log.exception("dashboard page %s failed", request.url.path)
            response = error_page(state, ctx, 500, "internal error; see the server log", base)
        return _finish(state, response, fresh)

    endpoint.__name__ = handler.__name__
    return endpoint


def _finish(state: State, response: Response, fresh: str | None) -> Response:
    if fresh is not None:
        set_session(state, response, fresh)
    for key, value in SECURITY_HEADERS.items():
        response.headers.setdefault(key, value)
    return response


def set_session(state: State, response: Response, value: str) -> None:
    response.set_cookie(
        COOKIE,
        value,
        max_age=state.signer.ttl_s,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=state.secure,
    )


def markup(svg: str) -> Markup:
    """Mark SVG built by :mod:`mentis.dashboard.graph` (which escapes every text) as safe."""
    return Markup(svg)
