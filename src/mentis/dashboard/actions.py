"""The dashboard's forms (POST): sign in and out, verify now, mark outdated, forget, publish a
private record, supersede or invalidate a thought, create and revoke tokens. CSRF is checked
before any of these runs (:func:`mentis.dashboard.core.page`); the service checks scope and
validates the input."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mentis.api.attempts import ForgetInput, MarkOutdatedInput
from mentis.api.common import parse
from mentis.api.scopes import PublishInput
from mentis.api.thoughts import AppendThoughtInput
from mentis.dashboard.core import COOKIE_PATH, Ctx, State, redirect, render, set_session
from mentis.dashboard.pages import CURATE_KINDS, Pages
from mentis.dashboard.session import COOKIE
from mentis.errors import InvalidInput, MentisError
from mentis.service.token_admin import create_token, revoke_token

Form = Mapping[str, str]
MAX_TOKEN_CHARS = 200


def _field(form: Form, name: str, *, required: bool = True) -> str | None:
    value = (form.get(name) or "").strip()
    if not value:
        if required:
            raise InvalidInput(f"the {name} field is required", name)
        return None
    return value


def _task_url(ctx: Ctx, repository: str, task_id: str, anchor: str = "") -> str:
    query = urlencode({"repository": repository, "task_id": task_id})
    return f"{ctx.base}/task?{query}" + (f"#a-{anchor}" if anchor else "")


class Actions:
    def __init__(self, state: State, pages: Pages) -> None:
        self.state = state
        self.pages = pages

    def login(self, request: Request, ctx: Ctx, form: Form) -> Response:
        if not ctx.auth:
            return redirect(f"{ctx.base}/")
        assert self.state.tokens is not None
        token = (form.get("token") or "").strip()
        info = self.state.tokens.lookup(token) if 0 < len(token) <= MAX_TOKEN_CHARS else None
        problem = None
        if info is None:
            problem = "That token is not valid. Check it, or create one with `mentis token create`."
        elif info.status() != "active":
            problem = f"Token {info.id} is {info.status()}. Use another token."
        if problem is not None or info is None:
            return render(self.state, ctx, "login.html", http_status=401, note=None, error=problem)
        value, _ = self.state.signer.issue(info.id)
        response = redirect(f"{ctx.base}/")
        set_session(self.state, response, value)
        return response

    def logout(self, request: Request, ctx: Ctx, form: Form) -> Response:
        response = redirect(f"{ctx.base}/login" if ctx.auth else f"{ctx.base}/")
        response.delete_cookie(COOKIE, path=COOKIE_PATH)
        return response

    def verify(self, request: Request, ctx: Ctx, form: Form) -> Response:
        integrity = self.state.integrity
        integrity.at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            integrity.result, integrity.error = self.state.memory.verify_integrity(ctx.caller), None
        except MentisError as exc:
            integrity.result, integrity.error = None, exc.message
        return redirect(f"{ctx.base}/")

    def outdated(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data: dict[str, Any] = {
            "repository": _field(form, "repository"),
            "attempt_id": _field(form, "attempt_id"),
            "reason": _field(form, "reason"),
        }
        commit = _field(form, "latest_commit", required=False)
        if commit is not None:
            data["latest_commit"] = commit
        task_id = _field(form, "task_id")
        assert task_id is not None
        self.state.memory.mark_conclusion_outdated(ctx.caller, parse(MarkOutdatedInput, data))
        return redirect(_task_url(ctx, data["repository"], task_id, data["attempt_id"]))

    def forget(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data: dict[str, Any] = {
            "repository": _field(form, "repository"),
            "attempt_id": _field(form, "attempt_id"),
        }
        reason = _field(form, "reason", required=False)
        if reason is not None:
            data["reason"] = reason
        task_id = _field(form, "task_id")
        assert task_id is not None
        if form.get("confirm") != "yes":
            raise InvalidInput("tick the confirmation box to forget the attempt", "confirm")
        self.state.memory.forget_attempt(ctx.caller, parse(ForgetInput, data))
        return redirect(_task_url(ctx, data["repository"], task_id))

    def publish(self, request: Request, ctx: Ctx, form: Form) -> Response:
        """Widen a private record's scope (``publish``), then back to its task or thought page."""
        data = {
            "repository": _field(form, "repository"),
            "record_id": _field(form, "record_id"),
            "visibility": _field(form, "visibility"),
        }
        task_id = _field(form, "task_id", required=False)
        req = parse(PublishInput, data)
        self.state.memory.publish(ctx.caller, req)
        if task_id is not None:
            return redirect(_task_url(ctx, req.repository, task_id, req.record_id))
        return redirect(f"{ctx.base}/thought?{urlencode({'id': req.record_id})}")

    def relate(self, request: Request, ctx: Ctx, form: Form) -> Response:
        kind = _field(form, "kind")
        if kind not in CURATE_KINDS:
            raise InvalidInput(f"kind must be one of {', '.join(CURATE_KINDS)}", "kind")
        data = {
            "repository": _field(form, "repository"),
            "type": _field(form, "type"),
            "content": _field(form, "content"),
            "relations": [{"kind": kind, "target_id": _field(form, "target_id")}],
        }
        made = self.state.memory.append_thought(ctx.caller, parse(AppendThoughtInput, data))
        return redirect(f"{ctx.base}/thought?{urlencode({'id': made.thought_id})}")

    def create_token(self, request: Request, ctx: Ctx, form: Form) -> Response:
        if self.state.tokens is None:
            raise InvalidInput("tokens are off: this server runs with --no-auth", "scope")
        patterns = (form.get("repositories") or "").replace(",", "\n").split("\n")
        token, _ = create_token(
            ctx.caller,
            self.state.tokens,
            scope=_field(form, "scope") or "",
            repositories=tuple(p.strip() for p in patterns if p.strip()),
            agent=_field(form, "agent", required=False),
            expires=_field(form, "expires", required=False),
        )
        return self.pages.admin(request, ctx, form, created=token)

    def revoke_token(self, request: Request, ctx: Ctx, form: Form) -> Response:
        if self.state.tokens is None:
            raise InvalidInput("tokens are off: this server runs with --no-auth", "token_id")
        revoke_token(ctx.caller, self.state.tokens, _field(form, "token_id") or "")
        return redirect(f"{ctx.base}/admin")
