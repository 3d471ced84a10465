"""The branch tools through MCP, REST and the CLI answer and refuse as the service does."""

from __future__ import annotations

from mentis.api.attempts import RecordAttemptInput
from mentis.service.memory import Caller

from .conftest import REPO
from .transports import Call

OWNER = Caller(agent_id="owner")


def test_branch_tools_through_every_transport_answer_and_refuse_as_the_service_does(call: Call) -> None:
    memory = call.live.memory
    memory.record_attempt(
        OWNER, RecordAttemptInput(repository=REPO, task_id="t", action="a", observation="o")
    )
    status, made = call("branch_from", {"repository": REPO, "branch": "feature/x"})
    assert status == "ok", made
    assert (made["chain"], made["parent"], made["fork"]["seq"]) == (f"{REPO}:feature/x", REPO, 0)
    assert call("list_branches", {"repository": REPO}) == call.direct("list_branches", {"repository": REPO})
    record = {
        "repository": REPO,
        "branch": "feature/x",
        "task_id": "b",
        "action": "tried",
        "observation": "cache",
    }
    status, recorded = call("record_attempt", record)
    assert status == "ok", recorded
    found = call("search", {"query": "cache", "repository": REPO, "branch": "feature/x"})
    assert found == call.direct("search", {"query": "cache", "repository": REPO, "branch": "feature/x"})
    for bad in (
        ("branch_from", {"repository": REPO, "branch": "a..b"}),
        ("branch_from", {"repository": REPO, "branch": "y", "fork_seq": 99}),
        ("merge_branch", {"repository": REPO, "branch": "nope"}),
        ("merge_branch", {"repository": REPO, "branch": "feature/x", "into": "feature/x"}),
    ):
        assert call(*bad)[0] == call.direct(*bad)[0] != "ok", bad
    status, merged = call("merge_branch", {"repository": REPO, "branch": "feature/x"})
    assert status == "ok", merged
    assert merged["into"] == REPO and merged["conflicts"] == []
