"""``mentis stats`` refuses bad input with a clear error and writes nothing (that it prints what the
service counts is ``tests/test_transport_parity.py``)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from mentis.cli import app
from mentis.service.memory import Memory


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
