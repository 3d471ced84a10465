"""``stats``: counts of what the memory holds, scoped by the caller, on both stores."""

from __future__ import annotations

from typing import Any

import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput
from mentis.api.common import parse
from mentis.api.stats import StatsInput
from mentis.api.thoughts import AppendThoughtInput
from mentis.errors import Forbidden, NotFound
from mentis.service.memory import Caller, Memory

ONE = "github.com/acme/one"
TWO = "github.com/other/two"


def _record(memory: Memory, caller: Caller, repository: str, task: str, status: str | None) -> str:
    data: dict[str, Any] = {
        "repository": repository,
        "task_id": task,
        "action": f"tried {task}",
        "observation": "the cart total was off by a cent",
    }
    if status is not None:
        data["check"] = {"command": "pytest -q", "status": status}
    return memory.record_attempt(caller, parse(RecordAttemptInput, data)).attempt_id


def _thought(memory: Memory, caller: Caller, repository: str, type_: str, content: str) -> None:
    data = {"repository": repository, "type": type_, "content": content}
    memory.append_thought(caller, parse(AppendThoughtInput, data))


def _fill(memory: Memory, caller: Caller) -> None:
    passed = _record(memory, caller, ONE, "T-1", "passed")
    _record(memory, caller, ONE, "T-1", "failed")
    gone = _record(memory, caller, ONE, "T-2", "passed")
    _record(memory, caller, ONE, "T-3", None)
    _record(memory, caller, TWO, "T-9", "failed")
    memory.mark_conclusion_outdated(
        caller, parse(MarkOutdatedInput, {"repository": ONE, "attempt_id": passed, "reason": "reverted"})
    )
    memory.forget_attempt(caller, parse(ForgetInput, {"repository": ONE, "attempt_id": gone}))
    _thought(memory, caller, ONE, "Decision", "store money as integer cents")
    _thought(memory, caller, ONE, "Finding", "rounding happens in the template")
    _thought(memory, caller, TWO, "Decision", "pin the payment SDK")


def _counts(result: Any) -> dict[str, Any]:
    data = result.model_dump()
    for key in ("newest_activity", "store_bytes", "bytes_per_attempt"):
        data.pop(key)
    for repo in data["by_repository"]:
        repo.pop("newest")
    return dict(data)


def test_stats_count_attempts_by_status_outdated_forgotten_and_thoughts_by_type(
    memory: Memory, caller: Caller
) -> None:
    _fill(memory, caller)
    result = memory.stats(caller, StatsInput())
    assert _counts(result) == {
        "repositories": 2,
        "tasks": 3,
        "attempts": 4,
        "attempts_by_status": {"passed": 1, "failed": 2, "unverified": 1},
        "outdated": 1,
        "forgotten": 1,
        "thoughts": 3,
        "thoughts_by_type": {"Decision": 2, "Finding": 1},
        "skills": 0,
        "ledger_entries": 10,
        "by_repository": [
            {"repository": ONE, "ledger_entries": {"attempt": 4, "correction": 1, "forget": 1, "thought": 2}},
            {"repository": TWO, "ledger_entries": {"attempt": 1, "thought": 1}},
        ],
        "refused": [],
    }
    assert result.store_bytes is not None and result.store_bytes > 0
    assert result.bytes_per_attempt == result.store_bytes // 4
    newest = max(e.at for e, _ in memory.store.iter_ledger())
    assert result.newest_activity == newest


def test_a_scoped_caller_counts_only_its_repositories_and_not_the_store_size(
    memory: Memory, caller: Caller
) -> None:
    _fill(memory, caller)
    scoped = Caller(agent_id="scoped", can_write=False, repositories=("github.com/other/*",))
    result = memory.stats(scoped, StatsInput())
    assert (result.repositories, result.attempts, result.thoughts, result.forgotten) == (1, 1, 1, 0)
    assert result.attempts_by_status == {"passed": 0, "failed": 1, "unverified": 0}
    assert [r.repository for r in result.by_repository] == [TWO]
    assert result.store_bytes is None and result.bytes_per_attempt is None
    assert memory.stats(scoped, StatsInput(repository=TWO)).attempts == 1
    with pytest.raises(Forbidden):
        memory.stats(scoped, StatsInput(repository=ONE))


def test_stats_of_one_repository_and_of_an_unknown_one(memory: Memory, caller: Caller) -> None:
    _fill(memory, caller)
    one = memory.stats(caller, StatsInput(repository=ONE))
    assert (one.repositories, one.tasks, one.attempts, one.outdated, one.forgotten) == (1, 2, 3, 1, 1)
    assert one.thoughts_by_type == {"Decision": 1, "Finding": 1}
    assert one.store_bytes is None
    with pytest.raises(NotFound):
        memory.stats(caller, StatsInput(repository="github.com/no/such"))


def test_stats_of_an_empty_store_are_zero(memory: Memory, caller: Caller) -> None:
    result = memory.stats(caller, StatsInput())
    assert (result.repositories, result.tasks, result.attempts, result.thoughts) == (0, 0, 0, 0)
    assert result.newest_activity is None and result.bytes_per_attempt is None
