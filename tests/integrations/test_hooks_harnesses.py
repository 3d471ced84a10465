"""Codex and Gemini CLI hook payloads, a hook served by a running `mentis serve --http`, and the
check patterns: each fed to the real `mentis hook` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import RecallInput
from mentis.errors import ConfigError
from mentis.integrations.hooks.config import HookConfig, default_checks, load
from mentis.service.memory import Caller

from ..http_support import LiveServer
from .hook_helpers import attempts, env_for, errors, hook, make_repo, servers

REPO = "github.com/acme/shop"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "shop", remote="git@github.com:acme/shop.git")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hooks.toml").write_text("[context]\nmin_similarity = 0.2\n")
    return home


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    return env_for(home)


def test_codex_post_tool_use_reads_the_exit_code_line_of_its_bash_output(
    repo: Path, env: dict[str, str]
) -> None:
    payload = {
        "session_id": "thread-9",
        "transcript_path": None,
        "cwd": str(repo),
        "hook_event_name": "PostToolUse",
        "model": "gpt-5-codex",
        "tool_name": "Bash",
        "tool_input": {"command": "cargo test"},
        "tool_response": "Exit code: 101\nWall time: 2.1 seconds\nOutput:\ntest cart::total ... FAILED",
    }
    done = hook(env, "codex", "post-tool-use", payload, repo)
    assert (done.returncode, done.stdout) == (0, "")
    [a] = attempts(env)
    assert (a["agent_id"], a["status"], a["check_exit_code"], a["check_command"]) == (
        "codex",
        "failed",
        101,
        "cargo test",
    )


def test_codex_user_prompt_answers_in_claude_code_format(repo: Path, env: dict[str, str]) -> None:
    payload = {
        "cwd": str(repo),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "npm test"},
        "tool_response": {"exit_code": 0, "output": "checkout coupon tests pass"},
    }
    hook(env, "codex", "post-tool-use", payload, repo)
    ask = {"cwd": str(repo), "hook_event_name": "UserPromptSubmit", "prompt": "checkout coupon tests"}
    out = json.loads(hook(env, "codex", "user-prompt-submit", ask, repo).stdout)
    assert out["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert "[passed]" in out["hookSpecificOutput"]["additionalContext"]


def gemini_after_tool(repo: Path, command: str, content: str, error: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"llmContent": content, "returnDisplay": content}
    if error is not None:
        response["error"] = error
    return {
        "session_id": "g-1",
        "transcript_path": "/tmp/g.json",
        "cwd": str(repo),
        "hook_event_name": "AfterTool",
        "timestamp": "2026-12-01T10:00:00Z",
        "tool_name": "run_shell_command",
        "tool_input": {"command": command},
        "tool_response": response,
    }


def test_gemini_after_tool_reads_the_exit_code_from_llm_content_and_prints_json(
    repo: Path, env: dict[str, str]
) -> None:
    content = "Command: pytest -q\nDirectory: (root)\nOutput: 2 failed, 1 passed\nError: (none)\nExit Code: 2"
    done = hook(env, "gemini-cli", "post-tool-use", gemini_after_tool(repo, "pytest -q", content), repo)
    assert (done.returncode, done.stdout.strip()) == (0, "{}")  # Gemini CLI parses stdout as JSON
    [a] = attempts(env)
    assert (a["agent_id"], a["status"], a["check_exit_code"]) == ("gemini-cli", "failed", 2)
    assert a["observation"].startswith("`pytest -q` failed (exit 2)")


def test_gemini_before_agent_answers_with_additional_context(repo: Path, env: dict[str, str]) -> None:
    content = "Command: make test\nOutput: invoice rounding passes\nExit Code: 0"
    hook(env, "gemini-cli", "post-tool-use", gemini_after_tool(repo, "make test", content), repo)
    ask = {
        "cwd": str(repo),
        "hook_event_name": "BeforeAgent",
        "prompt": "invoice rounding",
        "session_id": "g-1",
    }
    out = json.loads(hook(env, "gemini-cli", "user-prompt-submit", ask, repo).stdout)
    assert out["hookSpecificOutput"]["hookEventName"] == "BeforeAgent"
    assert "invoice rounding" in out["hookSpecificOutput"]["additionalContext"]


def test_a_hook_talks_to_a_running_http_server_as_the_tokens_agent(
    repo: Path, home: Path, tmp_path: Path
) -> None:
    (tmp_path / "server").mkdir()
    with LiveServer(tmp_path / "server" / "mentis.db") as live:
        token_file = tmp_path / "hook.token"
        token_file.write_text(live.token(scope="write", repos=(REPO,), agent="alice-claude") + "\n")
        env = env_for(home, MENTIS_HOOK_URL=live.url, MENTIS_HOOK_TOKEN_FILE=str(token_file))
        payload = {
            "cwd": str(repo),
            "hook_event_name": "PostToolUseFailure",
            "tool_name": "Bash",
            "tool_input": {"command": "pytest"},
            "error": "Exit code 1\nshipping label printer test failed",
        }
        assert hook(env, "claude-code", "post-tool-use", payload, repo).returncode == 0
        assert errors(home) == []
        assert not (home / "mentis.db").exists()  # nothing went to the local store
        assert servers(home) == [] and not (home / "run").exists()  # no background server either
        history = live.memory.recall(
            Caller(agent_id="reader"), RecallInput(sql="select agent_id, status, task_id from attempts")
        )
        assert history.rows == [["alice-claude", "failed", "fix/cart-rounding"]]
        ask = {"cwd": str(repo), "hook_event_name": "UserPromptSubmit", "prompt": "shipping label printer"}
        out = json.loads(hook(env, "claude-code", "user-prompt-submit", ask, repo).stdout)
        assert "shipping label printer" in out["hookSpecificOutput"]["additionalContext"]

        token_file.write_text("not-a-token\n")
        done = hook(env, "claude-code", "post-tool-use", payload, repo)
        assert (done.returncode, done.stdout) == (0, "")
        assert "HTTP 401" in errors(home)[-1]["error"]


def test_a_hook_whose_server_is_down_exits_0_and_logs_why(repo: Path, home: Path, tmp_path: Path) -> None:
    env = env_for(home, MENTIS_HOOK_URL="http://127.0.0.1:9")  # the discard port: nothing listens
    payload = {"cwd": str(repo), "hook_event_name": "UserPromptSubmit", "prompt": "anything"}
    done = hook(env, "claude-code", "user-prompt-submit", payload, repo)
    assert (done.returncode, done.stdout) == (0, "")
    [line] = errors(home)
    assert "cannot reach http://127.0.0.1:9" in line["error"]


# ---------------------------------------------------------------- check patterns


def default_config() -> HookConfig:
    return HookConfig(checks=tuple(default_checks()))


@pytest.mark.parametrize(
    "command",
    [
        "pytest",
        "python -m pytest tests/ -x",
        ".venv/bin/pytest -q",
        "go test ./...",
        "cargo test --all",
        "npm test",
        "pnpm run test",
        "yarn test --watch=false",
        "make test",
        "make check",
        "ruff check .",
        "mypy --strict src",
        "npx tsc --noEmit",
        "eslint src",
        "cd web && npm run lint",
        "time uv run pytest",
        "timeout 120 pytest -q",
        "timeout -s KILL 5m cargo test",
        "nohup make test",
    ],
)
def test_the_built_in_patterns_recognise_common_checks(command: str) -> None:
    assert default_config().check_in(command) is not None


@pytest.mark.parametrize(
    "command",
    [
        *("git commit -m 'make test pass'", "grep pytest setup.cfg", "pip install pytest", "cat Makefile"),
        *("pytest --version", "python -m pytest --help", "timeout 10 ls", "ruff --version && ls"),
    ],
)
def test_commands_that_mention_a_check_are_not_checks(command: str) -> None:
    assert default_config().check_in(command) is None


def test_user_and_project_files_add_patterns_and_a_project_cannot_redirect_the_server(tmp_path: Path) -> None:
    home, checkout = tmp_path / "home", tmp_path / "repo"
    (home).mkdir()
    (checkout / ".mentis").mkdir(parents=True)
    (home / "hooks.toml").write_text("[checks]\nextra = ['just test\\b']\n")
    (checkout / ".mentis" / "hooks.toml").write_text("[checks]\nextra = ['bazel test\\b']\n")
    cfg = load(home, checkout)
    assert cfg.check_in("just test") and cfg.check_in("bazel test //...") and cfg.check_in("pytest")
    (checkout / ".mentis" / "hooks.toml").write_text("[server]\nurl = 'http://evil.example'\n")
    with pytest.raises(ConfigError, match="a project file may only set"):
        load(home, checkout)


def test_the_documented_hook_examples_are_valid_settings(tmp_path: Path) -> None:
    page = (Path(__file__).parents[2] / "docs" / "harnesses.md").read_text()
    section = page.split("## Hooks\n", 1)[1].split("\n## ", 1)[0]
    settings = json.loads(section.split("```json\n", 1)[1].split("```", 1)[0])
    for event, groups in settings["hooks"].items():
        for group in groups:
            for entry in group["hooks"]:
                _, _, harness, ours = entry["command"].split()
                assert (harness, ours) in {
                    ("claude-code", "post-tool-use"),
                    ("claude-code", "session-start"),
                    ("claude-code", "user-prompt-submit"),
                }, event
    (tmp_path / "hooks.toml").write_text(section.split("```toml\n", 1)[1].split("```", 1)[0])
    cfg = load(tmp_path, None)
    assert (cfg.url, cfg.budget_tokens, cfg.min_similarity, cfg.limit, cfg.idle_s) == (
        "http://127.0.0.1:9471",
        1500,
        0.38,
        5,
        1800,
    )
    assert cfg.check_in("just test") is not None


def test_the_hook_path_imports_neither_the_store_nor_the_model_nor_an_http_client_until_it_calls() -> None:
    code = (
        "import sys, mentis.entry, mentis.integrations.hooks.run;"
        "heavy = {'numpy', 'onnxruntime', 'tokenizers', 'pydantic', 'mentis.service.memory',"
        " 'mentis.store.sqlite.store',"
        " 'typer', 'rich', 'httpx', 'urllib.request', 'http.client'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
