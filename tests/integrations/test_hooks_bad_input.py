"""Bad input to the hooks: each exits 0 with nothing on stdout, writes nothing, and appends one
JSON line naming the error to the hook error log. The other commands answer with a clear error."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from mentis.config import Settings
from mentis.integrations.hooks.recorder import wait_for_pending

from .hook_helpers import attempts, env_for, errors, hook, make_repo, mentis, servers, stop_servers


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "shop")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    return env_for(home)


def bash(cwd: Path | str, **override: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "cwd": str(cwd),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "pytest"},
        "tool_response": {"stdout": "1 passed", "stderr": "", "interrupted": False},
    }
    payload.update(override)
    return payload


CASES: list[tuple[str, str, str, Any, str]] = [
    ("not json", "claude-code", "post-tool-use", "this is not json", "not JSON"),
    ("a json list", "claude-code", "post-tool-use", "[1, 2]", "not a JSON object"),
    ("empty stdin", "claude-code", "user-prompt-submit", "", "not JSON"),
    ("no tool_name", "claude-code", "post-tool-use", {"cwd": "."}, "no 'tool_name'"),
    (
        "no command",
        "claude-code",
        "post-tool-use",
        {"tool_name": "Bash", "tool_input": {}},
        "no 'tool_input.command'",
    ),
    (
        "no prompt",
        "claude-code",
        "user-prompt-submit",
        {"hook_event_name": "UserPromptSubmit"},
        "no 'prompt'",
    ),
    ("wrong event", "claude-code", "post-tool-use", {"hook_event_name": "Stop"}, "expected PostToolUse"),
    ("unknown harness", "vim", "post-tool-use", {}, "unknown harness 'vim'; known: claude-code"),
    ("unknown event", "claude-code", "pre-commit", {}, "unknown hook event 'pre-commit'"),
    ("no hooks there", "claude-desktop", "post-tool-use", {}, "claude-desktop has no hook payload"),
]


@pytest.mark.parametrize(
    ("harness", "event", "stdin", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_malformed_payload_exits_0_writes_nothing_and_logs_one_line(
    repo: Path, env: dict[str, str], home: Path, harness: str, event: str, stdin: Any, message: str
) -> None:
    done = hook(env, harness, event, stdin, repo)
    assert (done.returncode, done.stdout) == (0, "")
    [line] = errors(home)
    assert set(line) == {"at", "harness", "event", "error"}
    assert (line["harness"], line["event"]) == (harness, event)
    assert message in line["error"]
    assert line["at"].endswith("Z") and line["at"][:2] == "20"
    assert attempts(env) == []
    assert (home / "logs" / "hook-errors.jsonl") == Settings(home=home, db_path=home / "x.db").hook_error_log


def test_a_hook_outside_a_git_checkout_exits_0_and_logs_it(
    tmp_path: Path, env: dict[str, str], home: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    done = hook(env, "claude-code", "post-tool-use", bash(plain), plain)
    assert (done.returncode, done.stdout) == (0, "")
    assert "not inside a git checkout" in errors(home)[0]["error"]
    assert attempts(env) == []


def test_a_store_that_cannot_be_opened_exits_0_and_logs_it(repo: Path, home: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = env_for(home, MENTIS_DB=str(blocker / "mentis.db"))
    done = hook(env, "claude-code", "post-tool-use", bash(repo), repo)
    assert (done.returncode, done.stdout) == (0, "")
    [line] = errors(home)
    assert str(blocker) in line["error"]


def test_a_store_edited_behind_the_servers_back_is_refused_when_it_starts_again_and_the_hook_exits_0(
    repo: Path, env: dict[str, str], home: Path, tmp_path: Path
) -> None:
    assert hook(env, "claude-code", "post-tool-use", bash(repo), repo).returncode == 0
    with sqlite3.connect(home / "mentis.db") as db:  # edit history behind Mentis's back
        db.execute("update entries set at = '2000-01-01T00:00:00.000000Z' where seq = 0")
    stop_servers(tmp_path)  # as its idle period would: the next hook starts one, which verifies
    done = hook(env, "claude-code", "post-tool-use", bash(repo), repo)
    assert (done.returncode, done.stdout) == (0, "")
    [line] = errors(home)
    assert "HTTP 500 integrity" in line["error"] and "seq 0 does not verify" in line["error"]
    with sqlite3.connect(home / "mentis.db") as db:
        assert db.execute("select count(*) from entries").fetchone() == (1,)


def test_a_check_recorded_while_the_store_is_locked_lands_once_the_lock_is_released(
    repo: Path, env: dict[str, str], home: Path
) -> None:
    assert hook(env, "claude-code", "post-tool-use", bash(repo), repo).returncode == 0
    locker = sqlite3.connect(home / "mentis.db", isolation_level=None)
    try:
        locker.execute("begin exclusive")
        done = mentis(env, "hook", "claude-code", "post-tool-use", cwd=repo, stdin=json.dumps(bash(repo)))
        assert (done.returncode, done.stdout) == (0, "")  # the harness did not wait for the lock
    finally:
        locker.close()
    wait_for_pending(home)  # the background child's call, once the server got the lock
    assert errors(home) == []
    assert len(attempts(env)) == 2


def test_a_broken_hooks_toml_is_reported_and_nothing_is_recorded(
    repo: Path, env: dict[str, str], home: Path
) -> None:
    (home / "hooks.toml").write_text("[checks\npatterns = 3")
    done = hook(env, "claude-code", "post-tool-use", bash(repo), repo)
    assert (done.returncode, done.stdout) == (0, "")
    assert "hooks.toml: not valid TOML" in errors(home)[0]["error"]
    assert attempts(env) == []


def test_the_error_log_is_private_to_its_owner(repo: Path, env: dict[str, str], home: Path) -> None:
    hook(env, "claude-code", "post-tool-use", "nope", repo)
    log = home / "logs" / "hook-errors.jsonl"
    assert oct(os.stat(log).st_mode & 0o777) == oct(0o600)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["task", "start", " padded "], "task_id"),
        (["task", "start", "T-1", "--title", "x" * 1001], "title"),
    ],
)
def test_task_start_rejects_bad_ids_and_titles(
    repo: Path, env: dict[str, str], args: list[str], message: str
) -> None:
    done = mentis(env, *args, cwd=repo)
    assert done.returncode == 2 and message in done.stderr


def test_task_start_outside_a_checkout_is_a_clear_error(
    tmp_path: Path, env: dict[str, str], home: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    done = mentis(env, "task", "start", "T-1", cwd=plain)
    assert done.returncode == 2 and "not inside a git checkout" in done.stderr
    assert not (home / "hooks").exists()


def test_task_stop_goes_back_to_the_branch(repo: Path, env: dict[str, str]) -> None:
    mentis(env, "task", "start", "T-1", cwd=repo)
    assert json.loads(mentis(env, "task", "show", "--json", cwd=repo).stdout)["task_id"] == "T-1"
    mentis(env, "task", "stop", cwd=repo)
    shown = json.loads(mentis(env, "task", "show", "--json", cwd=repo).stdout)
    assert (shown["task_id"], shown["branch"]) == (None, "fix/cart-rounding")


def test_output_with_nul_and_lone_surrogates_and_odd_file_names_is_still_recorded(
    repo: Path, env: dict[str, str], home: Path
) -> None:
    (repo / "name with\nnewline.py").write_text("x\n")
    (repo / "cart.py").write_text("changed\n")
    payload = json.dumps(bash(repo, tool_response={"stdout": "ok\x00\ud800 1 passed", "stderr": ""}))
    assert "\\ud800" in payload  # a lone surrogate, escaped as JSON allows
    done = hook(env, "claude-code", "post-tool-use", payload, repo)
    assert (done.returncode, done.stdout, errors(home)) == (0, "", [])
    [a] = attempts(env)
    assert a["check_output"] == "ok? 1 passed"
    assert json.loads(a["files"]) == ["cart.py"]


def test_with_local_hooks_forbidden_and_no_server_nothing_is_opened_or_recorded(
    repo: Path, home: Path
) -> None:
    env = env_for(home, MENTIS_HOOK_LOCAL="0")
    for event, payload in (
        ("post-tool-use", bash(repo)),
        ("user-prompt-submit", {"cwd": str(repo), "prompt": "cart total"}),
    ):
        done = hook(env, "claude-code", event, payload, repo)
        assert (done.returncode, done.stdout) == (0, "")
    assert [e["event"] for e in errors(home)] == ["post-tool-use", "user-prompt-submit"]
    assert all("MENTIS_HOOK_LOCAL=0" in e["error"] for e in errors(home))
    assert not (home / "mentis.db").exists()
    assert servers(home) == [] and not (home / "run").exists()
