"""The review queue: proposed memories wait here until a reviewer accepts (optionally edited) or
rejects them (docs/review.md).

A proposal is queued by ``propose`` (``mentis propose transcript``) under the caller's
write scope on its repository, keyed by its content: the same proposal offered again — queued,
accepted or rejected before — is reported as known and not queued twice, so a rejection is
remembered. Accepting writes the record through the ordinary write path as the accepting caller
(signed when that agent has a key), tagged ``proposal:<id>`` and records its id on the proposal. A
thought carries the proposal's source episode as its ``source_episode`` (inside its entry hash); an
attempt carries the source session as its ``session_id`` only (its body has no episode field: the
proposal row, found by the tag, keeps the transcript and lines). Two reviewers cannot both
accept one proposal: the first to claim it wins, and a write that fails hands it back to the queue.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from mentis.api.attempts import RecordAttemptInput
from mentis.api.common import SourceEpisode, parse
from mentis.api.review import (
    AcceptProposalInput,
    AcceptProposalResult,
    ListProposalsInput,
    ListProposalsResult,
    ProposalOut,
    ProposeResult,
    RejectProposalInput,
    RejectProposalResult,
    ShowProposalInput,
)
from mentis.api.thoughts import AppendThoughtInput
from mentis.errors import Conflict, InvalidInput, NotFound
from mentis.ledger.signing import now_iso
from mentis.service.access import Caller, may_read, may_write
from mentis.service.attempts import AttemptOps
from mentis.service.context import ServiceContext
from mentis.service.thoughts import ThoughtOps
from mentis.store.protocol import ProposalRow
from mentis.store.seal import Seal

PROPOSAL_TAG = "proposal"
ONLY_FOR = {
    "attempt": frozenset({"task_title", "action", "observation", "inference"}),
    "thought": frozenset({"content"}),
}
"""Edits that apply to one kind of record only."""


def content_key(kind: str, record: dict[str, object]) -> str:
    """What makes two proposals the same: their kind and record, canonically encoded."""
    text = json.dumps({"kind": kind, "record": record}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def proposal_out(row: ProposalRow) -> ProposalOut:
    return ProposalOut(
        proposal_id=row.id,
        kind=row.kind,  # type: ignore[arg-type]  # the table holds only the two
        repository=row.repository,
        status=row.status,  # type: ignore[arg-type]  # the table holds only the three
        record=json.loads(row.body),
        source=SourceEpisode(**json.loads(row.source)),
        proposed_at=row.proposed_at,
        proposed_by=row.proposed_by,
        decided_at=row.decided_at,
        decided_by=row.decided_by,
        reason=row.reason,
        record_id=row.record_id,
    )


def _queue_order(p: ProposalOut) -> tuple[str, str, int]:
    """Oldest first; one batch in the order its transcripts ran."""
    return p.proposed_at, p.source.transcript, p.source.from_line


class ReviewOps:
    """The queue's operations over one :class:`ServiceContext`; accepting records through ``attempts``."""

    def __init__(self, ctx: ServiceContext, attempts: AttemptOps, thoughts: ThoughtOps) -> None:
        self.ctx = ctx
        self.attempts = attempts
        self.thoughts = thoughts

    def propose(
        self,
        caller: Caller,
        drafts: Sequence[tuple[RecordAttemptInput | AppendThoughtInput, SourceEpisode]],
    ) -> ProposeResult:
        """Queue each ``(attempt or thought, source)`` not known yet, all or none (every
        repository is checked against the caller's write scope before anything is queued)."""
        for draft, _ in drafts:
            may_write(caller, draft.repository)
        at = now_iso()
        rows = []
        for draft, source in drafts:
            kind = "attempt" if isinstance(draft, RecordAttemptInput) else "thought"
            record = draft.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
            key = content_key(kind, record)
            rows.append(
                ProposalRow(
                    id=f"prop-{key[:20]}",
                    content_key=key,
                    kind=kind,
                    repository=draft.repository,
                    body=json.dumps(record, sort_keys=True),
                    source=source.model_dump_json(),
                    status="pending",
                    reason=None,
                    proposed_at=at,
                    proposed_by=caller.agent_id,
                    decided_at=None,
                    decided_by=None,
                    record_id=None,
                )
            )
        stored = self.ctx.store.add_proposals(rows) if rows else []
        return ProposeResult(
            queued=[proposal_out(row) for row, new in stored if new],
            known=[proposal_out(row) for row, new in stored if not new],
        )

    def list_proposals(self, caller: Caller, req: ListProposalsInput) -> ListProposalsResult:
        may_read(caller, req.repository)
        rows = [r for r in self.ctx.store.proposals(req.status, req.repository) if caller.sees(r.repository)]
        found = sorted(map(proposal_out, rows), key=_queue_order)
        return ListProposalsResult(proposals=found[: req.limit], total=len(found))

    def count_pending(self, caller: Caller) -> int:
        """How many pending proposals the caller may see (the count ``list_proposals`` would give
        as its total), without reading them."""
        counts = self.ctx.store.pending_by_repository()
        return sum(n for repository, n in counts.items() if caller.sees(repository))

    def show_proposal(self, caller: Caller, req: ShowProposalInput) -> ProposalOut:
        return proposal_out(self._row(caller, req.proposal_id))

    def accept_proposal(self, caller: Caller, req: AcceptProposalInput, seal: Seal) -> AcceptProposalResult:
        row = self._pending(caller, req.proposal_id)
        record = json.loads(row.body)
        if req.edits is not None:
            edits = req.edits.model_dump(mode="json", exclude_none=True)
            other = "thought" if row.kind == "attempt" else "attempt"
            wrong = sorted(ONLY_FOR[other] & edits.keys())
            if wrong:
                raise InvalidInput(
                    f"edits.{wrong[0]}: a {row.kind} has no {wrong[0]} (it is a {other}'s)",
                    field=f"edits.{wrong[0]}",
                )
            record.update(edits)
        if row.kind == "thought" and "source_episode" not in record:
            record["source_episode"] = json.loads(row.source)  # provenance, inside the thought's hash
        tag = f"{PROPOSAL_TAG}:{row.id}"
        record["tags"] = [*[t for t in record.get("tags", []) if t != tag], tag]
        record["repository"] = row.repository
        draft: RecordAttemptInput | AppendThoughtInput = (
            parse(RecordAttemptInput, record) if row.kind == "attempt" else parse(AppendThoughtInput, record)
        )
        at = now_iso()
        if not self.ctx.store.decide_proposal(row.id, status="accepted", by=caller.agent_id, at=at):
            raise self._decided(row.id)
        try:
            if isinstance(draft, RecordAttemptInput):
                attempt = self.attempts.record_attempt(caller, draft, seal)
                record_id, ledger = attempt.attempt_id, attempt.ledger
            else:
                thought = self.thoughts.append_thought(caller, draft, seal)
                record_id, ledger = thought.thought_id, thought.ledger
        except BaseException:  # the write did not happen: the proposal goes back to the queue
            self.ctx.store.decide_proposal(row.id, status="pending", by=None, at=None, was="accepted")
            raise
        self.ctx.store.decide_proposal(
            row.id, status="accepted", by=caller.agent_id, at=at, record_id=record_id, was="accepted"
        )
        return AcceptProposalResult(proposal_id=row.id, record_id=record_id, ledger=ledger)

    def reject_proposal(self, caller: Caller, req: RejectProposalInput) -> RejectProposalResult:
        row = self._pending(caller, req.proposal_id)
        done = self.ctx.store.decide_proposal(
            row.id, status="rejected", by=caller.agent_id, at=now_iso(), reason=req.reason
        )
        if not done:
            raise self._decided(row.id)
        return RejectProposalResult(proposal_id=row.id, status="rejected", reason=req.reason)

    def _row(self, caller: Caller, proposal_id: str) -> ProposalRow:
        row = self.ctx.store.proposal(proposal_id)
        if row is None or not caller.covers(row.repository):
            raise NotFound(f"proposal_id: no proposal {proposal_id!r}")
        may_read(caller, row.repository)
        return row

    def _pending(self, caller: Caller, proposal_id: str) -> ProposalRow:
        row = self._row(caller, proposal_id)
        may_write(caller, row.repository)
        if row.status != "pending":
            raise self._decided(row.id, row)
        return row

    def _decided(self, proposal_id: str, row: ProposalRow | None = None) -> Conflict:
        row = row or self.ctx.store.proposal(proposal_id)
        by = f" by {row.decided_by} at {row.decided_at}" if row and row.decided_by else ""
        state = row.status if row else "decided"
        return Conflict(f"proposal_id: proposal {proposal_id!r} is already {state}{by}")
