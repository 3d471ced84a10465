"""``mentis propose transcript --llm``: thoughts an LLM finds in the conversation are proposed
(typed LLMExtracted), from scrubbed text only, within the token budget the user sets, with the
tokens stated before and after; a reply that is not the JSON asked for proposes nothing. The
provider is a local fake speaking the OpenAI chat-completions wire format (tests/fake_openai.py);
the real client code runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mentis.api.review import AcceptProposalInput, ListProposalsInput
from mentis.api.thoughts import GetThoughtInput
from mentis.config import Settings
from mentis.errors import InvalidInput
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from tests.fake_openai import FakeOpenAI

from .transcript_support import Transcript, make_checkout

SECRET = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa98"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server
    assert server.errors == []


def conversation(tmp_path: Path, turns: int = 1) -> tuple[Path, Path]:
    """A checkout and a session that talks (decisions, findings, a secret) and runs one check."""
    repo = make_checkout(tmp_path)
    t = Transcript("9a8b7c6d-0000-4000-8000-000000000001", repo)
    for n in range(turns):
        t.prompt(f"the cart total drops a cent ({n}); my token is {SECRET}")
        t.say(f"We decided to keep money in Decimal everywhere ({n}).")
        t.say("I found that round() uses banker's rounding, which explains the cent." + " filler" * 300)
        t.say("Totals must be rounded once, at the end.")
    t.bash("python -m pytest -q -p no:cacheprovider test_cart.py")
    return repo, t.write(tmp_path / "session.jsonl")


def propose(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mentis", "propose", "transcript", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def environment(tmp_path: Path, fake: FakeOpenAI) -> dict[str, str]:
    env = dict(
        os.environ, MENTIS_HOME=str(tmp_path / "home"), MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="alice"
    )
    env.pop("MENTIS_DATABASE_URL", None)
    env.update(MENTIS_RERANK_BASE_URL=fake.url, MENTIS_EXTRACT_MODEL="fake/extractor")
    return env


def queue(tmp_path: Path) -> Memory:
    home = tmp_path / "home"
    return Memory.open(Settings(home=home, db_path=home / "mentis.db", embedder="hash"), HashEmbedder())


def test_llm_proposes_typed_thoughts_from_scrubbed_text_and_states_the_tokens(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    _, transcript = conversation(tmp_path)
    done = propose(environment(tmp_path, fake), str(transcript), "--llm")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    thoughts = [p for p in answer["queued"] if p["kind"] == "thought"]
    assert sorted(t["record"]["tags"][1] for t in thoughts) == ["constraint", "decision", "finding"]
    assert {t["record"]["type"] for t in thoughts} == {"LLMExtracted"}
    assert [p["kind"] for p in answer["queued"]].count("attempt") == 1  # the check, as without --llm
    decision = next(t for t in thoughts if t["record"]["tags"][1] == "decision")
    assert "Decimal" in decision["record"]["content"]
    assert decision["source"]["from_line"] == decision["source"]["to_line"] > 1
    # nothing secret left the machine, and the model asked for was the one configured
    assert SECRET not in fake.sent() and "[REDACTED" in fake.sent()
    [body] = fake.bodies()
    assert body["model"] == "fake/extractor" and body["max_tokens"] == 1024
    # the tokens: planned before anything was sent, and what the provider reported after
    report = answer["llm"]
    assert (report["requests"], report["skipped"], report["thoughts"]) == (1, 0, 3)
    assert report["tokens_in"] == sum(len(m["content"]) for m in body["messages"]) // 4 > 0
    assert report["tokens_out"] > 0 and report["estimate"] <= report["budget"] == 20_000
    lines = done.stderr.splitlines()
    assert lines[0].startswith("--llm: 1 requests, about ") and "(budget 20,000)" in lines[0]
    assert f"{report['tokens_in']:,} tokens in, {report['tokens_out']:,} out" in lines[1]


def test_the_budget_bounds_what_is_sent_and_says_what_was_left_out(tmp_path: Path, fake: FakeOpenAI) -> None:
    _, transcript = conversation(tmp_path, turns=12)  # several chunks of conversation
    env = environment(tmp_path, fake)
    first = json.loads(propose(env, str(transcript), "--llm", "--llm-budget", "5000").stdout)["llm"]
    assert first["requests"] >= 1 and first["skipped"] >= 1
    assert first["estimate"] <= 5000 and len(fake.requests) == first["requests"]
    fake.requests.clear()
    none = propose(env, str(transcript), "--llm", "--llm-budget", "100")
    assert none.returncode == 0 and fake.requests == []
    assert json.loads(none.stdout)["llm"]["requests"] == 0
    assert "3 chunks of conversation are over the budget and not sent" in none.stderr


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ("prose", "the reply is not JSON"),
        ("missing_thoughts", "no 'thoughts' list"),
        ("bad_kind", "kind 'gossip', not one of decision, finding, constraint, lesson"),
        ("bad_lines", "outside the chunk's"),
        ("http_500", "HTTP 500"),
    ],
)
def test_a_reply_that_breaks_the_schema_proposes_nothing_with_a_clear_error(
    tmp_path: Path, fake: FakeOpenAI, behaviour: str, message: str
) -> None:
    _, transcript = conversation(tmp_path)
    fake.behaviour = behaviour
    done = propose(environment(tmp_path, fake), str(transcript), "--llm")
    assert done.returncode == 12, done.stderr
    assert "LLM extraction failed, nothing proposed" in done.stderr and message in done.stderr, done.stderr
    memory = queue(tmp_path)
    try:
        assert memory.list_proposals(Caller(agent_id="x"), ListProposalsInput(status=None)).total == 0
    finally:
        memory.close()


def test_accepting_a_thought_appends_it_as_the_reviewer_and_edits_are_checked_by_kind(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    _, transcript = conversation(tmp_path)
    answer = json.loads(propose(environment(tmp_path, fake), str(transcript), "--llm").stdout)
    [decision] = [p for p in answer["queued"] if p["kind"] == "thought" and "decision" in p["record"]["tags"]]
    memory = queue(tmp_path)
    reviewer = Caller(agent_id="reviewer")
    try:
        with pytest.raises(InvalidInput, match=r"edits\.observation: a thought has no observation") as raised:
            memory.accept_proposal(
                reviewer, AcceptProposalInput(proposal_id=decision["proposal_id"], edits={"observation": "x"})
            )
        assert raised.value.field == "edits.observation"
        edited = "Keep money in Decimal from input to output; round once."
        done = memory.accept_proposal(
            reviewer, AcceptProposalInput(proposal_id=decision["proposal_id"], edits={"content": edited})
        )
        thought = memory.get_thought(reviewer, GetThoughtInput(thought_id=done.record_id))
        assert (thought.type, thought.content, thought.agent_id) == ("LLMExtracted", edited, "reviewer")
        assert f"proposal:{decision['proposal_id']}" in thought.tags
    finally:
        memory.close()


def test_llm_without_a_provider_key_for_a_remote_url_is_a_config_error_and_writes_nothing(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    _, transcript = conversation(tmp_path)
    env = environment(tmp_path, fake)
    env["MENTIS_RERANK_BASE_URL"] = "https://llm.example.com/v1"
    for name in ("MENTIS_RERANK_API_KEY", "OPENROUTER_API_KEY"):
        env.pop(name, None)
    done = propose(env, str(transcript), "--llm")
    assert done.returncode == 10 and "no API key for https://llm.example.com/v1" in done.stderr
    assert (
        not (tmp_path / "home" / "mentis.db").exists()
        or queue(tmp_path).list_proposals(Caller(agent_id="x"), ListProposalsInput(status=None)).total == 0
    )
