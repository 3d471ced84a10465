"""Claude Code hooks end to end: payloads made here, fed to the real `mentis hook` command on a real
git checkout and a real store; the attempt recorded and the context surfaced are read back."""

from __future__ import annotations

import base64
import json
import random
import string
from pathlib import Path
from typing import Any

import pytest

from .hook_helpers import attempts, env_for, errors, git, hash_object, hook, make_repo, mentis

REPO = "github.com/acme/shop"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "shop", remote="https://github.com/acme/shop.git")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    # the hash embedder scores shared words, not meaning: a lower bar than the real model's default
    (home / "hooks.toml").write_text("[context]\nmin_similarity = 0.2\n")
    return home


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    return env_for(home)


def failed_bash(repo: Path, command: str, code: int, output: str) -> dict[str, Any]:
    return {
        "session_id": "sess-1",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": str(repo),
        "permission_mode": "default",
        "hook_event_name": "PostToolUseFailure",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "run the tests"},
        "tool_use_id": "toolu_01",
        "error": f"Exit code {code}\n{output}",
        "is_interrupt": False,
    }


def passed_bash(repo: Path, command: str, stdout: str) -> dict[str, Any]:
    return {
        "session_id": "sess-1",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": str(repo),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_response": {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False},
        "tool_use_id": "toolu_02",
    }


def prompt(repo: Path, text: str) -> dict[str, Any]:
    return {"session_id": "sess-1", "cwd": str(repo), "hook_event_name": "UserPromptSubmit", "prompt": text}


def context_of(done: Any) -> str:
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["hookSpecificOutput"]["hookEventName"] in ("UserPromptSubmit", "SessionStart")
    text: str = out["hookSpecificOutput"]["additionalContext"]
    return text


def test_a_failed_check_is_recorded_under_the_branch_with_exit_code_output_files_and_git_context(
    repo: Path, env: dict[str, str], home: Path
) -> None:
    (repo / "cart.py").write_text("def total(items):\n    return sum(items) + 0.01\n")
    (repo / "test_cart.py").write_text("def test_total(): assert 1\n")
    output = "collected 1 item\nFAILED test_cart.py::test_total - assert 3.01 == 3\n1 failed in 0.02s"
    done = hook(
        env, "claude-code", "post-tool-use", failed_bash(repo, ".venv/bin/pytest -q", 1, output), repo
    )
    assert (done.returncode, done.stdout, errors(home)) == (0, "", [])
    [a] = attempts(env, repo)
    assert a == {
        "task_id": "fix/cart-rounding",
        "task_title": None,
        "agent_id": "claude-code",
        "status": "failed",
        "action": "ran `.venv/bin/pytest -q` after changing 2 files",
        "observation": "`.venv/bin/pytest -q` failed (exit 1): 1 failed in 0.02s",
        "files": json.dumps(["cart.py", "test_cart.py"], separators=(",", ":")),
        "check_command": ".venv/bin/pytest -q",
        "check_exit_code": 1,
        "check_output": output,
        "commit": git(repo, "rev-parse", "HEAD"),
        "branch": "fix/cart-rounding",
        "dirty": 1,
        "session_id": "sess-1",
        "tags": json.dumps(["hook", "claude-code"], separators=(",", ":")),
    }
    # the recorded blob ids are git's own: `mentis stale` finds the attempt once cart.py changes
    history = json.loads(
        mentis(env, "recall", "-r", REPO, "-t", "fix/cart-rounding", "--json", cwd=repo).stdout
    )
    assert history["rows"][0][history["columns"].index("status")] == "failed"


