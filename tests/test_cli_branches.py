"""``mentis branch from|list|merge`` on a real SQLite file, checked with the library; bad input
exits non-zero naming the field and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from mentis.api.attempts import RecordAttemptInput
from mentis.cli import app
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory

from .conftest import REPO


def run(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_branch_from_list_and_merge_round_trip(memory: Memory, mentis_env: dict[str, str]) -> None:
    caller = Caller(agent_id="cli-test")
    memory.record_attempt(
        caller, RecordAttemptInput(repository=REPO, task_id="t", action="ran it", observation="failed")
    )
    memory.close()
    code, out, err = run(mentis_env, "branch", "from", "feature/x", "-r", REPO, "--json")
    assert code == 0, err
    made = json.loads(out)
    assert (made["chain"], made["parent"], made["fork"]["seq"]) == (f"{REPO}:feature/x", REPO, 0)
    code, out, err = run(mentis_env, "branch", "list", "-r", REPO, "--json")
    assert code == 0, err
    assert [b["branch"] for b in json.loads(out)["branches"]] == ["feature/x"]
    code, out, err = run(mentis_env, "branch", "merge", "feature/x", "-r", REPO, "--json")
    assert code == 0, err
    merged = json.loads(out)
    assert merged["into"] == REPO and merged["conflicts"] == []
    db = Path(mentis_env["MENTIS_DB"])
    m = Memory.open(Settings(home=db.parent, db_path=db, embedder="hash"), HashEmbedder())
    try:
        (info,) = m.list_branches(caller, REPO)
        assert info.merged_into == [REPO]
    finally:
        m.close()


def test_bad_branch_names_and_merges_exit_non_zero_naming_the_field_and_write_nothing(
    memory: Memory, mentis_env: dict[str, str]
) -> None:
    memory.record_attempt(
        Caller(agent_id="cli-test"),
        RecordAttemptInput(repository=REPO, task_id="t", action="ran it", observation="failed"),
    )
    before = [e.hash for e, _ in memory.store.iter_ledger()]
    for args, code, says in (
        (("branch", "from", "a..b", "-r", REPO), 2, "branch"),
        (("branch", "from", "x", "-r", REPO, "--fork-seq", "7"), 2, "fork_seq"),
        (("branch", "merge", "nope", "-r", REPO), 3, "branch"),
    ):
        got, _, err = run(mentis_env, *args)
        assert got == code, err
        assert says in err
    assert [e.hash for e, _ in memory.store.iter_ledger()] == before


def test_record_attempt_and_search_take_a_branch(memory: Memory, mentis_env: dict[str, str]) -> None:
    memory.record_attempt(
        Caller(agent_id="cli-test"),
        RecordAttemptInput(repository=REPO, task_id="t", action="ran it", observation="failed"),
    )
    memory.close()
    assert run(mentis_env, "branch", "from", "wip", "-r", REPO)[0] == 0
    args = (
        "record-attempt",
        "-r",
        REPO,
        "--branch",
        "wip",
        "-t",
        "b",
        "--action",
        "tried",
        "--observation",
        "cache miss",
    )
    code, out, err = run(mentis_env, *args, "--json")
    assert code == 0, err
    made = json.loads(out)["attempt_id"]
    code, out, err = run(mentis_env, "search", "cache miss", "-r", REPO, "--branch", "wip", "--json")
    assert code == 0, err
    assert made in {i for t in json.loads(out)["tasks"] for i in t["matched_attempt_ids"]}
    code, out, err = run(mentis_env, "search", "cache miss", "-r", REPO, "--json")
    assert made not in {i for t in json.loads(out)["tasks"] for i in t["matched_attempt_ids"]}
    code, _, err = run(mentis_env, *args[:4], "nope", *args[5:])
    assert code == 3 and "branch" in err
