"""The dashboard's review queue: the proposals ``mentis propose`` queued (filtered by status and
repository), each proposal with its source episode and decision, and the forms that accept it
(optionally edited) or reject it with a reason.

Every form calls the review service with the session's caller: the service decides who may
(write scope over the proposal's repository) and validates the input, so a refused or invalid form
shows the service's message and writes nothing. The accept form posts every editable field
prefilled with the proposed value; only the fields whose value changed are sent as edits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mentis.api.attempts import RecallInput
from mentis.api.common import parse
from mentis.api.review import (
    MAX_LIST,
    AcceptProposalInput,
    ListProposalsInput,
    ProposalOut,
    RejectProposalInput,
    ShowProposalInput,
)
from mentis.dashboard.core import Ctx, State, form_text, param, redirect, render
from mentis.errors import Conflict, InvalidInput

Form = Mapping[str, str]
STATUSES = ("pending", "accepted", "rejected", "all")
TEXT_EDITS = {
    "attempt": ("task_id", "task_title", "action", "observation", "inference"),
    "thought": ("task_id", "content"),
}
"""The accept form's text fields for each kind of proposal (:class:`~mentis.api.review.ProposalEdits`)."""
THOUGHT_FIELDS = ("type", "role", "content", "task_id", "session_id", "confidence", "importance")
ATTEMPT_TASK_SQL = "SELECT task_id FROM attempts WHERE attempt_id = :id AND repository = :repository"


def _tags(text: str) -> list[str]:
    return [t.strip() for t in text.replace("\n", ",").split(",") if t.strip()]


def changed_edits(kind: str, record: Mapping[str, Any], form: Form) -> dict[str, Any]:
    """The accept form's fields whose value differs from the proposed record's (the edits); a
    field of the other kind of record, posted anyway, is passed on for the service to refuse."""
    edits: dict[str, Any] = {}
    for name in dict.fromkeys((*TEXT_EDITS.get(kind, ()), *(n for f in TEXT_EDITS.values() for n in f))):
        if name in form and form_text(form, name) != str(record.get(name) or "").strip():
            edits[name] = form_text(form, name)
    if "tags" in form and _tags(form_text(form, "tags")) != list(record.get("tags") or []):
        edits["tags"] = _tags(form_text(form, "tags"))
    return edits


def shown_record(kind: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """The proposed record with every field the page shows (None or empty when not proposed)."""
    names = (*TEXT_EDITS["attempt"], *THOUGHT_FIELDS) if kind == "attempt" else THOUGHT_FIELDS
    shown: dict[str, Any] = {name: record.get(name) for name in names}
    for many in ("files", "tags", "concepts"):
        shown[many] = list(record.get(many) or [])
    check = record.get("check")
    keys = ("command", "status", "exit_code", "output")
    shown["check"] = {k: check.get(k) for k in keys} if isinstance(check, Mapping) else None
    return shown


class ReviewPages:
    def __init__(self, state: State) -> None:
        self.state = state

    def queue(self, request: Request, ctx: Ctx, form: Form) -> Response:
        status = param(request, "status") or "pending"
        if status not in STATUSES:
            raise InvalidInput(f"the status parameter must be one of {', '.join(STATUSES)}", "status")
        repository = param(request, "repository")
        data: dict[str, Any] = {"status": None if status == "all" else status, "limit": MAX_LIST}
        if repository is not None:
            data["repository"] = repository
        found = self.state.memory.list_proposals(ctx.caller, parse(ListProposalsInput, data))
        repos = {r.repository for r in self.state.memory.repository_overview(ctx.caller)}
        repos |= {p.repository for p in found.proposals} | ({repository} if repository else set())
        return render(
            self.state,
            ctx,
            "review.html",
            nav="review",
            proposals=found.proposals,
            total=found.total,
            status=status,
            statuses=STATUSES,
            repository=repository,
            repos=sorted(repos),
        )

    def proposal(self, request: Request, ctx: Ctx, form: Form) -> Response:
        proposal_id = param(request, "id")
        if proposal_id is None:
            raise InvalidInput("the id parameter is required", "id")
        shown = self.state.memory.show_proposal(
            ctx.caller, parse(ShowProposalInput, {"proposal_id": proposal_id})
        )
        return self._page(ctx, shown)

    def _page(self, ctx: Ctx, p: ProposalOut, conflict: str | None = None) -> Response:
        return render(
            self.state,
            ctx,
            "proposal.html",
            http_status=409 if conflict else 200,
            nav="review",
            p=p,
            r=shown_record(p.kind, p.record),
            task_id=self._attempt_task(ctx, p),
            conflict=conflict,
        )

    def _attempt_task(self, ctx: Ctx, p: ProposalOut) -> str | None:
        """The task of the attempt an accepted proposal wrote (edits may have moved it), or None
        when it was not written or is gone."""
        if p.record_id is None or p.kind != "attempt":
            return None
        params = {"id": p.record_id, "repository": p.repository}
        req = parse(RecallInput, {"sql": ATTEMPT_TASK_SQL, "params": params})
        rows = self.state.memory.recall(ctx.caller, req).rows
        return str(rows[0][0]) if rows else None

    def _url(self, ctx: Ctx, proposal_id: str) -> str:
        return f"{ctx.base}/proposal?{urlencode({'id': proposal_id})}"

    def accept(self, request: Request, ctx: Ctx, form: Form) -> Response:
        ref = parse(ShowProposalInput, {"proposal_id": form_text(form, "proposal_id")})
        shown = self.state.memory.show_proposal(ctx.caller, ref)
        data: dict[str, Any] = {"proposal_id": ref.proposal_id}
        if edits := changed_edits(shown.kind, shown.record, form):
            data["edits"] = edits
        req = parse(AcceptProposalInput, data)
        try:
            self.state.memory.accept_proposal(ctx.caller, req)
        except Conflict as exc:
            return self._decided_meanwhile(ctx, ref, exc)
        return redirect(self._url(ctx, ref.proposal_id))

    def reject(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data = {"proposal_id": form_text(form, "proposal_id"), "reason": form_text(form, "reason")}
        req = parse(RejectProposalInput, data)
        try:
            self.state.memory.reject_proposal(ctx.caller, req)
        except Conflict as exc:
            return self._decided_meanwhile(
                ctx, parse(ShowProposalInput, {"proposal_id": req.proposal_id}), exc
            )
        return redirect(self._url(ctx, req.proposal_id))

    def _decided_meanwhile(self, ctx: Ctx, ref: ShowProposalInput, exc: Conflict) -> Response:
        """The proposal as it stands now, with the conflict said at the top (409)."""
        return self._page(ctx, self.state.memory.show_proposal(ctx.caller, ref), conflict=exc.message)


__all__ = ["STATUSES", "ReviewPages", "changed_edits"]
