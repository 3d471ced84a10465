"""Proposals for the dashboard's review pages, queued through ``propose_attempts`` as
``mentis propose transcript`` queues them (tests/review/test_queue.py's ``draft``): proposals
1–8 in SHOP, 9 in BILLING, each a failed ``pytest -q`` run whose observation ends with its number."""

from __future__ import annotations

from mentis.service.memory import Caller, Memory
from tests.dashboard.seed import BILLING, SHOP
from tests.review.test_queue import draft

PROPOSER = Caller(agent_id="mentis-propose")
IN_SHOP = range(1, 9)
IN_BILLING = 9


def observation(n: int) -> str:
    return draft(n)[0].observation


def seed_review(memory: Memory) -> dict[int, str]:
    """Queue the proposals; their ids by number."""
    drafts = [draft(n, SHOP) for n in IN_SHOP] + [draft(IN_BILLING, BILLING)]
    queued = memory.propose_attempts(PROPOSER, drafts).queued
    assert len(queued) == len(drafts)
    return {int(p.record["observation"].rsplit(" ", 2)[1]): p.proposal_id for p in queued}
