"""Retrospectives on both stores: a Retrospective thought summing up a task, linked to what it
covers; search shows the freshest first in that task's preview until a later attempt; bad input
names its field and writes nothing."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import Client
from pydantic import ValidationError

from mentis.api.attempts import RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.api.thoughts import (
    AppendRetrospectiveInput,
    AppendThoughtInput,
    ForgetThoughtInput,
    GetThoughtInput,
)
from mentis.errors import InvalidInput
from mentis.mcp.server import build_server
from mentis.service.memory import Caller, Memory
from mentis.service.profiles import parse_profile
from tests.conformance.helpers import ledger
from tests.conftest import REPO

QUERY = "flaky checkout test times out"


def attempt(memory: Memory, caller: Caller, task: str, action: str) -> str:
    req = RecordAttemptInput(
        repository=REPO, task_id=task, action=action, observation="the checkout test timed out again"
    )
    return memory.record_attempt(caller, req).attempt_id


def retro(memory: Memory, caller: Caller, **fields: Any) -> Any:
    data = {
        "repository": REPO,
        "task_id": "flaky",
        "summary": "Raise the timeout; the mock was slow.",
        **fields,
    }
    return memory.append_retrospective(caller, parse(AppendRetrospectiveInput, data))


def test_a_retrospective_is_a_retrospective_thought_linked_to_what_it_covers(
    memory: Memory, caller: Caller
) -> None:
    first = attempt(memory, caller, "flaky", "retried the flaky checkout test")
    second = attempt(memory, caller, "flaky", "raised the checkout test timeout")
    attempt(memory, caller, "other", "unrelated")
    finding = memory.append_thought(
        caller, AppendThoughtInput(repository=REPO, type="Finding", content="the payment mock sleeps 5 s")
    ).thought_id
    everything = retro(memory, caller)
    assert everything.attempts == [first, second] and everything.thoughts == []
    chosen = retro(memory, caller, covers=[second, finding], summary="Only the timeout mattered.")
    with pytest.raises(InvalidInput) as thoughts_only:
        retro(memory, caller, covers=[finding])
    assert thoughts_only.value.field == "covers" and "at least one attempt" in thoughts_only.value.message
    assert (chosen.attempts, chosen.thoughts) == ([second], [finding])
    stored = memory.get_thought(caller, GetThoughtInput(thought_id=chosen.thought_id))
    assert (stored.type, stored.role, stored.task_id) == ("Summary", "Retrospective", "flaky")
    assert stored.refs == [second]
    assert [(r.kind, r.target_id) for r in stored.relations] == [("Summarizes", finding)]
    earlier = memory.get_thought(caller, GetThoughtInput(thought_id=everything.thought_id))
    assert earlier.invalidated_by == []  # a second retrospective does not supersede the first


def test_search_shows_the_freshest_retrospective_first_until_a_later_attempt(
    memory: Memory, caller: Caller
) -> None:
    attempt(memory, caller, "flaky", "retried the flaky checkout test that times out")
    before = memory.search(caller, SearchInput(query=QUERY))
    assert before.tasks[0].retrospective is None
    retro(memory, caller, summary="Older summary.")
    newest = retro(memory, caller, summary="Raise the timeout; the payment mock was slow.")
    shown = memory.search(caller, SearchInput(query=QUERY)).tasks[0]
    assert shown.task_id == "flaky" and shown.retrospective is not None
    assert (shown.retrospective.thought_id, shown.retrospective.summary) == (
        newest.thought_id,
        "Raise the timeout; the payment mock was slow.",
    )

    async def text() -> str:
        async with Client(build_server(memory, parse_profile("core,retrospectives"))) as client:
            got = await client.call_tool("search", {"query": QUERY})
            return str(got.content[0].text)  # type: ignore[union-attr]

    lines = anyio.run(text).splitlines()
    assert lines[2].strip().startswith("retrospective (") and "payment mock was slow" in lines[2]
    assert "retried the flaky" in lines[3]  # the attempt preview follows it
    memory.forget_thought(caller, ForgetThoughtInput(repository=REPO, thought_id=newest.thought_id))
    older = memory.search(caller, SearchInput(query=QUERY)).tasks[0].retrospective
    assert older is not None and older.summary == "Older summary."  # the freshest one standing
    attempt(memory, caller, "flaky", "the checkout test times out once more after the fix")
    after = memory.search(caller, SearchInput(query=QUERY)).tasks[0]
    assert after.task_id == "flaky" and after.retrospective is None


def test_bad_retrospectives_name_their_field_and_write_nothing(memory: Memory, caller: Caller) -> None:
    attempt(memory, caller, "flaky", "retried")
    other = attempt(memory, caller, "other", "elsewhere")
    written = ledger(memory)
    for fields, field in [
        ({"task_id": "no-such-task"}, "task_id"),
        ({"covers": ["00000000-0000-4000-8000-000000000000"]}, "covers"),
        ({"covers": [other]}, "covers"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            retro(memory, caller, **fields)
        assert caught.value.field == field and field in caught.value.message
    with pytest.raises((InvalidInput, ValidationError)) as empty:
        retro(memory, caller, summary="")
    assert "summary" in str(empty.value)
    assert ledger(memory) == written
