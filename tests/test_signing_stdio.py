"""Local signing end to end, on both stores: `mentis agent keygen` makes a real key (a 0600 file,
never printed), a `mentis serve` over real stdio with ``MENTIS_SIGNING_KEY`` signs its agent's
writes, one without it is refused, and `mentis verify-integrity --signatures` verifies them all."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from mentis.config import Settings
from mentis.ledger import signing
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Memory
from tests.backends import backend_settings

from .conftest import REPO

MENTIS = [sys.executable, "-m", "mentis"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store_settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    return backend_settings(backend, tmp_path, request)


def env_for(settings: Settings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MENTIS_")}
    env.update(MENTIS_HOME=str(settings.home), MENTIS_DB=str(settings.db_path), MENTIS_EMBEDDER="hash")
    if settings.database_url:
        env["MENTIS_DATABASE_URL"] = settings.database_url
    env.update(extra)
    return env


def ledger(settings: Settings) -> list[Any]:
    """The store's ledger, read by a Memory that opens (and so verifies) it."""
    memory = Memory.open(settings, HashEmbedder())
    try:
        return list(memory.store.iter_ledger())
    finally:
        memory.close()


ATTEMPT = {
    "repository": REPO,
    "task_id": "signed-task",
    "action": "ran the suite with the signing key loaded",
    "files": ["src/app.py"],
    "observation": "the write came back with its ledger position",
}


async def _call(env: dict[str, str], tool: str, args: dict[str, Any]) -> Any:
    params = StdioServerParameters(command=sys.executable, args=["-m", "mentis", "serve"], env=env)
    with anyio.fail_after(60):
        async with Client(params) as client:
            return await client.call_tool(tool, args)


@pytest.mark.anyio
async def test_keygen_then_a_stdio_server_with_the_key_signs_its_agents_writes(
    store_settings: Settings, tmp_path: Path
) -> None:
    key_file = tmp_path / "keys" / "alice.pem"
    made = subprocess.run(
        [*MENTIS, "agent", "keygen", "--agent", "alice", "--out", str(key_file), "--json"],
        env=env_for(store_settings),
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr.decode()
    printed = json.loads(made.stdout)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    pem = key_file.read_bytes()
    secret_line = pem.splitlines()[1]  # the base64 of the private key
    assert secret_line not in made.stdout and secret_line not in made.stderr
    key = signing.parse_private_pem(pem)
    assert printed == {
        "agent_id": "alice",
        "key_id": signing.key_id_of(key.public_key()),
        "path": str(key_file),
        "env": f"MENTIS_SIGNING_KEY={key_file}",
    }

    # without the key, alice's writes are refused and nothing is written
    before = ledger(store_settings)
    refused = await _call(env_for(store_settings, MENTIS_AGENT_ID="alice"), "record_attempt", ATTEMPT)
    assert refused.is_error
    assert "[forbidden]" in refused.content[0].text and "must be signed" in refused.content[0].text
    assert len(ledger(store_settings)) == len(before)

    # with it (and no MENTIS_AGENT_ID: the key's agent is the process's), they are signed
    signed_env = env_for(store_settings, MENTIS_SIGNING_KEY=str(key_file))
    done = await _call(signed_env, "record_attempt", ATTEMPT)
    assert not done.is_error, done.content[0].text
    attempt_id = done.structured_content["attempt_id"]
    entry = next(e for e, _ in ledger(store_settings) if e.id == attempt_id)
    assert (entry.agent, entry.key_id) == ("alice", printed["key_id"])
    fields = signing.Unsigned(entry.chain, entry.kind, entry.id, entry.at, entry.agent, entry.body_hash)
    assert entry.sig is not None
    assert signing.verify_envelope(fields, entry.key_id, entry.sig, key.public_key())

    verified = subprocess.run(
        [*MENTIS, "verify-integrity", "--signatures", "--json"],
        env=env_for(store_settings),
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stderr.decode()
    assert json.loads(verified.stdout)["ok"] is True


def test_a_key_file_of_another_type_stops_serve_with_a_config_error(
    store_settings: Settings, tmp_path: Path
) -> None:
    bad = tmp_path / "not-a-key.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    ran = subprocess.run(
        [*MENTIS, "serve"],
        env=env_for(store_settings, MENTIS_SIGNING_KEY=str(bad)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert ran.returncode != 0
    assert b"not a PEM private key" in ran.stderr
    assert ran.stdout == b""  # stdout is the MCP channel: nothing but JSON-RPC, here nothing
