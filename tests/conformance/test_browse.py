"""The dashboard's scoped reads (mentis.service.browse) on both backends: repository summaries, a
repository's tasks filtered and paginated, a task's timeline with its tombstone."""

from __future__ import annotations

import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput
from mentis.api.common import parse
from mentis.errors import Forbidden, InvalidInput, NotFound
from mentis.service.memory import Caller, Memory

SHOP = "github.com/acme/shop"
BILLING = "github.com/acme/billing"


def _record(memory: Memory, caller: Caller, repo: str, task: str, status: str | None = None) -> str:
    data: dict[str, object] = {
        "repository": repo,
        "task_id": task,
        "task_title": f"title of {task}",
        "action": f"tried something on {task}",
        "files": ["a.py"],
        "observation": "it did something",
    }
    if status is not None:
        data["check"] = {"command": "make test", "status": status}
    return memory.record_attempt(caller, parse(RecordAttemptInput, data)).attempt_id


@pytest.fixture
def filled(memory: Memory) -> dict[str, str]:
    alice, bob = Caller(agent_id="alice"), Caller(agent_id="bob")
    ids = {
        "t1-fail": _record(memory, alice, SHOP, "t1", "failed"),
        "t2-pass": _record(memory, bob, SHOP, "t2", "passed"),
        "t3-none": _record(memory, alice, SHOP, "t3"),
        "t1-pass": _record(memory, bob, SHOP, "t1", "passed"),
        "b1": _record(memory, alice, BILLING, "b1", "passed"),
    }
    memory.mark_conclusion_outdated(
        bob, parse(MarkOutdatedInput, {"repository": SHOP, "attempt_id": ids["t1-fail"], "reason": "wrong"})
    )
    gone = _record(memory, alice, SHOP, "t3")
    memory.forget_attempt(
        alice, parse(ForgetInput, {"repository": SHOP, "attempt_id": gone, "reason": "held a secret"})
    )
    ids["gone"] = gone
    return ids


def test_repository_overview_counts_live_records_and_names_the_chain_head(
    memory: Memory, filled: dict[str, str]
) -> None:
    rows = {r.repository: r for r in memory.repository_overview(Caller(agent_id="admin"))}
    shop = rows[SHOP]
    heads = {c.chain: c for c in memory.verify_integrity(Caller(agent_id="admin")).chains}
    assert (shop.tasks, shop.attempts, shop.thoughts, shop.forgotten) == (3, 4, 0, 1)
    assert (shop.head_seq, shop.head_hash) == (heads[SHOP].head_seq, heads[SHOP].head_hash)
    assert list(rows) == [SHOP, BILLING]  # newest activity first


def test_repository_overview_leaves_out_what_the_caller_may_not_read(
    memory: Memory, filled: dict[str, str]
) -> None:
    scoped = Caller(agent_id="x", can_write=False, repositories=("github.com/acme/billing",))
    assert [r.repository for r in memory.repository_overview(scoped)] == [BILLING]


def test_task_page_filters_by_status_and_agent_newest_first(memory: Memory, filled: dict[str, str]) -> None:
    admin = Caller(agent_id="admin")

    def ids(**kw: object) -> list[str]:
        return [t.row.task_id for t in memory.task_page(admin, SHOP, **kw).tasks]  # type: ignore[arg-type]

    assert ids() == ["t1", "t3", "t2"]  # by newest live attempt (the newest t3 one was forgotten)
    assert ids(status="passed") == ["t1", "t2"]
    assert ids(status="failed") == ["t1"]
    assert ids(status="outdated") == ["t1"]
    assert ids(status="unverified") == ["t3"]
    assert ids(agent="bob") == ["t1", "t2"]
    assert ids(agent="bob", status="failed") == ["t1"]
    page = memory.task_page(admin, SHOP, per_page=2, page=2)
    assert (page.total, page.pages, [t.row.task_id for t in page.tasks]) == (3, 2, ["t2"])
    t1 = next(t for t in memory.task_page(admin, SHOP).tasks if t.row.task_id == "t1")
    assert (t1.title, t1.row.attempts, t1.row.passed, t1.row.failed, t1.row.outdated) == (
        "title of t1",
        2,
        1,
        1,
        1,
    )
    assert memory.task_page(admin, SHOP).agents == ["alice", "bob"]


def test_task_page_rejects_bad_parameters_and_other_repositories(
    memory: Memory, filled: dict[str, str]
) -> None:
    admin = Caller(agent_id="admin")
    with pytest.raises(InvalidInput):
        memory.task_page(admin, SHOP, status="sideways")
    with pytest.raises(InvalidInput):
        memory.task_page(admin, SHOP, page=0)
    with pytest.raises(InvalidInput):
        memory.task_page(admin, SHOP, per_page=1000)
    with pytest.raises(Forbidden):
        memory.task_page(Caller(agent_id="x", repositories=(BILLING,)), SHOP)


def test_timeline_orders_attempts_and_tombstones_by_ledger_seq(
    memory: Memory, filled: dict[str, str]
) -> None:
    timeline = memory.task_timeline(Caller(agent_id="admin"), SHOP, "t3")
    kinds = [type(i).__name__ for i in timeline.items]
    assert kinds == ["TimelineAttempt", "Tombstone"]
    tomb = timeline.items[1]
    assert (tomb.attempt_id, tomb.reason) == (filled["gone"], "held a secret")
    t1 = memory.task_timeline(Caller(agent_id="admin"), SHOP, "t1")
    first = t1.items[0]
    assert [c.reason for c in first.stored.corrections] == ["wrong"]
    with pytest.raises(NotFound):
        memory.task_timeline(Caller(agent_id="admin"), SHOP, "no-such-task")


def test_the_agent_choices_pick_up_new_agents(memory: Memory, filled: dict[str, str]) -> None:
    admin = Caller(agent_id="admin")
    assert memory.task_page(admin, SHOP).agents == ["alice", "bob"]
    _record(memory, Caller(agent_id="carol"), SHOP, "t9")
    assert memory.task_page(admin, SHOP).agents == ["alice", "bob", "carol"]
    assert memory.task_page(admin, BILLING).agents == ["alice"]
