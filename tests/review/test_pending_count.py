"""The count of pending proposals a caller may see (the dashboard's nav), on both stores: it is
the total ``list_proposals`` gives, within the caller's repositories, and follows decisions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mentis.api.review import AcceptProposalInput, ListProposalsInput, RejectProposalInput
from mentis.config import Settings
from mentis.service.memory import Caller, Memory
from tests.backends import backend, backend_settings, open_memory  # noqa: F401  (fixtures)
from tests.review.test_queue import ME, draft

OTHER = "github.com/acme/other"


@pytest.fixture
def settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:  # noqa: F811
    return backend_settings(backend, tmp_path, request)


def test_the_pending_count_is_what_the_caller_may_list(open_memory: Callable[[], Memory]) -> None:  # noqa: F811
    memory = open_memory()
    assert memory.count_pending_proposals(ME) == 0
    queued = memory.propose(ME, [draft(1), draft(2), draft(3), draft(4, OTHER)]).queued
    scoped = Caller(agent_id="scoped", can_write=False, repositories=(OTHER,))
    for caller, expected in ((ME, 4), (scoped, 1), (Caller(agent_id="none", repositories=("x/*",)), 0)):
        assert memory.count_pending_proposals(caller) == expected
        assert memory.list_proposals(caller, ListProposalsInput()).total == expected
    memory.accept_proposal(ME, AcceptProposalInput(proposal_id=queued[0].proposal_id))
    memory.reject_proposal(ME, RejectProposalInput(proposal_id=queued[3].proposal_id, reason="dup"))
    assert (memory.count_pending_proposals(ME), memory.count_pending_proposals(scoped)) == (2, 0)
