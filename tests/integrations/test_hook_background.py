"""The background server hooks share when hooks.toml names none: one real `mentis serve --http
unix:…` per user and store, started by the first hook that needs it, on a private socket; kept
single by its lock, replaced when it crashed, ran another version or serves a replaced store file,
and gone after its idle period. Every hook here is the real `mentis hook` command."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from mentis.errors import ConfigError
from mentis.integrations.hooks.background import Client, UnixConnection

from .hook_helpers import (
    attempts,
    env_for,
    errors,
    hook,
    make_repo,
    mentis,
    servers,
    stop_servers,
    wait_until,
)

START_S = 60.0
"""Bound on waits that include a server's start (imports and the store's verification)."""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "shop", remote="git@github.com:acme/shop.git")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "hooks.toml").write_text("[context]\nmin_similarity = 0.2\n")
    return home


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    return env_for(home)


def check(cwd: Path, output: str = "invoice rounding is off by a cent", code: int = 1) -> dict[str, Any]:
    return {
        "cwd": str(cwd),
        "hook_event_name": "PostToolUseFailure",
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q"},
        "error": f"Exit code {code}\n{output}",
    }


def ask(cwd: Path, prompt: str = "invoice rounding") -> dict[str, Any]:
    return {"cwd": str(cwd), "hook_event_name": "UserPromptSubmit", "prompt": prompt}


def context(done: subprocess.CompletedProcess[str]) -> str:
    assert (done.returncode, done.stderr) == (0, "")
    return str(json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"])


def socket_of(home: Path) -> Path:
    [path] = (home / "run").glob("*.sock")
    return path


def health(home: Path) -> dict[str, object]:
    client = Client(UnixConnection(socket_of(home), timeout=START_S))
    try:
        return client.health()
    finally:
        client.close()


def test_the_first_hook_starts_a_server_on_a_private_socket_that_later_hooks_of_any_harness_reuse(
    repo: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    assert servers(tmp_path) == []
    assert hook(env, "claude-code", "post-tool-use", check(repo), repo).returncode == 0
    [pid] = servers(tmp_path)  # the hook returned; the server it started stays
    assert "invoice rounding" in context(hook(env, "claude-code", "user-prompt-submit", ask(repo), repo))
    codex = {**ask(repo), "session_id": "thread-2"}
    assert "invoice rounding" in context(hook(env, "codex", "user-prompt-submit", codex, repo))
    assert servers(tmp_path) == [pid]
    sock = socket_of(home)
    assert stat.S_ISSOCK(sock.lstat().st_mode) and stat.S_IMODE(sock.lstat().st_mode) == 0o600
    assert stat.S_IMODE((home / "run").lstat().st_mode) == 0o700
    assert stat.S_IMODE(Path(f"{sock}.lock").lstat().st_mode) == 0o600
    assert health(home)["pid"] == pid
    [a] = attempts(env)
    assert (a["agent_id"], a["status"]) == ("claude-code", "failed")  # the hook's harness, not the server's
    assert errors(home) == []


def test_a_hook_names_the_agent_from_mentis_agent_id_and_the_server_refuses_a_malformed_name(
    repo: Path, home: Path, env: dict[str, str]
) -> None:
    done = hook({**env, "MENTIS_AGENT_ID": "alice-laptop"}, "claude-code", "post-tool-use", check(repo), repo)
    assert done.returncode == 0 and errors(home) == []
    assert [a["agent_id"] for a in attempts(env)] == ["alice-laptop"]
    client = Client(UnixConnection(socket_of(home), timeout=START_S), agent="not an agent")
    try:
        status, answer = client.request("POST", "/v1/verify_integrity", {})
    finally:
        client.close()
    assert status == 422 and isinstance(answer, dict)
    assert answer["error"]["field"] == "X-Mentis-Agent"


def test_a_hook_killed_between_taking_the_lock_and_starting_the_server_leaves_it_to_the_next(
    repo: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    hook(env, "claude-code", "post-tool-use", check(repo), repo)
    stop_servers(tmp_path)
    [name] = {p.name for p in (home / "run").glob("*.lock")}
    sock = home / "run" / name.removesuffix(".lock")
    # what such a hook has done when SIGKILL lands: the lock taken, the socket bound, no server yet
    claim_then_die = (
        "import os, signal, sys; from pathlib import Path; "
        "from mentis.integrations.hooks.background import claim; "
        "assert claim(Path(sys.argv[1])) is not None; os.kill(os.getpid(), signal.SIGKILL)"
    )
    died = subprocess.run([sys.executable, "-c", claim_then_die, str(sock)], env=env, check=False)
    assert died.returncode == -signal.SIGKILL and sock.exists()  # a stale socket, a free lock
    assert "invoice rounding" in context(hook(env, "claude-code", "user-prompt-submit", ask(repo), repo))
    assert len(servers(tmp_path)) == 1 and errors(home) == []


def test_a_killed_server_is_replaced_by_the_next_hook(
    repo: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    hook(env, "claude-code", "post-tool-use", check(repo), repo)
    [crashed] = servers(tmp_path)
    os.kill(crashed, signal.SIGKILL)
    wait_until(lambda: servers(tmp_path) == [], START_S, "the killed server gone")
    assert socket_of(home).exists()  # it could not remove its socket
    assert "invoice rounding" in context(hook(env, "claude-code", "user-prompt-submit", ask(repo), repo))
    [replacement] = servers(tmp_path)
    assert replacement != crashed and errors(home) == []


def test_a_server_of_another_version_is_stopped_and_replaced(
    repo: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    hook(env, "claude-code", "post-tool-use", check(repo), repo)
    sock = socket_of(home)
    stop_servers(tmp_path)
    older = (
        "import sys, mentis.version; mentis.version.__version__ = '0.0.1'; "
        "sys.argv = ['mentis', 'serve', '--http', 'unix:' + sys.argv[1], '--idle-exit', '120']; "
        "from mentis.cli import main; main()"
    )
    old = subprocess.Popen(
        [sys.executable, "-c", older, str(sock)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: _answers(home), START_S, "the older server answering")
        assert health(home)["version"] == "0.0.1"
        assert "invoice rounding" in context(hook(env, "claude-code", "user-prompt-submit", ask(repo), repo))
        assert old.wait(timeout=START_S) == -signal.SIGTERM  # it was asked to stop, and did
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()
    [current] = servers(tmp_path)
    assert health(home)["version"] != "0.0.1" and health(home)["pid"] == current
    assert errors(home) == []


def _answers(home: Path) -> bool:
    try:
        health(home)
    except (OSError, ValueError):
        return False
    return True


def test_a_deleted_store_file_restarts_the_server_on_the_new_file(
    repo: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    synchronous = {**env, "MENTIS_HOOK_DETACH": "0"}
    hook(synchronous, "claude-code", "post-tool-use", check(repo), repo)
    [first] = servers(tmp_path)
    for name in ("mentis.db", "mentis.db-wal", "mentis.db-shm"):
        (home / name).unlink(missing_ok=True)
    hook(synchronous, "claude-code", "post-tool-use", check(repo, "a new store"), repo)
    assert [a["observation"] for a in attempts(env)] == ["`pytest -q` failed (exit 1): a new store"]
    [second] = servers(tmp_path)
    assert second != first and errors(home) == []


def open_files(pid: int) -> set[str] | None:
    """The files ``pid`` holds open (from /proc), or None once it has let go of them all (ending)."""
    found = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):  # closed while we looked
                found.add(os.readlink(fd))
    except OSError:
        return None
    return found or None


def test_the_server_exits_after_its_idle_period_and_removes_its_socket(
    repo: Path, home: Path, tmp_path: Path
) -> None:
    env = env_for(home, MENTIS_HOOK_IDLE_S="3")
    assert hook(env, "claude-code", "user-prompt-submit", ask(repo), repo).returncode == 0
    [first] = servers(tmp_path)
    sock = socket_of(home)
    # while it shuts down it still holds the lock: no next server can start beside it
    unlocked_while_alive = []
    while (held := open_files(first)) is not None:
        if not sock.exists() and str(Path(f"{sock}.lock").resolve()) not in held:
            unlocked_while_alive.append(sorted(held))
        time.sleep(0.001)
    assert unlocked_while_alive == []
    wait_until(lambda: servers(tmp_path) == [], START_S, "the idle server gone")
    assert list((home / "run").glob("*.sock")) == []
    hook(env, "claude-code", "user-prompt-submit", ask(repo), repo)
    assert servers(tmp_path) not in ([], [first])
    assert errors(home) == []


def test_session_start_with_nothing_to_ask_starts_the_server_for_the_first_prompt(
    tmp_path: Path, home: Path, env: dict[str, str]
) -> None:
    main = make_repo(tmp_path / "shop", branch="main")
    start = {"cwd": str(main), "hook_event_name": "SessionStart", "source": "startup"}
    done = hook(env, "claude-code", "session-start", start, main)
    assert (done.returncode, done.stdout) == (0, "")
    wait_until(lambda: _answers(home), START_S, "the warmed server answering")
    [pid] = servers(tmp_path)
    hook(env, "claude-code", "user-prompt-submit", ask(main), main)
    assert servers(tmp_path) == [pid] and errors(home) == []


def test_a_second_server_on_the_same_socket_is_refused(
    repo: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    hook(env, "claude-code", "post-tool-use", check(repo), repo)
    done = mentis(env, "serve", "--http", f"unix:{socket_of(home)}", cwd=repo)
    assert done.returncode == ConfigError.exit_code
    assert "another mentis server serves" in done.stderr
    assert len(servers(tmp_path)) == 1


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--tls-cert", "c.pem", "--tls-key", "k.pem"],
            ConfigError.exit_code,
            "a unix socket serves the local",
        ),
        (["--allow-host", "example.com"], ConfigError.exit_code, "a unix socket serves the local user"),
        (["--lock-fd", "3"], 2, "--lock-fd and --socket-fd go together"),
    ],
)
def test_serve_on_a_unix_socket_refuses_options_it_cannot_honour(
    args: list[str], code: int, message: str, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    done = mentis(env, "serve", "--http", f"unix:{tmp_path / 's.sock'}", *args, cwd=tmp_path)
    assert done.returncode == code and message in done.stderr
    assert not (tmp_path / "s.sock").exists() and servers(tmp_path) == []


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"MENTIS_HOOK_IDLE_S": "soon"}, "MENTIS_HOOK_IDLE_S must be a number from 1 to 604800"),
        ({"MENTIS_HOOK_IDLE_S": "0"}, "MENTIS_HOOK_IDLE_S must be a number from 1 to 604800"),
        ({}, "[background].idle_s must be a number from 1 to 604800"),
    ],
)
def test_a_bad_idle_period_is_logged_and_starts_nothing(
    setting: dict[str, str], message: str, repo: Path, home: Path, tmp_path: Path
) -> None:
    if not setting:
        (home / "hooks.toml").write_text("[background]\nidle_s = -5\n")
    done = hook(env_for(home, **setting), "claude-code", "user-prompt-submit", ask(repo), repo)
    assert (done.returncode, done.stdout) == (0, "")
    [line] = errors(home)
    assert message in line["error"]
    assert servers(tmp_path) == [] and not (home / "run").exists()


def test_a_run_directory_that_is_a_link_is_refused(repo: Path, home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (home / "run").symlink_to(elsewhere)
    done = hook(env_for(home), "claude-code", "user-prompt-submit", ask(repo), repo)
    assert (done.returncode, done.stdout) == (0, "")
    [line] = errors(home)
    assert "must be a directory owned by you (not a link)" in line["error"]
    assert list(elsewhere.iterdir()) == [] and servers(tmp_path) == []


def test_a_store_whose_socket_path_is_too_long_for_the_system_is_reached_through_its_directory(
    repo: Path, tmp_path: Path
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True, mode=0o700)
    (deep / "hooks.toml").write_text("[context]\nmin_similarity = 0.2\n")
    env = env_for(deep)
    hook(env, "claude-code", "post-tool-use", check(repo), repo)
    assert "invoice rounding" in context(hook(env, "claude-code", "user-prompt-submit", ask(repo), repo))
    assert len(os.fsencode(socket_of(deep))) > 108 and len(servers(tmp_path)) == 1
    assert errors(deep) == []
