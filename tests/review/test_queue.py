"""The review queue on both stores: proposals wait outside the ledger; accepting records the
attempt as the accepting agent (tagged with the proposal); a rejection is remembered, so the same
proposal is not offered again; two decisions on one proposal cannot both win."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mentis.api.attempts import RecallInput, RecordAttemptInput, SearchInput
from mentis.api.review import (
    AcceptProposalInput,
    ListProposalsInput,
    RejectProposalInput,
    ShowProposalInput,
    SourceEpisode,
)
from mentis.config import Settings
from mentis.errors import Conflict, Forbidden, NotFound
from mentis.service.memory import Caller, Memory
from tests.backends import backend, backend_settings, open_memory  # noqa: F401  (fixtures)

REPO = "github.com/acme/shop"
ME = Caller(agent_id="reviewer")


@pytest.fixture
def settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:  # noqa: F811
    return backend_settings(backend, tmp_path, request)


def draft(n: int, repository: str = REPO) -> tuple[RecordAttemptInput, SourceEpisode]:
    attempt = RecordAttemptInput(
        repository=repository,
        task_id="main-5f0c2a9e",
        action=f"ran `pytest -q` ({n})",
        observation=f"`pytest -q` failed (exit 1): invoice rounding off by {n} cents",
        check={"command": "pytest -q", "status": "failed", "exit_code": 1, "output": "E assert"},
        tags=["transcript", "claude-code"],
        session_id="5f0c2a9e",
    )
    return attempt, SourceEpisode(transcript="/t/s.jsonl", session_id="5f0c2a9e", from_line=n, to_line=n + 3)


def attempts(memory: Memory) -> list[tuple[str, str]]:
    sql = "select agent_id, observation from attempts order by observation"
    rows = memory.recall(ME, RecallInput(sql=sql)).rows
    return [(str(r[0]), str(r[1])) for r in rows]


def test_proposals_wait_outside_the_ledger_until_one_is_accepted_as_the_reviewer(
    open_memory: Callable[[], Memory],  # noqa: F811
) -> None:
    memory = open_memory()
    proposed = memory.propose(Caller(agent_id="mentis-propose"), [draft(1), draft(2)])
    assert len(proposed.queued) == 2 and proposed.known == []
    before = memory.verify_integrity(ME).model_dump()
    assert attempts(memory) == []  # nothing is memory yet
    listed = memory.list_proposals(ME, ListProposalsInput())
    assert [p.record["observation"][-14:] for p in listed.proposals] == ["off by 1 cents", "off by 2 cents"]
    first = listed.proposals[0]
    assert (first.status, first.proposed_by, first.source.from_line) == ("pending", "mentis-propose", 1)

    done = memory.accept_proposal(
        ME, AcceptProposalInput(proposal_id=first.proposal_id, edits={"task_id": "cart-rounding"})
    )
    assert attempts(memory) == [("reviewer", first.record["observation"])]
    shown = memory.show_proposal(ME, ShowProposalInput(proposal_id=first.proposal_id))
    assert (shown.status, shown.decided_by, shown.record_id) == ("accepted", "reviewer", done.record_id)
    found = memory.search(ME, SearchInput(query="invoice rounding off by 1 cents", repository=REPO))
    [task] = [t for t in found.tasks if t.attempt.attempt_id == done.record_id]
    assert task.task_id == "cart-rounding"
    assert before != memory.verify_integrity(ME).model_dump()  # one entry more
    assert memory.list_proposals(ME, ListProposalsInput()).total == 1

    reopened = open_memory()  # the queue and the decision persist
    assert reopened.show_proposal(ME, ShowProposalInput(proposal_id=first.proposal_id)).status == "accepted"


def test_a_rejected_proposal_is_remembered_and_not_offered_again(open_memory: Callable[[], Memory]) -> None:  # noqa: F811
    memory = open_memory()
    [p] = memory.propose(ME, [draft(1)]).queued
    rejected = memory.reject_proposal(ME, RejectProposalInput(proposal_id=p.proposal_id, reason="flaky run"))
    assert (rejected.status, rejected.reason) == ("rejected", "flaky run")
    again = memory.propose(ME, [draft(1), draft(2)])
    assert [k.proposal_id for k in again.known] == [p.proposal_id] and len(again.queued) == 1
    assert again.known[0].status == "rejected"
    assert memory.list_proposals(ME, ListProposalsInput(status="rejected")).proposals[0].reason == "flaky run"


def test_a_proposal_is_decided_once(open_memory: Callable[[], Memory]) -> None:  # noqa: F811
    memory = open_memory()
    [p] = memory.propose(ME, [draft(1)]).queued
    memory.accept_proposal(ME, AcceptProposalInput(proposal_id=p.proposal_id))
    with pytest.raises(Conflict, match="already accepted by reviewer"):
        memory.accept_proposal(ME, AcceptProposalInput(proposal_id=p.proposal_id))
    with pytest.raises(Conflict, match="already accepted"):
        memory.reject_proposal(ME, RejectProposalInput(proposal_id=p.proposal_id, reason="late"))
    assert len(attempts(memory)) == 1


def test_an_accept_whose_edit_breaks_a_rule_writes_nothing_and_leaves_it_pending(
    open_memory: Callable[[], Memory],  # noqa: F811
) -> None:
    memory = open_memory()
    [p] = memory.propose(ME, [draft(1)]).queued
    with pytest.raises(ValueError, match="edits"):
        AcceptProposalInput(proposal_id=p.proposal_id, edits={"observation": ""})
    with pytest.raises(ValueError, match="edits"):
        AcceptProposalInput(proposal_id=p.proposal_id, edits={"repository": "elsewhere"})
    with pytest.raises(NotFound, match="no proposal 'prop-nope'"):
        memory.accept_proposal(ME, AcceptProposalInput(proposal_id="prop-nope"))
    assert memory.show_proposal(ME, ShowProposalInput(proposal_id=p.proposal_id)).status == "pending"
    assert attempts(memory) == []


def test_scopes_bound_the_queue(open_memory: Callable[[], Memory]) -> None:  # noqa: F811
    memory = open_memory()
    [mine] = memory.propose(ME, [draft(1)]).queued
    [other] = memory.propose(ME, [draft(2, "github.com/acme/other")]).queued
    scoped = Caller(agent_id="scoped", repositories=(REPO,))
    assert [p.proposal_id for p in memory.list_proposals(scoped, ListProposalsInput()).proposals] == [
        mine.proposal_id
    ]
    with pytest.raises(NotFound):
        memory.show_proposal(scoped, ShowProposalInput(proposal_id=other.proposal_id))
    with pytest.raises(NotFound):
        memory.reject_proposal(scoped, RejectProposalInput(proposal_id=other.proposal_id, reason="no"))
    reader = Caller(agent_id="reader", can_write=False, repositories=(REPO,))
    with pytest.raises(Forbidden, match="may only read"):
        memory.accept_proposal(reader, AcceptProposalInput(proposal_id=mine.proposal_id))
    with pytest.raises(Forbidden):
        memory.propose(scoped, [draft(3, "github.com/acme/other")])
    assert memory.list_proposals(ME, ListProposalsInput()).total == 2  # nothing decided, nothing added
