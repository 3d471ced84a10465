"""``mentis stats``: the CLI prints what the service counts and refuses bad input."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from mentis.cli import app
from mentis.memory import Caller, Memory
from mentis.stats import StatsInput
from tests.conformance.test_stats import ONE, _fill


def test_cli_stats_prints_what_the_service_counts(
    memory: Memory, caller: Caller, mentis_env: dict[str, str]
) -> None:
    _fill(memory, caller)
    expected = memory.stats(caller, StatsInput(repository=ONE)).model_dump(mode="json")
    result = CliRunner().invoke(app, ["stats", "-r", ONE, "--json"], env=mentis_env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["stats", "--bogus"], 2, "No such option"),
        (["stats", "-r", ""], 2, "repository"),
        (["stats", "-r", "github.com/no/such"], 3, "github.com/no/such"),
    ],
)
def test_cli_stats_bad_input_exits_non_zero_with_a_clear_error(
    memory: Memory, mentis_env: dict[str, str], args: list[str], code: int, says: str
) -> None:
    before = os.path.getsize(mentis_env["MENTIS_DB"])
    result = CliRunner().invoke(app, args, env=mentis_env)
    assert result.exit_code == code, result.output
    assert says in result.stderr
    assert os.path.getsize(mentis_env["MENTIS_DB"]) == before