def test_task_start_names_the_task_and_the_next_attempt_lists_only_files_changed_since_the_last(
    repo: Path, env: dict[str, str]
) -> None:
    (repo / "cart.py").write_text("v2\n")
    hook(env, "claude-code", "post-tool-use", failed_bash(repo, "pytest", 1, "1 failed"), repo)
    done = mentis(env, "task", "start", "CART-12", "--title", "cart total off by a cent", "--json", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["task_id"] == "CART-12"
    (repo / "tax.py").write_text("RATE = 0.2\n")
    hook(env, "claude-code", "post-tool-use", failed_bash(repo, "pytest", 1, "1 failed"), repo)
    (repo / "cart.py").write_text("v3\n")
    hook(env, "claude-code", "post-tool-use", passed_bash(repo, "pytest -q", "3 passed in 0.1s"), repo)
    got = [(a["task_id"], a["task_title"], a["status"], json.loads(a["files"])) for a in attempts(env, repo)]
    assert got == [
        ("fix/cart-rounding", None, "failed", ["cart.py"]),
        ("CART-12", "cart total off by a cent", "failed", ["cart.py", "tax.py"]),  # a new task diffs vs HEAD
        ("CART-12", "cart total off by a cent", "passed", ["cart.py"]),
    ]


def test_files_committed_between_two_checks_count_as_changed_since_the_last_attempt(
    repo: Path, env: dict[str, str]
) -> None:
    hook(env, "claude-code", "post-tool-use", passed_bash(repo, "make test", "ok"), repo)
    (repo / "README.md").write_text("shop, now documented\n")
    git(repo, "commit", "-q", "-am", "docs")
    hook(env, "claude-code", "post-tool-use", passed_bash(repo, "make test", "ok"), repo)
    assert [json.loads(a["files"]) for a in attempts(env, repo)] == [[], ["README.md"]]


@pytest.mark.parametrize(
    "command",
    ["ls -la", "git status", "cat pytest.ini", "grep -r pytest .", "echo make test", "vim cart.py"],
)
def test_commands_that_are_not_checks_record_nothing(repo: Path, env: dict[str, str], command: str) -> None:
    done = hook(env, "claude-code", "post-tool-use", passed_bash(repo, command, "output"), repo)
    assert (done.returncode, done.stdout) == (0, "")
    assert attempts(env, repo) == []


def test_checks_are_recognised_inside_compound_commands_and_behind_wrappers(
    repo: Path, env: dict[str, str]
) -> None:
    for command in ["cd sub && uv run pytest -x", "FOO=1 npm run test", "go test ./...", "ruff check src"]:
        hook(env, "claude-code", "post-tool-use", passed_bash(repo, command, "ok"), repo)
    assert [a["check_command"] for a in attempts(env, repo)] == [
        "cd sub && uv run pytest -x",
        "FOO=1 npm run test",
        "go test ./...",
        "ruff check src",
    ]


def test_other_tools_and_interrupted_commands_record_nothing(repo: Path, env: dict[str, str]) -> None:
    edit = {
        "cwd": str(repo),
        "hook_event_name": "PostToolUse",
        "tool_name": "Edit",
        "tool_input": {"file_path": "cart.py"},
        "tool_response": {"success": True},
    }
    interrupted = passed_bash(repo, "pytest", "")
    interrupted["tool_response"]["interrupted"] = True
    for payload in (edit, interrupted):
        assert hook(env, "claude-code", "post-tool-use", payload, repo).returncode == 0
    assert attempts(env, repo) == []


def test_the_output_tail_is_scrubbed_of_secrets_and_capped(
    repo: Path, env: dict[str, str], home: Path
) -> None:
    (home / "hooks.toml").write_text("[record]\noutput_tail_chars = 500\n")
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    output = "\n".join(f"line {i}" for i in range(400)) + f"\nGITHUB_TOKEN={secret}\nFAILED: 1 failed"
    hook(env, "claude-code", "post-tool-use", failed_bash(repo, f"GH={secret} pytest", 1, output), repo)
    [a] = attempts(env, repo)
    assert secret not in json.dumps(a)
    assert "REDACTED" in a["check_output"] and "REDACTED" in a["check_command"]
    assert len(a["check_output"]) <= 500 and a["check_output"].endswith("FAILED: 1 failed")


def test_secrets_the_second_review_found_in_a_failing_checks_output_are_not_stored(
    repo: Path, env: dict[str, str]
) -> None:
    rng = random.Random(24)

    def rand(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n - 1)) + "7"

    b64 = base64.b64encode(rand(24).encode()).decode()
    secrets = {
        "mentis_token": f"mentis_{rand(12, '0123456789abcdef')}_{rand(43)}",
        "env_secret": rand(9),
        "azure_storage_key": rand(86) + "==",
        "netrc_password": rand(12),
        "mysql_password": rand(10),
        "curl_user_password": rand(12),
        "cli_secret_flag": rand(12),
        "sendgrid_key": f"SG.{rand(22)}.{rand(43)}",
        "kubernetes_secret": b64,
    }
    output = f"""FAILED tests/test_deploy.py::test_release - AssertionError
E   subprocess.CalledProcessError: Command 'curl -u deploy:{secrets["curl_user_password"]} https://ci' failed
----------------------------- Captured stdout call -----------------------------
MENTIS_TOKEN={secrets["mentis_token"]}
DB_HOST=db DB_PASS={secrets["env_secret"]} DB_NAME=shop
AccountName=shop;AccountKey={secrets["azure_storage_key"]};EndpointSuffix=core.windows.net
machine api.example.com login deploy password {secrets["netrc_password"]}
+ mysql -u root -p{secrets["mysql_password"]} shop
+ pg-wrapper --password {secrets["cli_secret_flag"]}
sendgrid key {secrets["sendgrid_key"]}
apiVersion: v1
kind: Secret
data:
  password: {secrets["kubernetes_secret"]}
1 failed in 0.31s"""
    hook(
        env,
        "claude-code",
        "post-tool-use",
        failed_bash(repo, "pytest -q tests/test_deploy.py", 1, output),
        repo,
    )
    [a] = attempts(env, repo)
    stored = json.dumps(a)
    assert {kind: secret in stored for kind, secret in secrets.items()} == dict.fromkeys(secrets, False)
    assert a["check_output"].count("[REDACTED:") == len(secrets)
    assert a["check_output"].endswith("1 failed in 0.31s")


