"""``Store.append_attempts`` (the bulk path the benchmarks fill through), on both backends: the rows
land in order as ``append_attempt`` would put them, in one transaction that a bad row undoes."""

from __future__ import annotations

from typing import Any

import pytest

from mentis.embed import HashEmbedder
from mentis.errors import MentisError
from mentis.memory import Caller, Memory
from mentis.store.base import AttemptRow
from tests.conformance.helpers import REPOS, search

AT = "2026-01-01T00:00:00.000000Z"


def _row(repo: str, attempt_id: str, observation: str) -> AttemptRow:
    body: dict[str, Any] = {
        "attempt_id": attempt_id,
        "repository": repo,
        "task_id": "T-bulk",
        "task_title": "bulk loaded task",
        "agent_id": "loader",
        "created_at": AT,
        "action": "loaded in bulk",
        "observation": observation,
        "files": ["src/bulk.py"],
        "tags": ["perf"],
        "code_context": {},
    }
    return AttemptRow(repo, attempt_id, AT, "loader", body, HashEmbedder().embed([observation])[0])


def test_append_attempts_appends_each_row_in_order_on_its_own_chain(memory: Memory, caller: Caller) -> None:
    rows = [
        _row(REPOS[0], "00000000-0000-4000-8000-000000000001", "quokka escaped the enclosure"),
        _row(REPOS[1], "00000000-0000-4000-8000-000000000002", "wombat dug under the fence"),
        _row(REPOS[0], "00000000-0000-4000-8000-000000000003", "second quokka sighting near the gate"),
    ]
    entries = memory.store.append_attempts(rows)
    assert [(e.chain, e.seq, e.kind, e.id) for e in entries] == [
        (REPOS[0], 0, "attempt", rows[0].attempt_id),
        (REPOS[1], 0, "attempt", rows[1].attempt_id),
        (REPOS[0], 1, "attempt", rows[2].attempt_id),
    ]
    assert entries[2].prev == entries[0].hash
    assert {r.chain: r.entries for r in memory.store.verify()} == {REPOS[0]: 2, REPOS[1]: 1}
    assert search(memory, caller, "quokka")[0] == (REPOS[0], "T-bulk")
    history = memory.store.task_history(REPOS[0], "T-bulk")
    assert [a.body for a in history] == [rows[0].body, rows[2].body]


def test_append_attempts_writes_nothing_when_one_row_fails(memory: Memory) -> None:
    first = _row(REPOS[0], "00000000-0000-4000-8000-000000000001", "quokka escaped the enclosure")
    again = _row(REPOS[1], first.attempt_id, "the same attempt id a second time")
    with pytest.raises(MentisError):
        memory.store.append_attempts([first, again])
    assert memory.store.counts()["entries"] == 0
    assert list(memory.store.iter_ledger()) == []
