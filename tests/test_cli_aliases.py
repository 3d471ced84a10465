"""Commands are named after the operations they run; the older names are hidden aliases that do the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from mentis.cli import app

from .conftest import REPO

RENAMED = [
    ("record", "record-attempt"),
    ("outdated", "mark-conclusion-outdated"),
    ("forget", "forget-attempt"),
    ("verify", "verify-integrity"),
]
RECORD = ["--repo", REPO, "--task", "t1", "--action", "rounded each line", "--observation", "off by a cent"]


@pytest.fixture
def env(db_path: Path) -> dict[str, str]:
    return {"MENTIS_DB": str(db_path), "MENTIS_EMBEDDER": "hash", "MENTIS_AGENT_ID": "cli-test"}


def _json(env: dict[str, str], *args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, [*args, "--json"], env=env)
    assert result.exit_code == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


@pytest.mark.parametrize(("old", "new"), RENAMED)
def test_an_older_name_is_hidden_and_has_the_help_of_the_renamed_command(old: str, new: str) -> None:
    commands = get_command(app).commands  # type: ignore[attr-defined]
    assert (commands[old].hidden, commands[new].hidden) == (True, False)
    old_help, new_help = (
        " ".join(CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "200"}).output.split())
        for name in (old, new)
    )
    assert old_help.replace(f"mentis {old} ", f"mentis {new} ") == new_help


def test_record_and_record_attempt_append_the_same_attempt(env: dict[str, str]) -> None:
    first = _json(env, "record-attempt", *RECORD, "--check-command", "pytest", "--check-status", "failed")
    second = _json(env, "record", *RECORD, "--check-command", "pytest", "--check-status", "failed")
    assert first["status"] == second["status"] == "failed"
    assert [first["ledger"]["seq"], second["ledger"]["seq"]] == [0, 1]  # type: ignore[index]
    history = _json(env, "recall", "--repo", REPO, "--task", "t1")
    assert len(history["rows"]) == 2  # type: ignore[arg-type]


def test_outdated_and_mark_conclusion_outdated_append_corrections_alike(env: dict[str, str]) -> None:
    attempt = str(_json(env, "record-attempt", *RECORD)["attempt_id"])
    first = _json(env, "mark-conclusion-outdated", "--repo", REPO, attempt, "--reason", "tax.py moved")
    second = _json(env, "outdated", "--repo", REPO, attempt, "--reason", "tax.py moved")
    assert (first["attempt_id"], first["corrections_count"]) == (attempt, 1)
    assert (second["attempt_id"], second["corrections_count"]) == (attempt, 2)
    assert first["correction"]["reason"] == second["correction"]["reason"] == "tax.py moved"  # type: ignore[index]


def test_forget_and_forget_attempt_both_erase_an_attempt(env: dict[str, str]) -> None:
    one, two = (str(_json(env, "record-attempt", *RECORD)["attempt_id"]) for _ in range(2))
    first = _json(env, "forget-attempt", "--repo", REPO, one, "--reason", "held a secret")
    second = _json(env, "forget", "--repo", REPO, two, "--reason", "held a secret")
    assert (first["forgotten"], first["attempt_id"], first["ledger"]["seq"]) == (True, one, 2)  # type: ignore[index]
    assert (second["forgotten"], second["attempt_id"], second["ledger"]["seq"]) == (True, two, 3)  # type: ignore[index]
    gone = CliRunner().invoke(app, ["recall", "--repo", REPO, "--task", "t1"], env=env)
    assert gone.exit_code == 3 and "all its attempts were forgotten" in gone.stderr


def test_verify_and_verify_integrity_print_the_same_report(env: dict[str, str]) -> None:
    _json(env, "record-attempt", *RECORD)
    report = _json(env, "verify-integrity")
    assert report == _json(env, "verify")
    assert [c["chain"] for c in report["chains"]] == [REPO]  # type: ignore[attr-defined]
