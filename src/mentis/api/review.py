"""The review queue's inputs and outputs: proposed memories (from ``mentis propose``) that wait
until someone accepts (optionally edited) or rejects them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from mentis.api.common import (
    MAX_TAGS,
    Identifier,
    LedgerRef,
    NonEmptyText,
    Out,
    SourceEpisode,
    Strict,
    Tag,
    Text,
    Title,
)

ProposalStatus = Literal["pending", "accepted", "rejected"]
MAX_LIST = 200


ProposalKind = Literal["attempt", "thought"]


class ProposalOut(Out):
    proposal_id: str
    kind: ProposalKind
    repository: str
    status: ProposalStatus
    record: dict[str, Any]
    """The proposed record's fields (a ``record_attempt`` or ``append_thought`` input)."""
    source: SourceEpisode
    proposed_at: str
    proposed_by: str
    decided_at: str | None
    decided_by: str | None
    reason: str | None
    record_id: str | None


class ListProposalsInput(Strict):
    status: ProposalStatus | None = "pending"
    repository: Identifier | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_LIST)] = 20


class ListProposalsResult(Out):
    proposals: list[ProposalOut]
    total: int
    """How many match (the list holds the oldest ``limit`` of them)."""


class ShowProposalInput(Strict):
    proposal_id: Identifier


class ProposalEdits(Strict):
    """What a reviewer changes before accepting (anything left out stays): ``content`` for a
    thought; ``task_title``, ``action``, ``observation``, ``inference`` for an attempt."""

    content: NonEmptyText | None = None
    task_id: Identifier | None = None
    task_title: Title | None = None
    action: NonEmptyText | None = None
    observation: NonEmptyText | None = None
    inference: Text | None = None
    tags: Annotated[list[Tag], Field(max_length=MAX_TAGS)] | None = None


class AcceptProposalInput(Strict):
    proposal_id: Identifier
    edits: ProposalEdits | None = None


class AcceptProposalResult(Out):
    proposal_id: str
    record_id: str
    """The attempt's or thought's id."""
    ledger: LedgerRef


class RejectProposalInput(Strict):
    proposal_id: Identifier
    reason: NonEmptyText


class RejectProposalResult(Out):
    proposal_id: str
    status: Literal["rejected"]
    reason: str


class ProposeResult(Out):
    """What ``propose`` queued: each proposal found, new or already known (pending, accepted or
    rejected before: not offered again)."""

    queued: list[ProposalOut]
    known: list[ProposalOut]
