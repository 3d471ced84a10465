"""`stale_attempts` on both stores: passed checks whose recorded blob ids differ from today's,
scoped to what the caller may read, corrected and forgotten attempts handled."""

from __future__ import annotations

import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, StaleInput
from mentis.api.common import parse
from mentis.errors import Forbidden, InvalidInput
from mentis.service.memory import Caller, Memory

from .helpers import REPOS, record

OLD, NEW, OTHER = "a" * 40, "b" * 40, "c" * 40


def stale(memory: Memory, caller: Caller, current: dict[str, str], **extra: object) -> list[tuple[str, list]]:
    req = parse(StaleInput, {"repository": REPOS[0], "current_file_hashes": current, **extra})
    return [
        (a.task_id, [(f.path, f.recorded, f.current) for f in a.changed])
        for a in memory.stale_attempts(caller, req).attempts
    ]


def passed(memory: Memory, caller: Caller, task: str, hashes: dict[str, str], status: str = "passed") -> str:
    check = {"command": "pytest", "status": status}
    result = record(memory, caller, task_id=task, code_context={"file_hashes": hashes}, check=check)
    return str(result.attempt_id)


def test_only_passed_attempts_on_changed_or_missing_files_are_stale(memory: Memory, caller: Caller) -> None:
    passed(memory, caller, "edited", {"src/a.py": OLD})
    passed(memory, caller, "gone", {"src/b.py": OLD})
    passed(memory, caller, "same", {"src/c.py": OTHER})
    passed(memory, caller, "failed", {"src/a.py": OLD}, status="failed")
    record(memory, caller, task_id="unverified")
    found = stale(memory, caller, {"src/a.py": NEW, "src/c.py": OTHER})
    assert sorted(found) == [
        ("edited", [("src/a.py", OLD, NEW)]),
        ("gone", [("src/b.py", OLD, None)]),
    ]


def test_corrected_attempts_are_left_out_unless_asked_and_forgotten_ones_never_show(
    memory: Memory, caller: Caller
) -> None:
    corrected = passed(memory, caller, "corrected", {"src/a.py": OLD})
    forgotten = passed(memory, caller, "forgotten", {"src/a.py": OLD})
    memory.mark_conclusion_outdated(
        caller, MarkOutdatedInput(repository=REPOS[0], attempt_id=corrected, reason="a.py was rewritten")
    )
    memory.forget_attempt(caller, ForgetInput(repository=REPOS[0], attempt_id=forgotten))
    assert stale(memory, caller, {"src/a.py": NEW}) == []
    assert stale(memory, caller, {"src/a.py": NEW}, include_outdated=True) == [
        ("corrected", [("src/a.py", OLD, NEW)])
    ]


def test_a_caller_scoped_to_another_repository_is_refused(memory: Memory, caller: Caller) -> None:
    passed(memory, caller, "edited", {"src/a.py": OLD})
    with pytest.raises(Forbidden):
        stale(memory, Caller(agent_id="x", repositories=(REPOS[1],)), {})
    assert stale(memory, Caller(agent_id="y", repositories=("github.com/acme/*",)), {}) != []


def test_current_hashes_must_be_git_object_ids(memory: Memory, caller: Caller) -> None:
    with pytest.raises(InvalidInput, match="current_file_hashes"):
        stale(memory, caller, {"src/a.py": "not-hex"})
