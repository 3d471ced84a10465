"""Finding 9 of security issue 24: ``mentis skills export`` and ``import`` follow no links.

A skills folder is often a checkout someone else committed. Export used to create
``--to/<name>/`` with ``mkdir(exist_ok=True)`` and so wrote ``SKILL.md`` through a ``<name>``
symlink pointing outside ``--to``; import globbed ``*/SKILL.md`` and read each with
``read_bytes()``, so a ``SKILL.md`` linked to ``/dev/zero`` was read until MemoryError and a FIFO
blocked the command forever. Now every folder and file below the one the user named is opened
relative to its parent's descriptor with ``O_NOFOLLOW``, only regular files are read, and at most
the skill size limit is read from one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mentis.api.common import parse
from mentis.api.skill_text import MAX_SKILL_BYTES
from mentis.api.skills import UploadSkillInput
from mentis.cli import app
from mentis.errors import InvalidInput
from mentis.service.memory import Memory
from tests.security.stores import ADMIN, settings, state  # noqa: F401

REPO = "team-a/shop"


def skill_md(name: str, body: str = "Run `make test`.\n") -> str:
    return f"---\nname: {name}\ndescription: How to {name.replace('-', ' ')}\n---\n{body}"


@pytest.fixture
def memory(open_memory: Callable[[], Memory]) -> Memory:
    m = open_memory()
    for name in ("run-tests", "cut-release"):
        m.upload_skill(ADMIN, parse(UploadSkillInput, {"repository": REPO, "content": skill_md(name)}))
    return m


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` (links not followed) with what it is."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
            out[str(path.relative_to(root))] = kind
    return out


def import_error(memory: Memory, source: Path) -> InvalidInput:
    before = state(memory)
    with pytest.raises(InvalidInput) as caught:
        memory.import_skills(ADMIN, REPO, source)
    assert state(memory) == before
    return caught.value


# ---------------------------------------------------------------- export


def test_export_refuses_a_skill_folder_that_is_a_symlink_out_of_to_and_writes_nothing(
    memory: Memory, tmp_path: Path
) -> None:
    to, outside = tmp_path / "to", tmp_path / "outside"
    to.mkdir()
    outside.mkdir()
    (to / "run-tests").symlink_to(outside, target_is_directory=True)

    with pytest.raises(InvalidInput) as caught:
        memory.export_skills(ADMIN, REPO, to)

    assert caught.value.field == "to"
    assert str(to / "run-tests") in caught.value.message and "symbolic link" in caught.value.message
    assert list(outside.iterdir()) == []
    assert tree(to) == {"run-tests": "link"}  # cut-release was not written either


def test_export_refuses_a_skill_md_that_is_a_dangling_symlink(memory: Memory, tmp_path: Path) -> None:
    to, outside = tmp_path / "to", tmp_path / "outside"
    (to / "cut-release").mkdir(parents=True)
    outside.mkdir()
    (to / "cut-release" / "SKILL.md").symlink_to(outside / "planted.md")

    with pytest.raises(InvalidInput, match="already exists"):
        memory.export_skills(ADMIN, REPO, to)

    assert list(outside.iterdir()) == []
    assert tree(to) == {"cut-release": "dir", "cut-release/SKILL.md": "link"}


def test_export_into_real_folders_still_works_and_a_symlinked_to_is_the_users_choice(
    memory: Memory, tmp_path: Path
) -> None:
    real = tmp_path / "real"
    (real / "run-tests").mkdir(parents=True)  # an empty folder of the skill's name is fine
    link = tmp_path / "skills"
    link.symlink_to(real, target_is_directory=True)

    done = memory.export_skills(ADMIN, REPO, link)

    assert sorted(done.written) == [
        str(link / "cut-release" / "SKILL.md"),
        str(link / "run-tests" / "SKILL.md"),
    ]
    assert (real / "run-tests" / "SKILL.md").read_text() == skill_md("run-tests")
    assert tree(real) == {
        "cut-release": "dir",
        "cut-release/SKILL.md": "file",
        "run-tests": "dir",
        "run-tests/SKILL.md": "file",
    }


# ---------------------------------------------------------------- import


@pytest.fixture
def source(tmp_path: Path) -> Path:
    folder = tmp_path / "skills"
    (folder / "lint").mkdir(parents=True)
    (folder / "lint" / "SKILL.md").write_text(skill_md("lint"))
    return folder


def test_import_refuses_a_skill_md_linked_to_dev_zero_without_reading_it(
    memory: Memory, source: Path
) -> None:
    (source / "zero").mkdir()
    (source / "zero" / "SKILL.md").symlink_to("/dev/zero")

    error = import_error(memory, source)

    assert error.field == "source"
    assert str(source / "zero" / "SKILL.md") in error.message and "symbolic link" in error.message


def test_import_refuses_a_top_level_skill_md_that_is_not_a_regular_file(
    memory: Memory, tmp_path: Path
) -> None:
    folder = tmp_path / "one-skill"
    folder.mkdir()
    os.mkfifo(folder / "SKILL.md")
    error = import_error(memory, folder)
    assert "not a regular file" in error.message and str(folder / "SKILL.md") in error.message


def test_import_of_a_fifo_skill_md_is_refused_at_once_instead_of_blocking(
    memory: Memory, source: Path
) -> None:
    (source / "pipe").mkdir()
    fifo = source / "pipe" / "SKILL.md"
    os.mkfifo(fifo)
    outcome: list[Any] = []

    def run() -> None:
        try:
            memory.import_skills(ADMIN, REPO, source)
            outcome.append("imported")
        except Exception as exc:  # the outcome is asserted below
            outcome.append(exc)

    before = state(memory)
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():  # unblock the reader so the thread ends, then fail
        with open(fifo, "w"):
            pass
        worker.join(timeout=20)
        pytest.fail("import blocked on a FIFO")
    (error,) = outcome
    assert isinstance(error, InvalidInput)
    assert str(fifo) in error.message and "not a regular file" in error.message
    assert state(memory) == before


def test_import_refuses_a_skill_folder_that_is_a_symlink(
    memory: Memory, source: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "private" / "deploy"
    elsewhere.mkdir(parents=True)
    (elsewhere / "SKILL.md").write_text(skill_md("deploy", "the private deploy steps\n"))
    (source / "deploy").symlink_to(elsewhere, target_is_directory=True)

    error = import_error(memory, source)

    assert str(source / "deploy") in error.message and "symbolic link" in error.message


def test_import_refuses_a_skill_md_linked_to_a_regular_file(
    memory: Memory, source: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text(skill_md("deploy", "token: hunter2\n"))
    (source / "deploy").mkdir()
    (source / "deploy" / "SKILL.md").symlink_to(secret)

    error = import_error(memory, source)

    assert str(source / "deploy" / "SKILL.md") in error.message and "symbolic link" in error.message


def test_import_reads_at_most_the_size_limit_of_a_file(memory: Memory, source: Path) -> None:
    (source / "huge").mkdir()
    with open(source / "huge" / "SKILL.md", "wb") as f:
        f.write(skill_md("huge").encode())
        f.truncate(MAX_SKILL_BYTES + 1)  # sparse: the size the limit refuses, one byte over

    error = import_error(memory, source)

    assert str(source / "huge" / "SKILL.md") in error.message and f"{MAX_SKILL_BYTES:,}" in error.message


def test_import_ignores_plain_files_and_links_to_files_beside_the_skill_folders(
    memory: Memory, source: Path, tmp_path: Path
) -> None:
    (source / "README.md").write_text("skills of this repository\n")
    (tmp_path / "notes.txt").write_text("notes\n")
    (source / "notes").symlink_to(tmp_path / "notes.txt")
    (source / "empty").mkdir()

    done = memory.import_skills(ADMIN, REPO, source)

    assert [u.skill_id for u in done.uploaded] == ["lint"]


# ---------------------------------------------------------------- the CLI's upload


def test_cli_upload_reads_at_most_the_size_limit_of_the_file_it_is_given(tmp_path: Path) -> None:
    """`mentis skills upload` follows the path the user gave (a link or a FIFO such as `<(...)`
    is their choice), but reads no more than a skill may hold: /dev/zero ends in exit 2."""
    env = {"MENTIS_DB": str(tmp_path / "m.db"), "MENTIS_EMBEDDER": "hash", "MENTIS_AGENT_ID": "cli"}
    result = CliRunner().invoke(app, ["skills", "upload", "-r", REPO, "/dev/zero"], env=env)
    assert result.exit_code == InvalidInput.exit_code, result.output
    assert "/dev/zero is over 1,048,576 bytes" in result.stderr
    piped = CliRunner().invoke(
        app, ["skills", "upload", "-r", REPO, "-"], env=env, input=b"x" * (MAX_SKILL_BYTES + 1)
    )
    assert piped.exit_code == InvalidInput.exit_code and "stdin is over" in piped.stderr
