"""Deliveries on both stores: the outbox is written with the record, delivered signed, retried,
dead-lettered and redelivered by hand, bounded by its token's read scope and its filters."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput
from mentis.api.thoughts import AppendThoughtInput
from mentis.api.webhooks import CreateWebhookInput, DeliveriesInput, RedeliverInput
from mentis.config import Settings
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore
from mentis.service.webhook_rules import WebhookSettings
from mentis.service.webhooks import Deliverer
from mentis.store.seal import Seal

from .conftest import ADMIN, REPO, Receiver, drain, subscribe

WRITER = Caller(agent_id="writer")


def _attempt(memory: Memory, repository: str = REPO, status: str | None = None, task: str = "t1") -> str:
    check = {"command": "pytest", "status": status} if status else None
    req = RecordAttemptInput(
        repository=repository, task_id=task, action="ran the tests", observation="two failed", check=check
    )
    return memory.record_attempt(WRITER, req).attempt_id


def test_a_recorded_attempt_arrives_once_signed_with_its_record(
    memory: Memory, tokens: TokenStore, receiver: Receiver, deliverer: Deliverer
) -> None:
    hook = subscribe(memory, tokens, receiver)
    assert hook.secret.startswith("whsec_")
    attempt_id = _attempt(memory, status="failed")
    (pending,) = memory.webhook_deliveries(ADMIN, DeliveriesInput()).deliveries
    assert (pending.state, pending.record_id, pending.attempts) == ("pending", attempt_id, 0)
    drain(deliverer)
    (body,) = receiver.bodies()  # each signature verified
    assert body["type"] == "attempt.recorded"
    assert body["data"]["record_id"] == attempt_id and body["data"]["repository"] == REPO
    assert body["data"]["record"]["observation"] == "two failed"
    ((headers, _),) = receiver.requests
    assert headers["webhook-id"] == pending.delivery_id and "." not in headers["webhook-id"]
    (done,) = memory.webhook_deliveries(ADMIN, DeliveriesInput()).deliveries
    assert (done.state, done.attempts, done.last_status) == ("delivered", 1, 204)
    assert deliverer.run_once() == 0  # nothing delivered twice


def test_ids_only_subscriptions_get_no_record_and_a_forgotten_record_is_never_sent(
    memory: Memory, tokens: TokenStore, make_receiver: Callable[..., Receiver], deliverer: Deliverer
) -> None:
    ids, full = make_receiver(), make_receiver()
    subscribe(memory, tokens, ids, ids_only=True)
    subscribe(memory, tokens, full, events=["attempt.recorded", "attempt.forgotten"])
    attempt_id = _attempt(memory)
    memory.forget_attempt(WRITER, ForgetInput(repository=REPO, attempt_id=attempt_id, reason="leaked a key"))
    drain(deliverer)
    (only,) = ids.bodies()
    assert "record" not in only["data"] and only["data"]["record_id"] == attempt_id
    recorded, forgotten = sorted(full.bodies(), key=lambda b: b["type"])
    assert recorded["type"] == "attempt.forgotten" and forgotten["type"] == "attempt.recorded"
    assert forgotten["data"]["record"] is None  # erased before delivery: the content is not sent
    assert recorded["data"]["record"]["attempt_id"] == attempt_id


def test_a_write_that_does_not_commit_leaves_no_delivery(
    memory: Memory, tokens: TokenStore, receiver: Receiver
) -> None:
    subscribe(memory, tokens, receiver)
    req = RecordAttemptInput(repository=REPO, task_id="t", action="a", observation="o")
    memory.record_attempt(WRITER, req, seal=Seal(commit=False))  # prepared, rolled back
    assert memory.webhook_deliveries(ADMIN, DeliveriesInput()).deliveries == []


def test_a_receiver_failing_twice_gets_the_third_try_with_the_same_id(
    memory: Memory, tokens: TokenStore, make_receiver: Callable[..., Receiver], deliverer: Deliverer
) -> None:
    receiver = make_receiver(fail=2)
    subscribe(memory, tokens, receiver)
    _attempt(memory)
    drain(deliverer)
    assert len(receiver.bodies()) == 3
    assert len({h["webhook-id"] for h, _ in receiver.requests}) == 1
    (done,) = memory.webhook_deliveries(ADMIN, DeliveriesInput()).deliveries
    assert (done.state, done.attempts) == ("delivered", 3)


def test_after_its_last_attempt_a_delivery_is_dead_with_its_error_until_redelivered(
    memory: Memory, tokens: TokenStore, make_receiver: Callable[..., Receiver], deliverer: Deliverer
) -> None:
    receiver = make_receiver(fail=3)  # MENTIS_WEBHOOK_MAX_ATTEMPTS=3 in these tests
    subscribe(memory, tokens, receiver)
    _attempt(memory)
    drain(deliverer)
    (dead,) = memory.webhook_deliveries(ADMIN, DeliveriesInput(state="dead")).deliveries
    assert (dead.attempts, dead.last_status, dead.last_error) == (3, 500, "HTTP 500")
    assert deliverer.run_once() == 0 and len(receiver.requests) == 3
    again = memory.redeliver_webhook(ADMIN, RedeliverInput(delivery_id=dead.delivery_id))
    assert again.state == "pending"
    drain(deliverer)
    (done,) = memory.webhook_deliveries(ADMIN, DeliveriesInput()).deliveries
    assert (done.state, done.attempts) == ("delivered", 1) and len(receiver.bodies()) == 4


def test_a_token_whose_scope_excludes_a_repository_receives_nothing_from_it(
    memory: Memory, tokens: TokenStore, receiver: Receiver, deliverer: Deliverer
) -> None:
    subscribe(memory, tokens, receiver, repos=("github.com/acme/*",))
    _attempt(memory, repository="github.com/secret/vault")
    kept = _attempt(memory)
    drain(deliverer)
    assert [b["data"]["record_id"] for b in receiver.bodies()] == [kept]
    (skipped,) = memory.webhook_deliveries(ADMIN, DeliveriesInput(state="skipped")).deliveries
    assert skipped.repository == "github.com/secret/vault" and "scope" in (skipped.last_error or "")


def test_a_revoked_token_stops_every_delivery(
    memory: Memory, tokens: TokenStore, receiver: Receiver, deliverer: Deliverer
) -> None:
    subscribe(memory, tokens, receiver)
    _attempt(memory)
    (hook,) = memory.store.webhook_rows()
    tokens.revoke(hook.token_id)
    drain(deliverer)
    assert receiver.requests == []


def test_filters_keep_only_the_repositories_statuses_and_thought_types_asked_for(
    memory: Memory, tokens: TokenStore, make_receiver: Callable[..., Receiver], deliverer: Deliverer
) -> None:
    failed, decisions = make_receiver(), make_receiver()
    subscribe(memory, tokens, failed, repository="github.com/acme/*", status="failed")
    subscribe(memory, tokens, decisions, events=["thought.appended"], thought_type="Decision")
    _attempt(memory, status="passed")
    wanted = _attempt(memory, status="failed")
    _attempt(memory, repository="gitlab.com/x/y", status="failed")
    for kind in ("Finding", "Decision"):
        memory.append_thought(WRITER, AppendThoughtInput(repository=REPO, type=kind, content=f"a {kind}"))
    drain(deliverer)
    assert [b["data"]["record_id"] for b in failed.bodies()] == [wanted]
    assert [b["data"]["record"]["type"] for b in decisions.bodies()] == ["Decision"]


def test_two_deliverers_on_one_store_never_send_a_delivery_twice(
    memory: Memory, tokens: TokenStore, receiver: Receiver, settings: Settings
) -> None:
    subscribe(memory, tokens, receiver)
    for i in range(12):
        _attempt(memory, task=f"t{i}")
    workers = [Deliverer(memory.store, tokens, WebhookSettings.of(settings)) for _ in range(3)]
    threads = [threading.Thread(target=drain, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for w in workers:
        w.close()
    ids = [h["webhook-id"] for h, _ in receiver.requests]
    assert len(ids) == 12 and len(set(ids)) == 12


def _raw_sql(settings: Settings, sql: str, args: tuple[object, ...]) -> None:
    """One statement straight on the store's database, behind Mentis's back."""
    if settings.uses_postgres:
        import psycopg

        assert settings.database_url is not None
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute(sql.replace("?", "%s"), args)  # type: ignore[arg-type]
        return
    import sqlite3

    conn = sqlite3.connect(settings.db_path, isolation_level=None)
    try:
        conn.execute(sql, args)
    finally:
        conn.close()


def test_a_chain_that_stops_verifying_is_announced_once_as_integrity_failed(
    open_memory: Callable[[], Memory], tokens: TokenStore, receiver: Receiver, settings: Settings
) -> None:
    memory = open_memory()
    subscribe(memory, tokens, receiver, events=["integrity.failed"])
    _attempt(memory)
    memory.close()
    _raw_sql(
        settings,
        "UPDATE bodies SET body = ? WHERE rowid = (SELECT min(rowid) FROM entries WHERE chain = ?)",
        (b'{"x":1}', REPO),
    )
    for _ in range(2):  # each open finds the damage; it is queued once
        reopened = open_memory()
        assert REPO in reopened.store.damaged
    deliverer = Deliverer(reopened.store, tokens, WebhookSettings.of(settings))
    try:
        drain(deliverer)
    finally:
        deliverer.close()
    (body,) = receiver.bodies()
    assert body["type"] == "integrity.failed"
    assert body["data"] == {"repository": REPO, "seq": 0, "hint": "run `mentis verify-integrity`"}


def test_delivered_rows_older_than_the_keep_days_are_pruned_and_dead_ones_kept(
    memory: Memory, tokens: TokenStore, make_receiver: Callable[..., Receiver], deliverer: Deliverer
) -> None:
    ok, failing = make_receiver(), make_receiver(fail=99)
    subscribe(memory, tokens, ok)
    subscribe(memory, tokens, failing)
    _attempt(memory)
    drain(deliverer)
    states = sorted(d.state for d in memory.webhook_deliveries(ADMIN, DeliveriesInput()).deliveries)
    assert states == ["dead", "delivered"]
    assert memory.store.outbox_prune(0.0) == 0  # settled after the epoch: younger than any cut-off before it
    assert memory.store.outbox_prune(time.time() + 1) == 1
    (kept,) = memory.webhook_deliveries(ADMIN, DeliveriesInput()).deliveries
    assert kept.state == "dead"


def test_another_agents_private_record_and_its_correction_are_never_delivered(
    memory: Memory, tokens: TokenStore, make_receiver: Callable[..., Receiver], deliverer: Deliverer
) -> None:
    events = ["attempt.recorded", "conclusion.outdated"]
    other, own = make_receiver(), make_receiver()
    subscribe(memory, tokens, other, events=events)  # a token of another agent
    _, writer_token = tokens.create(scope="read", repositories=("*",), agent=WRITER.agent_id)
    made = memory.create_webhook(
        ADMIN, CreateWebhookInput(url=own.url, events=events, token_id=writer_token.id)
    )
    own.secret = made.secret
    req = RecordAttemptInput(
        repository=REPO, task_id="t1", action="tried a key", observation="it worked", visibility="agent"
    )
    private = memory.record_attempt(WRITER, req).attempt_id
    memory.mark_conclusion_outdated(
        WRITER, MarkOutdatedInput(repository=REPO, attempt_id=private, reason="the key was rotated")
    )
    shared = _attempt(memory)
    drain(deliverer)
    assert [b["data"]["record_id"] for b in other.bodies()] == [shared]
    assert sorted(b["type"] for b in own.bodies()) == [
        "attempt.recorded",
        "attempt.recorded",
        "conclusion.outdated",
    ]
    skipped = memory.webhook_deliveries(ADMIN, DeliveriesInput(state="skipped")).deliveries
    assert len(skipped) == 2 and all("private to another agent" in (d.last_error or "") for d in skipped)


def test_a_merge_is_announced_as_branch_merged_and_a_repository_token_receives_its_branches(
    memory: Memory, tokens: TokenStore, receiver: Receiver, deliverer: Deliverer
) -> None:
    from mentis.api.branches import BranchFromInput, MergeBranchInput

    _attempt(memory)
    memory.branch_from(WRITER, BranchFromInput(repository=REPO, branch="feature/x", parent=None))
    subscribe(memory, tokens, receiver, repos=(REPO,), events=["branch.merged", "attempt.recorded"])
    on_branch = memory.record_attempt(
        WRITER,
        RecordAttemptInput(
            repository=REPO, branch="feature/x", task_id="t1", action="ran it", observation="passed"
        ),
    ).attempt_id
    report = memory.merge_branch(WRITER, MergeBranchInput(repository=REPO, branch="feature/x"))
    drain(deliverer)
    recorded, merged = sorted(receiver.bodies(), key=lambda b: str(b["type"]))  # sent in any order
    assert (recorded["type"], recorded["data"]["record_id"]) == ("attempt.recorded", on_branch)
    assert recorded["data"]["repository"] == f"{REPO}:feature/x"
    assert merged["type"] == "branch.merged"
    assert merged["data"]["repository"] == REPO
    assert (merged["data"]["entry"]["seq"], merged["data"]["entry"]["hash"]) == (
        report.merge.seq,
        report.merge.hash,
    )
    record = merged["data"]["record"]
    assert (record["source"], record["source_seq"]) == (f"{REPO}:feature/x", report.source_head.seq)
