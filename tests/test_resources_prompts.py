"""MCP resources (a task's history, a repository's recent context) and prompts (before_you_start,
record_what_you_checked) through the official MCP client: in memory, over a real stdio subprocess
and over HTTP with a scoped token. They are read as the caller, so scoped exactly as the tools; a
repository the caller may not read is "not found" in the same words as one that does not exist; a
missing prompt argument is an invalid-params error naming it; nothing here writes."""

from __future__ import annotations

import os
import sys
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, TextContent, TextResourceContents

from mentis.api.attempts import MarkOutdatedInput, RecallInput, RecordAttemptInput
from mentis.api.stats import StatsInput
from mentis.api.thoughts import AppendThoughtInput
from mentis.config import Settings
from mentis.mcp.server import build_server
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory

from .conftest import REPO
from .http_support import LiveServer, mcp_client

OWNER = Caller(agent_id="claude-code")
ADMIN = Caller(agent_id="owner", admin=True)
SECRET = "github.com/secret/vault"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _fill(memory: Memory) -> str:
    """A task of two attempts, the first marked outdated, and a thought; the first attempt's id."""
    first = memory.record_attempt(
        OWNER,
        RecordAttemptInput(
            repository=REPO,
            task_id="fix/cart",
            task_title="Cart total off by a cent",
            action="rounded each line",
            observation="total still off",
            files=["shop/cart.py"],
        ),
    ).attempt_id
    memory.record_attempt(
        OWNER,
        RecordAttemptInput(
            repository=REPO, task_id="fix/cart", action="round once at the end", observation="total right"
        ),
    )
    memory.mark_conclusion_outdated(
        OWNER, MarkOutdatedInput(repository=REPO, attempt_id=first, reason="moved to the serializer")
    )
    memory.append_thought(
        OWNER,
        AppendThoughtInput.model_validate(
            {"repository": REPO, "type": "Decision", "content": "Money is Decimal, rounded once."}
        ),
    )
    return first


def _entries(memory: Memory) -> int:
    return memory.stats(ADMIN, StatsInput()).ledger_entries


def _text(contents: object) -> str:
    assert isinstance(contents, TextResourceContents), contents
    return contents.text


@pytest.mark.anyio
async def test_a_tasks_history_resource_is_recalls_attempts_with_corrections(memory: Memory) -> None:
    first = _fill(memory)
    recalled = memory.recall(OWNER, RecallInput(repository=REPO, task_id="fix/cart"))
    async with Client(build_server(memory)) as client:
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        read = await client.read_resource(f"mentis://tasks/{REPO}/fix%2Fcart")
    assert templates == {"mentis://tasks/{+repository}/{task_id}", "mentis://context/{+repository}"}
    text = _text(read.contents[0])
    assert text.startswith(f"task fix/cart in {REPO}\n")
    ids = [row[0] for row in recalled.rows]
    assert len(ids) == 2 and all(attempt_id in text for attempt_id in ids)
    assert first in text and "moved to the serializer" in text


@pytest.mark.anyio
async def test_a_repositorys_context_resource_names_its_tasks_and_thoughts(memory: Memory) -> None:
    _fill(memory)
    async with Client(build_server(memory)) as client:
        read = await client.read_resource(f"mentis://context/{REPO}")
    text = _text(read.contents[0])
    assert text.startswith(f"{REPO}: newest tasks")
    assert "fix/cart" in text and "Money is Decimal, rounded once." in text


@pytest.mark.anyio
async def test_before_you_start_renders_a_search_and_record_what_you_checked_names_the_task(
    memory: Memory,
) -> None:
    _fill(memory)
    before = _entries(memory)
    async with Client(build_server(memory)) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        started = await client.get_prompt("before_you_start", {"problem": "cart total is off by a cent"})
        checked = await client.get_prompt(
            "record_what_you_checked", {"repository": REPO, "task_id": "fix/cart", "check": "pytest -x"}
        )
    assert set(prompts) == {"before_you_start", "record_what_you_checked"}
    assert [a.name for a in prompts["before_you_start"].arguments or []] == ["problem", "repository"]
    started_text = started.messages[0].content.text  # type: ignore[union-attr]
    assert "task_id=fix/cart" in started_text and "OUTDATED" in started_text
    checked_text = checked.messages[0].content.text  # type: ignore[union-attr]
    assert '"fix/cart"' in checked_text and "`pytest -x`" in checked_text and "record_attempt" in checked_text
    assert _entries(memory) == before


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("prompt", "given", "missing"),
    [
        ("before_you_start", {"repository": REPO}, "problem"),
        ("record_what_you_checked", {"repository": REPO}, "task_id"),
        ("record_what_you_checked", {}, "repository, task_id"),
    ],
)
async def test_a_prompt_without_a_required_argument_is_invalid_params_naming_it_and_writes_nothing(
    memory: Memory, prompt: str, given: dict[str, str], missing: str
) -> None:
    _fill(memory)
    before = _entries(memory)
    async with Client(build_server(memory)) as client:
        with pytest.raises(MCPError) as refused:
            await client.get_prompt(prompt, given)
    assert refused.value.error.code == INVALID_PARAMS
    assert f"prompt {prompt} needs the argument(s) {missing};" in refused.value.error.message
    assert _entries(memory) == before


