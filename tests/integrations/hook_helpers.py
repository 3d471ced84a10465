"""Real git repositories in a temp dir and the real `mentis` command run on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

MENTIS = [sys.executable, "-m", "mentis"]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def make_repo(path: Path, branch: str = "fix/cart-rounding", remote: str | None = None) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", branch)
    if remote:
        git(path, "remote", "add", "origin", remote)
    (path / "cart.py").write_text("def total(items):\n    return sum(items)\n")
    (path / "README.md").write_text("shop\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "init")
    return path


def hash_object(repo: Path, *paths: str) -> dict[str, str]:
    return {p: git(repo, "hash-object", p) for p in paths}


def env_for(home: Path, **extra: str) -> dict[str, str]:
    """A `mentis` subprocess on a store under ``home`` (hash embedder, no server configured)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MENTIS_")}
    env.update(GIT_ENV, MENTIS_HOME=str(home), MENTIS_EMBEDDER="hash")
    env.update(extra)
    return env


def mentis(
    env: dict[str, str], *args: str, cwd: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MENTIS, *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def hook(
    env: dict[str, str], harness: str, event: str, payload: dict[str, Any] | str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """Run the hook, then wait until any recording it left in the background has ended."""
    from mentis.integrations.hooks.recorder import wait_for_pending

    text = payload if isinstance(payload, str) else json.dumps(payload)
    done = mentis(env, "hook", harness, event, cwd=cwd, stdin=text)
    wait_for_pending(Path(env["MENTIS_HOME"]))
    return done


def errors(home: Path) -> list[dict[str, Any]]:
    log = home / "logs" / "hook-errors.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def attempts(env: dict[str, str], cwd: Path | None = None) -> list[dict[str, Any]]:
    """Every attempt in the store of ``env``, oldest first, read through the library."""
    from mentis.api.attempts import RecallInput
    from mentis.config import Settings
    from mentis.providers.embed import HashEmbedder
    from mentis.service.memory import Caller, Memory

    home = Path(env["MENTIS_HOME"])
    if not (home / "mentis.db").exists():
        return []
    memory = Memory.open(Settings(home=home, db_path=home / "mentis.db", embedder="hash"), HashEmbedder())
    try:
        sql = (
            "select task_id, task_title, agent_id, status, action, observation, files, check_command, "
            'check_exit_code, check_output, "commit", branch, dirty, session_id, tags '
            "from attempts order by created_at"
        )
        data = memory.recall(Caller(agent_id="reader"), RecallInput(sql=sql))
    finally:
        memory.close()
    return [dict(zip(data.columns, row, strict=True)) for row in data.rows]
