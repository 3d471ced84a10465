"""Reading Claude Code transcripts: each recognised check that ran becomes one proposed attempt,
found by the hooks' own recogniser, with the files edited before it and its source episode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mentis.errors import InvalidInput
from mentis.integrations.hooks.config import HookConfig, default_checks
from mentis.integrations.transcripts import read_claude_code, task_id

from .transcript_support import make_checkout, session_with_two_checks

CFG = HookConfig(checks=tuple(default_checks()))


def test_each_check_that_ran_is_proposed_with_its_real_outcome_and_the_edits_before_it(
    tmp_path: Path,
) -> None:
    repo = make_checkout(tmp_path)
    t = session_with_two_checks(repo)
    found = read_claude_code(t.write(tmp_path / "session.jsonl"), CFG)
    assert len(found) == 2  # `ls` is no check
    failed, passed = found
    assert failed.fields["check"]["status"] == "failed" and failed.fields["check"]["exit_code"] == 1
    assert "assert 0.3 == 0.35" in failed.fields["check"]["output"]  # pytest's real report
    assert (
        failed.fields["observation"].startswith("`") and "failed (exit 1): " in failed.fields["observation"]
    )
    assert failed.fields["files"] == []
    assert passed.fields["check"]["status"] == "passed" and passed.fields["files"] == ["cart.py"]
    assert "1 passed" in passed.fields["check"]["output"]
    assert passed.fields["action"].endswith("after changing 1 files")
    assert {f.fields["task_id"] for f in found} == {"feature-rounding-5f0c2a9e"}
    assert failed.episode.session_id == t.session_id and failed.episode.from_line == 1
    assert passed.episode.from_line == failed.episode.to_line + 1
    assert passed.episode.to_line == len(t.lines)
    assert (failed.cwd, failed.branch) == (str(repo), "feature/rounding")


def test_a_secret_in_a_checks_output_is_scrubbed_before_it_is_proposed(tmp_path: Path) -> None:
    repo = make_checkout(tmp_path)
    token = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    (repo / "test_cart.py").write_text(f"def test_key():\n    key = {token!r}\n    assert not key, key\n")
    from .transcript_support import Transcript

    t = Transcript("s-secret", repo)
    t.bash("python -m pytest -q -p no:cacheprovider test_cart.py")
    [found] = read_claude_code(t.write(tmp_path / "s.jsonl"), CFG)
    assert found.fields["check"]["status"] == "failed" and token not in json.dumps(found.fields)


def test_a_line_half_written_and_lines_of_other_kinds_are_skipped(tmp_path: Path) -> None:
    repo = make_checkout(tmp_path)
    t = session_with_two_checks(repo)
    t.lines.insert(0, {"type": "summary", "summary": "cart work", "leafUuid": "x"})
    t.lines.insert(1, {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}})
    assert len(read_claude_code(t.write(tmp_path / "s.jsonl", torn=True), CFG)) == 2


def test_task_ids_group_by_branch_and_session() -> None:
    assert task_id("feature/x y", "abcdef123456") == "feature-x-y-abcdef12"
    assert task_id(None, "abcdef123456") == "session-abcdef12"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "holds no Claude Code transcript line"),
        ("not json\n[1, 2]\n", "holds no Claude Code transcript line"),
    ],
)
def test_a_file_that_is_no_transcript_is_refused_naming_it(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(content)
    with pytest.raises(InvalidInput, match=message) as raised:
        read_claude_code(path, CFG)
    assert raised.value.field == "file" and str(path) in raised.value.message


def test_a_missing_transcript_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read transcript"):
        read_claude_code(tmp_path / "gone.jsonl", CFG)
