"""The typed ledger bodies (``mentis.ledger.bodies``): bodies the real service writes read back into
their types and write out to the same bytes, the status rule agrees in Python and in both
dialects' SQL, and tombstones are composed one way."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecallInput, RecordAttemptInput
from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput, ForgetThoughtInput
from mentis.errors import IntegrityError
from mentis.ledger.bodies import (
    FTS_WEIGHTS,
    THOUGHT_FTS_WEIGHTS,
    AttemptBody,
    Body,
    CheckBody,
    CorrectionBody,
    ThoughtBody,
    TombstoneBody,
    status_sql,
    tombstone,
)
from mentis.ledger.canonical import canonical
from mentis.service.memory import Caller, Memory

from .conftest import REPO

BODY_TYPES: dict[str, type[Body]] = {
    "attempt": AttemptBody,
    "correction": CorrectionBody,
    "thought": ThoughtBody,
    "forget": TombstoneBody,
}
HASH = "0123456789abcdef0123456789abcdef01234567"


def record(memory: Memory, caller: Caller, **fields: Any) -> str:
    data = {"repository": REPO, "task_id": "T-1", "action": "ran it", "observation": "it broke", **fields}
    return memory.record_attempt(caller, parse(RecordAttemptInput, data)).attempt_id


def think(memory: Memory, caller: Caller, **fields: Any) -> str:
    data = {"repository": REPO, "type": "Decision", "content": "use one lock per repository", **fields}
    return memory.append_thought(caller, parse(AppendThoughtInput, data)).thought_id


def fill(memory: Memory, caller: Caller) -> None:
    """Every kind of body, with and without each optional field."""
    record(memory, caller)
    outdated = record(
        memory,
        caller,
        task_title="Login fails",
        session_id="s-1",
        inference="the cookie expired",
        files=["src/auth.py", "src/auth.py"],
        tags=["auth"],
        code_context={"commit": "ABCDEF1", "branch": "main", "dirty": False, "file_hashes": {"a": HASH}},
        check={"command": "pytest -q", "status": "failed", "exit_code": 0, "output": ""},
    )
    record(memory, caller, inference="", code_context={}, check={"command": "make", "status": "passed"})
    for latest in (None, "abc1234"):
        req = {
            "repository": REPO,
            "attempt_id": outdated,
            "reason": "fixed upstream",
            "latest_commit": latest,
        }
        memory.mark_conclusion_outdated(caller, parse(MarkOutdatedInput, req))
    record(memory, caller, task_id="T-2", inference="The cookie expired!")  # re-asserts the rejected one
    first = think(memory, caller, confidence=0.25, importance="1", tags=["t"], concepts=["c"], task_id="T-1")
    think(
        memory,
        caller,
        type="Finding",
        content="the lock is per chain",
        refs=[outdated],
        relations=[
            {"kind": "Corrects", "target_id": first, "valid_at": "2026-01-01T00:00:00Z"},
            {"kind": "RelatedTo", "target_id": first},
        ],
    )
    think(memory, caller, content="use one lock per repository", role="Summary")  # a near-duplicate
    forgotten = record(memory, caller, task_id="T-3")
    memory.forget_attempt(caller, parse(ForgetInput, {"repository": REPO, "attempt_id": forgotten}))
    memory.forget_thought(
        caller, parse(ForgetThoughtInput, {"repository": REPO, "thought_id": first, "reason": "wrong"})
    )


def test_every_body_the_service_writes_reads_back_to_the_same_bytes(memory: Memory, caller: Caller) -> None:
    fill(memory, caller)
    kinds: dict[str, int] = {}
    optional_seen: set[str] = set()
    for entry, raw in memory.store.iter_ledger():
        if raw is None:
            continue
        body = BODY_TYPES[entry.kind].parse(raw)
        assert canonical(body.to_json()) == raw
        kinds[entry.kind] = kinds.get(entry.kind, 0) + 1
        optional_seen |= {k for k, v in body.to_json().items() if v is None or k in ("reasserts", "check")}
    assert kinds == {"attempt": 4, "correction": 2, "thought": 2, "forget": 2}
    assert {"reasserts", "check", "reason"} <= optional_seen


def test_a_body_type_ignores_unknown_keys_and_names_a_missing_one() -> None:
    body = {"attempt_id": "a", "repository": "r", "reason": "x", "at": "t", "agent_id": "g", "extra": 1}
    assert CorrectionBody.from_json(body).to_json() == {k: v for k, v in body.items() if k != "extra"}
    with pytest.raises(IntegrityError, match="CorrectionBody"):
        CorrectionBody.from_json({"attempt_id": "a"})


def test_status_is_the_check_status_else_unverified_in_python_and_in_the_views(
    memory: Memory, caller: Caller
) -> None:
    checks = {
        "passed": {"command": "make", "status": "passed"},
        "failed": {"command": "make", "status": "failed"},
    }
    ids = {status: record(memory, caller, check=check) for status, check in checks.items()}
    ids["unverified"] = record(memory, caller)
    raw = {e.id: body for e, body in memory.store.iter_ledger() if body is not None}
    assert {s: AttemptBody.parse(raw[i]).status for s, i in ids.items()} == {s: s for s in ids}
    view = memory.recall(caller, RecallInput(sql="SELECT attempt_id, status FROM attempts"))
    assert dict(view.rows) == {i: s for s, i in ids.items()}

    conn = sqlite3.connect(":memory:")
    rule = status_sql("json_extract(?, '$.check.status')")
    for status, attempt_id in ids.items():
        assert conn.execute(f"SELECT {rule}", (raw[attempt_id],)).fetchone() == (status,)
    assert status_sql("j->'check'->>'status'") == "coalesce(j->'check'->>'status', 'unverified')"


def test_an_attempt_gives_the_index_its_weighted_fields_and_the_graph_its_labels() -> None:
    attempt = AttemptBody(
        attempt_id="a",
        repository="r",
        task_id="t",
        agent_id="g",
        created_at="now",
        action="act",
        observation="saw",
        files=["x.py", "y.py"],
        tags=["auth"],
        check=CheckBody(command="make", status="failed"),
    )
    assert attempt.index_fields == (("", "act", "saw", "", "x.py y.py", "auth"), FTS_WEIGHTS)
    assert attempt.labels == [("file", "x.py"), ("file", "y.py"), ("tag", "auth")]
    assert (attempt.conclusion, attempt.embed_text) == ("saw", "act\nsaw")
    assert attempt.stale_files({"x.py": HASH}) is None


def test_a_thought_gives_the_index_its_content_labels_and_type() -> None:
    raw = canonical(
        {
            **{"thought_id": "t", "repository": "r", "type": "Plan", "role": "Memory", "content": "c"},
            **{"importance": "0.5", "agent_id": "g", "created_at": "now", "refs": [], "relations": []},
            **{"tags": ["a", "b"], "concepts": ["k"]},
        }
    )
    thought = ThoughtBody.parse(raw)
    assert thought.index_fields == (("c", "a b", "k", "Plan"), THOUGHT_FTS_WEIGHTS)
    assert thought.labels == [("tag", "a"), ("tag", "b"), ("concept", "k")]
    assert canonical(thought.to_json()) == raw


def test_tombstones_keep_a_null_reason_and_name_an_attempts_task() -> None:
    attempt = tombstone("attempt", "a-1", "r", [3, 5], None, "g", "now", "T-1")
    thought = tombstone("thought", "t-1", "r", [4], "wrong", "g", "now")
    assert attempt.to_json() == {
        **{"attempt_id": "a-1", "repository": "r", "erased": [3, 5], "reason": None},
        **{"agent_id": "g", "at": "now", "task_id": "T-1"},
    }
    assert thought.to_json() == {
        **{"thought_id": "t-1", "repository": "r", "erased": [4], "reason": "wrong"},
        **{"agent_id": "g", "at": "now"},
    }


def test_forgetting_appends_the_composed_tombstone(memory: Memory, caller: Caller) -> None:
    attempt_id = record(memory, caller)
    req = {"repository": REPO, "attempt_id": attempt_id, "reason": "stale"}
    memory.mark_conclusion_outdated(caller, parse(MarkOutdatedInput, req))
    memory.forget_attempt(caller, parse(ForgetInput, {"repository": REPO, "attempt_id": attempt_id}))
    entries = list(memory.store.iter_ledger())
    forget, raw = entries[-1]
    assert raw is not None
    erased = [e.seq for e, _ in entries[:-1]]
    expected = tombstone("attempt", attempt_id, REPO, erased, None, caller.agent_id, forget.at, "T-1")
    assert raw == canonical(expected.to_json())
    assert TombstoneBody.parse(raw) == expected