def test_a_prompt_surfaces_related_attempts_with_status_correction_and_stale_files(
    repo: Path, env: dict[str, str]
) -> None:
    (repo / "cart.py").write_text("def total(items):\n    return round(sum(items), 2)\n")
    output = "FAILED test_cart.py::test_total rounding of the cart total is off by one cent"
    hook(env, "claude-code", "post-tool-use", failed_bash(repo, "pytest tests/test_cart.py", 1, output), repo)
    [a] = json.loads(mentis(env, "recall", "select attempt_id from attempts", "--json", cwd=repo).stdout)[
        "rows"
    ]
    done = mentis(env, "outdated", "-r", REPO, a[0], "--reason", "the rounding moved to tax.py", cwd=repo)
    assert done.returncode == 0, done.stderr
    (repo / "cart.py").write_text("def total(items):\n    return sum(items)\n")

    text = context_of(
        hook(
            env,
            "claude-code",
            "user-prompt-submit",
            prompt(repo, "cart total rounding off by one cent"),
            repo,
        )
    )
    assert "task `fix/cart-rounding`" in text
    assert "[failed]" in text
    assert "OUTDATED" in text and "the rounding moved to tax.py" in text
    assert "stale: changed since it ran: cart.py" in text


def test_a_prompt_about_something_else_gets_no_context_at_all(repo: Path, env: dict[str, str]) -> None:
    hook(
        env,
        "claude-code",
        "post-tool-use",
        failed_bash(repo, "pytest", 1, "cart total rounding failed"),
        repo,
    )
    done = hook(
        env, "claude-code", "user-prompt-submit", prompt(repo, "upgrade the kubernetes ingress chart"), repo
    )
    assert (done.returncode, done.stdout) == (0, "")


def test_session_start_searches_with_the_current_task_and_stays_silent_on_main(
    repo: Path, env: dict[str, str], tmp_path: Path
) -> None:
    hook(
        env,
        "claude-code",
        "post-tool-use",
        failed_bash(repo, "pytest", 1, "invoice pdf export crashes on unicode"),
        repo,
    )
    mentis(env, "task", "start", "INV-7", "--title", "invoice pdf export unicode crash", cwd=repo)
    start = {"session_id": "s2", "cwd": str(repo), "hook_event_name": "SessionStart", "source": "startup"}
    assert "invoice pdf export" in context_of(hook(env, "claude-code", "session-start", start, repo))

    other = make_repo(tmp_path / "other", branch="main")
    start["cwd"] = str(other)
    done = hook(env, "claude-code", "session-start", start, other)
    assert (done.returncode, done.stdout) == (0, "")


