"""The review queue through every transport (MCP over HTTP, REST, the CLI) gives the service's own
answers, and ``mentis propose transcript`` queues what a real transcript holds, once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mentis.service.memory import Caller
from tests.transports import Call

from .test_queue import draft
from .transcript_support import make_checkout, session_with_two_checks

OWNER = Caller(agent_id="owner")


def test_each_transport_lists_shows_accepts_and_rejects_as_the_service_does(call: Call) -> None:
    queued = call.live.memory.propose(OWNER, [draft(1), draft(2)]).queued
    first, second = (p.proposal_id for p in queued)
    listed = call("list_proposals", {})
    assert listed == call.direct("list_proposals", {})
    assert listed[0] == "ok" and listed[1]["total"] == 2
    assert call("show_proposal", {"proposal_id": first}) == call.direct(
        "show_proposal", {"proposal_id": first}
    )
    status, accepted = call("accept_proposal", {"proposal_id": first})
    assert status == "ok" and accepted["proposal_id"] == first
    shown = call.direct("show_proposal", {"proposal_id": first})[1]
    assert (shown["status"], shown["decided_by"], shown["record_id"]) == (
        "accepted",
        "parity",
        accepted["record_id"],
    )
    assert call("reject_proposal", {"proposal_id": second, "reason": "flaky"})[0] == "ok"
    assert call("list_proposals", {})[1]["total"] == 0


@pytest.mark.parametrize(
    ("name", "arguments", "code"),
    [
        ("show_proposal", {"proposal_id": "prop-none"}, "not_found"),
        ("reject_proposal", {"proposal_id": "PROPOSAL", "reason": ""}, "invalid_input"),
        ("list_proposals", {"status": "maybe"}, "invalid_input"),
        ("list_proposals", {"limit": 0}, "invalid_input"),
    ],
)
def test_bad_input_is_a_clear_error_on_every_transport(
    call: Call, name: str, arguments: dict[str, object], code: str
) -> None:
    queued = call.live.memory.propose(OWNER, [draft(1)]).queued
    arguments = {k: queued[0].proposal_id if v == "PROPOSAL" else v for k, v in arguments.items()}
    got = call(name, arguments)
    assert got[0] == code == call.direct(name, arguments)[0], got
    assert call.direct("show_proposal", {"proposal_id": queued[0].proposal_id})[1]["status"] == "pending"


def _mentis(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mentis", *args], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )


def test_propose_transcript_queues_each_check_once_and_accept_records_it(tmp_path: Path) -> None:
    repo = make_checkout(tmp_path)
    transcript = session_with_two_checks(repo).write(tmp_path / "session.jsonl")
    home = tmp_path / "home"
    env = dict(os.environ, MENTIS_HOME=str(home), MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="alice")
    env.pop("MENTIS_DATABASE_URL", None)
    done = _mentis(env, "propose", "transcript", str(transcript), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)
    assert [p["repository"] for p in first["queued"]] == ["github.com/acme/shop"] * 2
    assert [p["record"]["check"]["status"] for p in first["queued"]] == ["failed", "passed"]
    again = json.loads(_mentis(env, "propose", "transcript", str(transcript), "--json", cwd=tmp_path).stdout)
    assert (again["queued"], len(again["known"])) == ([], 2)

    pid = first["queued"][1]["proposal_id"]
    edit = json.dumps({"task_id": "cart-rounding", "inference": "rounding to 2 places keeps cents"})
    accepted = _mentis(env, "review", "accept", pid, "--edit", edit, "--json", cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stderr
    sql = "select agent_id, tags, inference from attempts where task_id = 'cart-rounding'"
    recall = _mentis(env, "recall", sql, "--json", cwd=tmp_path)
    [[agent, tags, inference]] = json.loads(recall.stdout)["rows"]
    assert agent == "alice" and f"proposal:{pid}" in tags
    assert inference == "rounding to 2 places keeps cents"


@pytest.fixture(scope="module")
def transcripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A real session's transcript, one whose directory is not a checkout here, and a text file."""
    root = tmp_path_factory.mktemp("transcripts")
    session = session_with_two_checks(make_checkout(root))
    good = session.write(root / "session.jsonl")
    nowhere = str(root / "nowhere")
    session.lines = [{**line, "cwd": nowhere} for line in session.lines]
    (root / "text.jsonl").write_text("hello\n")
    return {
        "GOOD": str(good),
        "NOFILE": str(root / "missing.jsonl"),
        "TEXT": str(root / "text.jsonl"),
        "ELSEWHERE": str(session.write(root / "moved.jsonl")),
        "CWD": str(root),
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["propose", "transcript", "NOFILE"], "cannot read transcript"),
        (["propose", "transcript", "TEXT"], "holds no Claude Code transcript line"),
        (["propose", "transcript", "ELSEWHERE"], "not a git checkout here; pass --repository"),
        (["review", "accept", "prop-x", "--edit", "{"], "edits: --edit is not JSON"),
        (["review", "accept", "PID", "--edit", '{"files": ["a"]}'], "edits"),
        (["review", "reject", "PID", "--reason", ""], "reason"),
    ],
)
def test_bad_cli_input_is_one_clear_line_and_writes_nothing(
    tmp_path: Path, transcripts: dict[str, str], args: list[str], message: str
) -> None:
    env = dict(os.environ, MENTIS_HOME=str(tmp_path / "home"), MENTIS_EMBEDDER="hash")
    env.pop("MENTIS_DATABASE_URL", None)
    cwd = Path(transcripts["CWD"])
    queued = json.loads(_mentis(env, "propose", "transcript", transcripts["GOOD"], "--json", cwd=cwd).stdout)
    names = {**transcripts, "PID": queued["queued"][0]["proposal_id"]}
    done = _mentis(env, *[names.get(a, a) for a in args], cwd=cwd)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    listed = json.loads(_mentis(env, "review", "list", "--status", "all", "--json", cwd=cwd).stdout)
    assert listed["total"] == 2 and {p["status"] for p in listed["proposals"]} == {"pending"}
