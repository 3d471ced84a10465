"""A branch made on first use (``branch_from`` with ``exist_ok``, what hooks following git call
before each record), on both stores: from a repository with no record yet, idempotent, and
verified on open."""

from __future__ import annotations

from collections.abc import Callable

from mentis.api.attempts import SearchInput
from mentis.api.branches import BranchFromInput
from mentis.api.common import parse
from mentis.ledger.branches import GENESIS
from mentis.service.memory import Caller, Memory
from tests.conformance.helpers import REPOS, record

REPO = REPOS[0]


def first_use(memory: Memory, caller: Caller, name: str = "feature/x") -> tuple[int, str]:
    info = memory.branch_from(
        caller, parse(BranchFromInput, {"repository": REPO, "branch": name, "exist_ok": True})
    )
    return info.fork.seq, info.fork.hash


def test_a_branch_forks_before_an_empty_repositorys_first_entry_and_exist_ok_returns_it_again(
    memory: Memory, caller: Caller, open_memory: Callable[[], Memory]
) -> None:
    assert first_use(memory, caller) == GENESIS
    assert memory.store.chain_heads()[REPO][0] == 0  # the parent's own record of the fork
    on_branch = record(memory, caller, branch="feature/x").attempt_id
    assert first_use(memory, caller) == GENESIS  # returned as it is, nothing written
    assert memory.store.chain_heads()[REPO][0] == 0
    main_id = record(memory, caller).attempt_id
    memory.close()

    again = open_memory()
    assert again.store.damaged == {}
    found = again.search(caller, parse(SearchInput, {"query": "checkout", "repository": REPO}))
    on_main = {i for t in found.tasks for i in t.matched_attempt_ids}
    found = again.search(
        caller, parse(SearchInput, {"query": "checkout", "repository": REPO, "branch": "feature/x"})
    )
    through_branch = {i for t in found.tasks for i in t.matched_attempt_ids}
    assert (on_main, through_branch) == ({main_id}, {main_id, on_branch})
    # on a repository with records, the first use forks at its head now
    head = again.store.chain_heads()[REPO]
    assert first_use(again, caller, "feature/y") == head
    again.close()
