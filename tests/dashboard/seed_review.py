"""Proposals for the dashboard's review pages, queued through ``Memory.propose`` as
``mentis propose transcript`` queues them (tests/review/test_queue.py's ``draft``): attempts 1–8
in SHOP and 9 in BILLING, each a failed ``pytest -q`` run whose observation ends with its number,
and one thought in SHOP (what ``--llm`` proposes: typed LLMExtracted)."""

from __future__ import annotations

from mentis.api.common import SourceEpisode
from mentis.api.thoughts import AppendThoughtInput
from mentis.service.memory import Caller, Memory
from tests.dashboard.seed import BILLING, SHOP
from tests.review.test_queue import draft

PROPOSER = Caller(agent_id="mentis-propose")
IN_SHOP = range(1, 9)
IN_BILLING = 9
THOUGHT = 10
THOUGHT_CONTENT = "Totals must be rounded once, at the end, not per line."


def observation(n: int) -> str:
    return draft(n)[0].observation


def thought_draft() -> tuple[AppendThoughtInput, SourceEpisode]:
    thought = AppendThoughtInput(
        repository=SHOP,
        type="LLMExtracted",
        content=THOUGHT_CONTENT,
        tags=["llm", "constraint"],
        task_id="main-5f0c2a9e",
        session_id="5f0c2a9e",
    )
    return thought, SourceEpisode(transcript="/t/s.jsonl", session_id="5f0c2a9e", from_line=20, to_line=24)


def seed_review(memory: Memory) -> dict[int, str]:
    """Queue the proposals; their ids by number (the thought's is THOUGHT)."""
    drafts = [draft(n, SHOP) for n in IN_SHOP] + [draft(IN_BILLING, BILLING)]
    queued = memory.propose(PROPOSER, [*drafts, thought_draft()]).queued
    assert len(queued) == len(drafts) + 1
    ids = {}
    for p in queued:
        n = THOUGHT if p.kind == "thought" else int(p.record["observation"].rsplit(" ", 2)[1])
        ids[n] = p.proposal_id
    return ids