@pytest.mark.anyio
async def test_a_missing_task_or_repository_is_not_found_and_names_only_the_uri_asked(memory: Memory) -> None:
    _fill(memory)
    async with Client(build_server(memory)) as client:
        for uri in (f"mentis://tasks/{REPO}/no-such-task", "mentis://context/github.com/none/such"):
            with pytest.raises(MCPError) as missing:
                await client.read_resource(uri)
            assert missing.value.error.message == f"no resource {uri} (or this caller may not read it)"


def _hidden_message(error: MCPError, repository: str) -> str:
    return error.error.message.replace(repository, "REPO")


@pytest.mark.anyio
async def test_over_http_a_resource_outside_the_tokens_scope_reads_as_one_that_does_not_exist(
    db_path: Path,
) -> None:
    with LiveServer(db_path) as live:
        live.memory.record_attempt(
            Caller("owner"),
            RecordAttemptInput(repository=SECRET, task_id="keys", action="rotated", observation="ok"),
        )
        _fill(live.memory)
        before = _entries(live.memory)
        scoped = live.token("read", ("github.com/acme/*",))
        async with mcp_client(live, scoped) as client:
            mine = await client.read_resource(f"mentis://tasks/{REPO}/fix%2Fcart")
            errors: dict[str, dict[str, str]] = {}
            for kind, path in (("tasks", "/keys"), ("context", "")):
                for repository in (SECRET, "github.com/none/such"):
                    with pytest.raises(MCPError) as refused:
                        await client.read_resource(f"mentis://{kind}/{repository}{path}")
                    errors.setdefault(kind, {})[repository] = _hidden_message(refused.value, repository)
            with pytest.raises(MCPError):
                await client.get_prompt("record_what_you_checked", {"repository": REPO})
            found = await client.get_prompt("before_you_start", {"problem": "rotated keys"})
        assert "fix/cart" in _text(mine.contents[0])
        for kind, by_repo in errors.items():
            assert by_repo[SECRET] == by_repo["github.com/none/such"], kind
            assert "vault" not in by_repo[SECRET]
        assert SECRET not in found.messages[0].content.text  # type: ignore[union-attr]
        assert _entries(live.memory) == before


def test_over_stdio_the_official_client_reads_a_resource_and_gets_a_prompt(
    settings: Settings, db_path: Path
) -> None:
    with closing(Memory.open(settings, HashEmbedder())) as memory:
        _fill(memory)
        before = _entries(memory)
    env = {**os.environ, "MENTIS_DB": str(db_path), "MENTIS_EMBEDDER": "hash", "MENTIS_AGENT_ID": "stdio"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "mentis", "serve"], env=env)

    async def run() -> tuple[str, str, MCPError]:
        async with Client(stdio_client(params)) as client:
            read = await client.read_resource(f"mentis://tasks/{REPO}/fix%2Fcart")
            prompt = await client.get_prompt(
                "before_you_start", {"problem": "cart total", "repository": REPO}
            )
            with pytest.raises(MCPError) as missing:
                await client.get_prompt("before_you_start", {})
            started = prompt.messages[0].content
            assert isinstance(started, TextContent)
            return _text(read.contents[0]), started.text, missing.value

    history, started, missing = anyio.run(run)
    assert history.startswith(f"task fix/cart in {REPO}\n") and "total right" in history
    assert "task_id=fix/cart" in started
    assert missing.error.code == INVALID_PARAMS and "needs the argument(s) problem" in missing.error.message
    with closing(Memory.open(settings, HashEmbedder())) as memory:
        assert _entries(memory) == before
