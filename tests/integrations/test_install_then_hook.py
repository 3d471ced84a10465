"""The two halves of the harness integration meet: the hook entries `mentis install --hooks` writes
into Claude Code's settings are the commands that, run by the harness with its payload on stdin,
record the check and surface it again at the next prompt."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .hook_helpers import attempts, env_for, make_repo, mentis
from .test_hooks_claude_code import failed_bash


def _command(settings: dict[str, object], event: str, matcher: str | None) -> str:
    groups = settings["hooks"][event]  # type: ignore[index]
    for group in groups:
        if group.get("matcher") == matcher:
            return str(group["hooks"][0]["command"])
    raise AssertionError(f"no {event} hook for {matcher!r}")


def test_the_installed_claude_code_hooks_record_a_failed_check_and_surface_it(tmp_path: Path) -> None:
    home, store = tmp_path / "home", tmp_path / "store"
    home.mkdir()
    store.mkdir()
    (store / "hooks.toml").write_text("[context]\nmin_similarity = 0.2\n")  # hash embedder, not the model
    env = env_for(store, HOME=str(home))
    repo = make_repo(tmp_path / "shop", remote="https://github.com/acme/shop.git")
    installed = mentis(env, "install", "claude-code", "--hooks", cwd=repo)
    assert installed.returncode == 0, installed.stderr
    settings = json.loads((home / ".claude" / "settings.json").read_text())

    def as_the_harness_runs_it(command: str, payload: dict[str, object]) -> str:
        done = subprocess.run(
            command,
            shell=True,
            input=json.dumps(payload),
            env=env,
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    payload = failed_bash(repo, "pytest tests/test_cart.py", 1, "FAILED test_total_rounds_half_up")
    as_the_harness_runs_it(_command(settings, "PostToolUseFailure", "Bash"), payload)
    from mentis.integrations.hooks.recorder import wait_for_pending

    wait_for_pending(store)
    recorded = attempts(env)
    assert [(a["check_command"], a["status"], a["task_id"]) for a in recorded] == [
        ("pytest tests/test_cart.py", "failed", "fix/cart-rounding")
    ]

    prompt = {
        "session_id": "sess-2",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": str(repo),
        "hook_event_name": "UserPromptSubmit",
        "prompt": "test_total_rounds_half_up fails in the cart tests",
    }
    surfaced = as_the_harness_runs_it(_command(settings, "UserPromptSubmit", None), prompt)
    context = json.loads(surfaced)["hookSpecificOutput"]["additionalContext"]
    assert "pytest tests/test_cart.py" in context and "failed" in context
