"""The dashboard's branch page: a repository's branch chains (parent, fork point, head, where each
was merged), a form that forks a branch and a form that merges one, showing the conflicts the
merge found and wrote into its entry (docs/branches.md).

Every form calls the service with the session's caller: the service decides who may (write scope
over the repository) and validates the input (git's rules for a branch name, a fork point that
exists, no merge into itself or into its own descendant), so a refused or invalid form shows the
service's message and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mentis.api.branches import BranchFromInput, MergeBranchInput, MergeReport
from mentis.api.common import parse
from mentis.dashboard.core import Ctx, State, form_text, param, redirect, render
from mentis.errors import InvalidInput

Form = Mapping[str, str]


def _optional(form: Form, data: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        if value := form_text(form, name):
            data[name] = value
    return data


class BranchPages:
    """``/branches`` (a repository's branches), ``/branches/create`` and ``/branches/merge``."""

    def __init__(self, state: State) -> None:
        self.state = state

    def branches(self, request: Request, ctx: Ctx, form: Form, report: MergeReport | None = None) -> Response:
        repository = param(request, "repository") or form_text(form, "repository")
        if not repository:
            raise InvalidInput("the repository parameter is required", "repository")
        found = self.state.memory.list_branches(ctx.caller, repository)
        return render(
            self.state,
            ctx,
            "branches.html",
            nav="repos",
            repository=repository,
            branches=found,
            report=report,
        )

    def create(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data = _optional(
            form, {"repository": form_text(form, "repository"), "branch": form_text(form, "branch")}, "parent"
        )
        if seq := form_text(form, "fork_seq"):
            if not seq.isdigit() or len(seq) > 12:
                raise InvalidInput(f"fork_seq: must be a whole number, not {seq[:40]!r}", "fork_seq")
            data["fork_seq"] = int(seq)
        made = self.state.memory.branch_from(ctx.caller, parse(BranchFromInput, data))
        return redirect(f"{ctx.base}/branches?{urlencode({'repository': made.repository})}")

    def merge(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data = _optional(
            form, {"repository": form_text(form, "repository"), "branch": form_text(form, "branch")}, "into"
        )
        req = parse(MergeBranchInput, data)
        if form.get("confirm") != "yes":
            raise InvalidInput("confirm: tick the confirmation box to merge the branch", "confirm")
        report = self.state.memory.merge_branch(ctx.caller, req)
        return self.branches(request, ctx, form, report=report)


__all__ = ["BranchPages"]
