"""Fixtures of the checkpoint tests: a store of each backend (``settings``, ``memory``), an operator
key registered with ``mentis agent keygen``'s service (``operator_key``), and helpers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mentis.api.attempts import RecordAttemptInput
from mentis.config import Settings
from mentis.service.agent_keys import create_agent_key
from mentis.service.memory import Caller, Memory
from tests.backends import backend_settings

REPO = "github.com/acme/shop"
OTHER = "github.com/acme/web"
ADMIN = Caller(agent_id="operator", admin=True)
WRITER = Caller(agent_id="writer")


@pytest.fixture
def settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    return backend_settings(backend, tmp_path / "store", request)


@pytest.fixture
def memory(open_memory: Callable[[], Memory]) -> Memory:
    return open_memory()


@pytest.fixture
def operator_key(memory: Memory, tmp_path: Path) -> Path:
    """A real Ed25519 operator key, registered to agent ``ops`` as `mentis agent keygen` does."""
    return create_agent_key(memory, ADMIN, "ops", tmp_path / "ops.pem").path


def record(memory: Memory, n: int, repository: str = REPO, what: str = "tried") -> list[str]:
    """``n`` attempts in ``repository``; their ids."""
    return [
        memory.record_attempt(
            WRITER,
            RecordAttemptInput(
                repository=repository, task_id=f"t{i}", action=f"{what} {i}", observation=f"saw {i}", files=[]
            ),
        ).attempt_id
        for i in range(n)
    ]
