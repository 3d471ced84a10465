"""A small store with what every dashboard page shows: two repositories, tasks with passed, failed
and corrected attempts, a forgotten attempt, and thoughts linked by a Supersedes relation."""

from __future__ import annotations

from dataclasses import dataclass

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput
from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput
from mentis.service.memory import Caller, Memory

SHOP = "github.com/acme/shop"
BILLING = "github.com/acme/billing"
SECRET_REPO = "github.com/umbrella/vault"
LOGIN_TASK = "login-timeout"


@dataclass
class Seeded:
    corrected: str
    other: str
    forgotten: str
    thought: str
    superseding: str
    vault_task: str = "vault-rotation"


def _attempt(memory: Memory, caller: Caller, repo: str, task: str, **fields: object) -> str:
    data: dict[str, object] = {"repository": repo, "task_id": task, "files": ["src/app.py"], **fields}
    return memory.record_attempt(caller, parse(RecordAttemptInput, data)).attempt_id


def seed(memory: Memory) -> Seeded:
    alice = Caller(agent_id="alice-agent")
    bob = Caller(agent_id="bob-agent")
    corrected = _attempt(
        memory,
        alice,
        SHOP,
        LOGIN_TASK,
        task_title="Users are logged out after five minutes",
        action="Raised the session cookie max-age from 300 to 3600 seconds in settings.py",
        observation="Users still got logged out after five minutes of inactivity",
        inference="The cookie lifetime is not what ends the session; the server-side store expires it",
        check={
            "command": "pytest tests/test_session.py",
            "status": "failed",
            "exit_code": 1,
            "output": "FAILED tests/test_session.py::test_idle_session - AssertionError",
        },
        code_context={"commit": "a" * 40, "file_hashes": {"src/app.py": "1" * 40}},
    )
    memory.mark_conclusion_outdated(
        bob,
        parse(
            MarkOutdatedInput,
            {
                "repository": SHOP,
                "attempt_id": corrected,
                "reason": "Redis was evicting session keys under memory pressure; the cookie was fine",
            },
        ),
    )
    other = _attempt(
        memory,
        bob,
        SHOP,
        LOGIN_TASK,
        action="Set maxmemory-policy to volatile-lru and gave Redis 512 MB",
        observation="Idle sessions now survive for the full hour",
        inference="Session keys were being evicted by allkeys-lru",
        check={"command": "pytest tests/test_session.py", "status": "passed", "exit_code": 0},
        code_context={"commit": "b" * 40, "file_hashes": {"src/app.py": "2" * 40}},
    )
    forgotten = _attempt(
        memory,
        alice,
        SHOP,
        LOGIN_TASK,
        action="Pasted the production Redis URL into the notes",
        observation="It held a password",
    )
    memory.forget_attempt(
        alice,
        parse(ForgetInput, {"repository": SHOP, "attempt_id": forgotten, "reason": "held a credential"}),
    )
    for i in range(3):
        _attempt(
            memory,
            bob,
            SHOP,
            f"checkout-{i}",
            task_title=f"Checkout step {i} is slow",
            action=f"Profiled checkout step {i}",
            observation="Most time is spent in tax lookup",
        )
    _attempt(
        memory,
        alice,
        BILLING,
        "invoice-pdf",
        task_title="Invoice PDFs render blank",
        action="Upgraded weasyprint",
        observation="PDFs render again",
    )
    _attempt(
        memory,
        alice,
        SECRET_REPO,
        "vault-rotation",
        task_title="Umbrella vault key rotation",
        action="Rotated the umbrella vault keys",
        observation="The umbrella rotation worked",
    )
    thought = memory.append_thought(
        alice,
        parse(
            AppendThoughtInput,
            {
                "repository": SHOP,
                "type": "Hypothesis",
                "content": "Sessions expire because the cookie max-age is too short",
                "tags": ["sessions"],
            },
        ),
    ).thought_id
    superseding = memory.append_thought(
        bob,
        parse(
            AppendThoughtInput,
            {
                "repository": SHOP,
                "type": "Finding",
                "content": "Sessions expire because Redis evicts their keys under memory pressure",
                "tags": ["sessions", "redis"],
                "relations": [{"kind": "Supersedes", "target_id": thought}],
            },
        ),
    ).thought_id
    memory.append_thought(
        alice,
        parse(
            AppendThoughtInput,
            {"repository": SECRET_REPO, "type": "Decision", "content": "Umbrella vault keys rotate monthly"},
        ),
    )
    return Seeded(
        corrected=corrected, other=other, forgotten=forgotten, thought=thought, superseding=superseding
    )
