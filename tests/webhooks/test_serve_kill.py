"""A real `mentis serve --http` killed with SIGKILL after a record committed and before its
webhook was delivered: the restarted server delivers it, exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Memory
from mentis.service.tokens import TokenStore
from tests.conftest import MENTIS

from .conftest import REPO, Receiver, subscribe


def _serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server and read its stderr up to the banner naming its URL."""
    with log.open("wb") as err:
        process = subprocess.Popen([*MENTIS, "serve", "--http", "127.0.0.1:0"], env=env, stderr=err)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = log.read_text()
        if "harness config:" in text:
            return process, text.split("serving HTTP on ", 1)[1].split()[0]
        assert process.poll() is None, text
        time.sleep(0.05)
    process.kill()
    raise AssertionError(log.read_text())


def _delivered(settings: Settings) -> list[str]:
    memory = Memory.open(settings, HashEmbedder())
    try:
        return [d.state for d in memory.store.outbox_rows(None, None, 10)]
    finally:
        memory.close()


def test_a_delivery_committed_before_a_sigkill_arrives_exactly_once_after_the_restart(
    tmp_path: Path, mentis_env: dict[str, str], db_path: Path, receiver: Receiver
) -> None:
    settings = Settings(home=db_path.parent, db_path=db_path, embedder="hash")
    memory = Memory.open(settings, HashEmbedder())
    tokens = TokenStore.open(settings)
    try:
        subscribe(memory, tokens, receiver)
    finally:
        tokens.close()
        memory.close()
    admin = TokenStore(db_path)
    token, _ = admin.create(scope="write", repositories=("*",))
    admin.close()
    # the first server polls the outbox once at start, then not for an hour: it cannot deliver
    first, url = _serve({**mentis_env, "MENTIS_WEBHOOK_POLL_S": "3600"}, tmp_path / "first.log")
    try:
        answer = httpx.post(
            f"{url}/v1/record_attempt",
            headers={"Authorization": f"Bearer {token}"},
            json={"repository": REPO, "task_id": "t", "action": "a", "observation": "o"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        attempt_id = answer.json()["attempt_id"]
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL and receiver.requests == []
    assert _delivered(settings) == ["pending"]

    second, _ = _serve({**mentis_env, "MENTIS_WEBHOOK_POLL_S": "0.05"}, tmp_path / "second.log")
    try:
        with receiver.got:
            assert receiver.got.wait_for(lambda: receiver.requests, timeout=30)
        deadline = time.monotonic() + 30
        while _delivered(settings) != ["delivered"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _delivered(settings) == ["delivered"]
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    (body,) = receiver.bodies()
    assert body["data"]["record_id"] == attempt_id
    assert len(receiver.requests) == 1
