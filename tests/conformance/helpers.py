"""Small builders shared by the conformance tests."""

from __future__ import annotations

from typing import Any

from mentis.api.attempts import RecallInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.service.memory import Caller, Memory
from mentis.store.seal import Seal

REPOS = ("github.com/acme/shop", "github.com/acme/billing")


def record(
    memory: Memory, caller: Caller, repository: str = REPOS[0], *, seal: Seal | None = None, **fields: Any
) -> Any:
    """One attempt by ``caller`` (with ``seal``: sealed so, e.g. signed)."""
    data = {
        "repository": repository,
        "task_id": "T-1",
        "task_title": "flaky checkout test",
        "action": "retried the payment fixture with a fresh event loop",
        "observation": "the checkout test timed out waiting for the payment queue",
        "files": ["src/shop/checkout.py"],
        **fields,
    }
    return memory.record_attempt(caller, parse(RecordAttemptInput, data), seal=seal)


def search(memory: Memory, caller: Caller, query: str, **fields: Any) -> list[tuple[str, str]]:
    res = memory.search(caller, parse(SearchInput, {"query": query, **fields}))
    return [(t.repository, t.task_id) for t in res.tasks]


def sql(memory: Memory, caller: Caller, text: str, **params: object) -> Any:
    return memory.recall(caller, parse(RecallInput, {"sql": text, "params": params or None}))


def ledger(memory: Memory) -> list[tuple[str, int, str]]:
    return [(e.chain, e.seq, e.hash) for e, _ in memory.store.iter_ledger()]


def fill(memory: Memory, caller: Caller) -> list[str]:
    """Attempts in two repositories, one corrected and one forgotten; returns the attempt ids."""
    ids = []
    for i, repo in enumerate(REPOS * 3):
        ids.append(
            record(
                memory,
                caller,
                repo,
                task_id=f"T-{i % 4}",
                observation=f"observation {i}: cache stampede under load"
                if i % 2
                else f"navbar {i} overflows",
                tags=["perf"] if i % 2 else ["css"],
            ).attempt_id
        )
    from mentis.api.attempts import ForgetInput, MarkOutdatedInput

    memory.mark_conclusion_outdated(
        caller,
        parse(MarkOutdatedInput, {"repository": REPOS[0], "attempt_id": ids[0], "reason": "fixed upstream"}),
    )
    memory.forget_attempt(caller, parse(ForgetInput, {"repository": REPOS[1], "attempt_id": ids[1]}))
    return ids
