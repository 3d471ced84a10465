"""Finding 8 of the second security review: a committed ``.mentis/hooks.toml`` took over capture.

Before, a project file's ``[checks] extra`` was any regex: ``['.*']`` made the post-tool-use hook
record every shell command with its output (``cat .env`` stored), and ``['(a+)+$']`` stalled every
hook for ~23 s on a command of a's. Now a project file may only add command prefixes that start
with a build, test or lint runner (or a script of the checkout) and name what they check, and
every pattern, the user's own regexes included, runs on RE2 (linear time).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from mentis.errors import ConfigError
from mentis.integrations.hooks.config import HookConfig, default_checks, load, pattern, project_prefix
from tests.integrations.hook_helpers import MENTIS, attempts, env_for, errors, make_repo
from tests.integrations.hook_helpers import hook as run_hook

DOTENV = "DATABASE_URL=postgres://app:hunter2@db/shop\nSTRIPE_KEY=not-a-real-key\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "shop", remote="https://github.com/acme/shop.git")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


def bash(repo: Path, command: str, stdout: str) -> dict[str, object]:
    return {
        "session_id": "sess-1",
        "cwd": str(repo),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_response": {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False},
        "tool_use_id": "toolu_01",
    }


def project_file(repo: Path, *extra: str) -> None:
    (repo / ".mentis").mkdir(exist_ok=True)
    (repo / ".mentis" / "hooks.toml").write_text(f"[checks]\nextra = {json.dumps(list(extra))}\n")


def timed_hook(env: dict[str, str], repo: Path, command: str, stdout: str) -> float:
    """Seconds one post-tool-use hook took (killed, and the test failed, past 20 s)."""
    started = time.monotonic()
    done = subprocess.run(
        [*MENTIS, "hook", "claude-code", "post-tool-use"],
        input=json.dumps(bash(repo, command, stdout)),
        cwd=repo,
        env={**env, "MENTIS_HOOK_DETACH": "0"},
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "")
    return time.monotonic() - started


@pytest.mark.parametrize("extra", [".*", "cat", "(?s).", "printenv|env|cat"])
def test_a_project_file_cannot_make_the_hook_record_cat_env(repo: Path, home: Path, extra: str) -> None:
    env = env_for(home)
    project_file(repo, extra)
    run_hook(env, "claude-code", "post-tool-use", bash(repo, "cat .env", DOTENV), repo)
    assert attempts(env, repo) == []
    [logged] = errors(home)
    assert ".mentis/hooks.toml [checks] extra" in logged["error"] and "is refused" in logged["error"]


def test_a_backtracking_pattern_in_a_project_file_cannot_stall_the_hook(repo: Path, home: Path) -> None:
    env = env_for(home)
    project_file(repo, "(a+)+$")
    assert timed_hook(env, repo, "a" * 32 + "!", "") < 10
    assert "is refused" in errors(home)[0]["error"]


def test_a_backtracking_pattern_in_the_users_own_file_runs_in_linear_time(repo: Path, home: Path) -> None:
    env = env_for(home)
    (home / "hooks.toml").write_text("[checks]\nextra = ['(a+)+$']\n")
    assert timed_hook(env, repo, "a" * 32 + "!", "") < 10
    assert errors(home) == [] and attempts(env, repo) == []
    config = load(home, None)
    started = time.monotonic()
    assert config.check_in("a" * 100_000 + "!") is None
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(
    ("prefix", "commands"),
    [
        ("just test\\b", ["just test", "just test --fail-fast", ".venv/bin/just test"]),
        ("bazel test", ["bazel test //...", "cd web && bazel test //ui:all"]),
        ("./scripts/check.sh", ["./scripts/check.sh", "scripts/check.sh --quick"]),
        ("./x.py test", ["./x.py test library/std"]),
        ("make ci-lint", ["make ci-lint"]),
    ],
)
def test_a_project_file_adds_check_like_command_prefixes(prefix: str, commands: list[str]) -> None:
    config = HookConfig(checks=(*default_checks(), project_prefix(prefix, "project")))
    assert [config.check_in(c) is not None for c in commands] == [True] * len(commands)
    assert config.check_in(prefix.removesuffix("\\b") + "s") is None  # a prefix ends at a word


@pytest.mark.parametrize(
    "prefix",
    [
        ".*",  # a regex
        "just (test|lint)",  # a regex too: prefixes only
        "cat .env test",  # not a runner
        "env test",
        "python -c test",  # an interpreter is not a runner
        "make ci",  # says nothing it checks
        "/usr/local/bin/test-all",  # not inside the checkout
        "../other/test.sh",
        "scripts/../../test.sh",
    ],
)
def test_a_project_file_prefix_that_is_not_check_like_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigError, match="is refused"):
        project_prefix(prefix, "project")


def test_a_script_named_in_a_project_file_never_matches_a_program_of_the_same_name() -> None:
    config = HookConfig(checks=(project_prefix("./cat test", "project"),))
    assert config.check_in("./cat test") is not None
    assert config.check_in("cat test .env") is None
    assert config.check_in("/bin/cat test .env") is None


@pytest.mark.parametrize("regex", [".*", "", "(?:x)?", "a*"])
def test_a_users_pattern_that_matches_every_command_is_refused(regex: str) -> None:
    with pytest.raises(ConfigError, match="matches every command"):
        pattern(regex, "hooks.toml")


def test_a_users_pattern_outside_re2_syntax_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match=r"not a valid RE2 regular expression \(invalid perl operator"):
        pattern(r"pytest(?=\s)", "hooks.toml")


@pytest.mark.parametrize(
    "command",
    [" " * 200_000 + "pytest", "A=1 " * 50_000 + "pytest", "(" * 100_000 + "pytest", "a=" * 100_000],
)
def test_a_long_shell_line_is_classified_in_linear_time(command: str) -> None:
    config = HookConfig(checks=tuple(default_checks()))
    started = time.monotonic()
    config.check_in(command)
    assert time.monotonic() - started < 1