def test_the_context_stays_within_the_token_budget(repo: Path, env: dict[str, str], home: Path) -> None:
    for n in range(6):
        git(repo, "checkout", "-q", "-b", f"task-{n}")
        hook(
            env,
            "claude-code",
            "post-tool-use",
            failed_bash(repo, "pytest", 1, f"checkout flow timeout {n}"),
            repo,
        )
    (home / "hooks.toml").write_text("[context]\nmin_similarity = 0.2\nbudget_tokens = 200\nlimit = 6\n")
    text = context_of(
        hook(env, "claude-code", "user-prompt-submit", prompt(repo, "checkout flow timeout"), repo)
    )
    assert len(text) <= 200 * 4
    assert 1 <= text.count("- task `") < 6
    (home / "hooks.toml").write_text("[context]\nmin_similarity = 0.2\nlimit = 6\n")
    text = context_of(
        hook(env, "claude-code", "user-prompt-submit", prompt(repo, "checkout flow timeout"), repo)
    )
    assert text.count("- task `") == 6


def test_recorded_file_hashes_equal_git_hash_object(repo: Path, env: dict[str, str], home: Path) -> None:
    (repo / "cart.py").write_text("changed\n")
    hook(env, "claude-code", "post-tool-use", passed_bash(repo, "pytest", "1 passed"), repo)
    stale = json.loads(mentis(env, "stale", "-r", REPO, "--json", cwd=repo).stdout)
    assert stale["attempts"] == [] and stale["passed_checked"] == 1
    recorded = hash_object(repo, "cart.py")["cart.py"]
    (repo / "cart.py").write_text("changed again\n")
    stale = json.loads(mentis(env, "stale", "-r", REPO, "--json", cwd=repo).stdout)
    assert [c["recorded"] for c in stale["attempts"][0]["changed"]] == [recorded]


@pytest.mark.slow
def test_with_the_real_model_and_the_default_threshold_a_paraphrase_is_surfaced_and_another_subject_is_not(
    repo: Path, home: Path
) -> None:
    (home / "hooks.toml").unlink()  # the shipped threshold
    env = env_for(home, MENTIS_EMBEDDER="local")
    output = "FAILED tests/test_cart.py::test_coupon_total - cart total is off by one cent with a coupon"
    hook(env, "claude-code", "post-tool-use", failed_bash(repo, "pytest tests/test_cart.py", 1, output), repo)
    ask = "the basket sum is a penny wrong when a discount code is used"
    text = context_of(hook(env, "claude-code", "user-prompt-submit", prompt(repo, ask), repo))
    assert "task `fix/cart-rounding`" in text
    done = hook(
        env,
        "claude-code",
        "user-prompt-submit",
        prompt(repo, "upgrade the kubernetes ingress helm chart"),
        repo,
    )
    assert (done.returncode, done.stdout, errors(home)) == (0, "", [])


def test_in_a_tree_of_more_than_1000_files_stale_files_are_still_named(
    repo: Path, env: dict[str, str]
) -> None:
    (repo / "gen").mkdir()
    for n in range(1001):
        (repo / "gen" / f"f{n}.txt").write_text(f"{n}\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "many files")
    (repo / "cart.py").write_text("def total(items):\n    return round(sum(items), 2)\n")
    output = "FAILED test_cart.py::test_total rounding of the cart total is off by one cent"
    hook(env, "claude-code", "post-tool-use", failed_bash(repo, "pytest", 1, output), repo)
    (repo / "cart.py").write_text("def total(items):\n    return sum(items)\n")
    ask = prompt(repo, "cart total rounding off by one cent")
    assert "stale: changed since it ran: cart.py" in context_of(
        hook(env, "claude-code", "user-prompt-submit", ask, repo)
    )
