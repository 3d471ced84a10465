"""The MCP Inspector's CLI (``@modelcontextprotocol/inspector`` 2.12.0, its ``--cli`` mode as its
clients/cli README documents it) against ``mentis serve`` over stdio and over HTTP: the tool
profile, the resources and the prompts as a second client, not written by us, sees them.

.ci/run installs the Inspector into ``.node/`` (listed in .gitignore). Without it these tests are
skipped with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import RecordAttemptInput
from mentis.service.memory import Caller
from mentis.service.profiles import GROUPS

from .conftest import REPO
from .http_support import LiveServer

INSPECTOR = Path(__file__).parents[1] / ".node" / "node_modules" / ".bin" / "mcp-inspector"
MENTIS = str(Path(sys.executable).parent / "mentis")


@pytest.fixture(scope="module", autouse=True)
def inspector() -> Path:
    if not INSPECTOR.is_file():
        reason = f"the MCP Inspector is not installed at {INSPECTOR} (.ci/run installs it with npm)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return INSPECTOR


def inspect(*args: str) -> tuple[int, dict[str, Any]]:
    """One Inspector CLI run: its exit code and the JSON it printed (a result on stdout, or
    ``{"error": …}`` as the last line on stderr)."""
    done = subprocess.run(
        [str(INSPECTOR), "--cli", "--connect-timeout", "60000", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    try:
        return done.returncode, json.loads(done.stdout or done.stderr.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError(f"the Inspector printed no JSON: {done.stdout!r} {done.stderr!r}") from None


def stdio(home: Path, *args: str, tools: str | None = None) -> list[str]:
    env = ["-e", f"MENTIS_HOME={home}", "-e", "MENTIS_EMBEDDER=hash", "-e", "MENTIS_AGENT_ID=inspector"]
    profile = ["-e", f"MENTIS_TOOLS={tools}"] if tools else []
    return [*env, *profile, MENTIS, "serve", *args]


def test_the_inspector_lists_the_default_profile_and_all_over_stdio(tmp_path: Path) -> None:
    code, listed = inspect(*stdio(tmp_path), "--method", "tools/list")
    assert code == 0, listed
    assert {t["name"] for t in listed["tools"]} == set(GROUPS["core"])
    code, listed = inspect(*stdio(tmp_path, tools="all"), "--method", "tools/list")
    assert code == 0 and len(listed["tools"]) == sum(len(g) for g in GROUPS.values())


def test_the_inspector_reads_a_tasks_history_and_gets_the_prompts_over_stdio(tmp_path: Path) -> None:
    from mentis.config import Settings
    from mentis.providers.embed import HashEmbedder
    from mentis.service.memory import Memory

    settings = Settings(home=tmp_path, db_path=tmp_path / "mentis.db", embedder="hash")
    memory = Memory.open(settings, HashEmbedder())
    try:
        memory.record_attempt(
            Caller("claude-code"),
            RecordAttemptInput(
                repository=REPO,
                task_id="fix/cart",
                action="round once",
                observation="total right",
                files=["shop/cart.py"],
            ),
        )
    finally:
        memory.close()
    code, read = inspect(
        *stdio(tmp_path), "--method", "resources/read", "--uri", f"mentis://tasks/{REPO}/fix%2Fcart"
    )
    assert code == 0, read
    assert read["contents"][0]["text"].startswith(f"task fix/cart in {REPO}\nattempt ")
    code, templates = inspect(*stdio(tmp_path), "--method", "resources/templates/list")
    assert {t["uriTemplate"] for t in templates["resourceTemplates"]} == {
        "mentis://tasks/{+repository}/{task_id}",
        "mentis://context/{+repository}",
    }
    code, prompt = inspect(
        *stdio(tmp_path),
        "--method",
        "prompts/get",
        "--prompt-name",
        "before_you_start",
        "--prompt-args",
        "problem=cart total",
    )
    assert code == 0, prompt
    assert "task_id=fix/cart" in prompt["messages"][0]["content"]["text"]
    code, missing = inspect(*stdio(tmp_path), "--method", "prompts/get", "--prompt-name", "before_you_start")
    assert code != 0
    assert missing["error"]["message"] == (
        "prompt before_you_start needs the argument(s) problem; it takes problem, repository"
    )


def test_over_http_the_inspector_sees_a_tokens_profile_and_scope(db_path: Path) -> None:
    with LiveServer(db_path, tools="all") as live:
        live.memory.record_attempt(
            Caller("owner"),
            RecordAttemptInput(
                repository="github.com/secret/vault", task_id="t", action="a", observation="o"
            ),
        )
        scoped = live.token("write", ("github.com/acme/*",))
        http = [f"{live.url}/mcp", "--transport", "http", "--header", f"Authorization: Bearer {scoped}"]
        code, listed = inspect(*http, "--method", "tools/list")
        assert code == 0, listed
        names = {t["name"] for t in listed["tools"]}
        assert "register_agent" not in names and "search" in names and "list_agents" in names
        outcomes = {}
        for repo in ("github.com/secret/vault", "github.com/none/such"):
            code, read = inspect(*http, "--method", "resources/read", "--uri", f"mentis://context/{repo}")
            assert code != 0
            outcomes[repo] = read["error"]["message"].replace(repo, "REPO")
        assert outcomes["github.com/secret/vault"] == outcomes["github.com/none/such"]
        assert "vault" not in outcomes["github.com/secret/vault"]
