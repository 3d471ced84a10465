"""Claude Code transcripts for the tests, built from the real output of real checks: each check's
command is run here (pytest on a real failing, then passing, test file) and its output and exit
code written into the transcript the way Claude Code writes them (bench/transcripts.py's
``Transcript``; mentis.integrations.transcripts has the format and its sources)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
from transcripts import (
    Transcript as _Transcript,
)  # bench/transcripts.py: one builder for the bench and the tests

__all__ = ["Transcript", "make_checkout", "session_with_two_checks"]

CHECK_ENV = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
"""The checks' environment: the pytest they run loads no installed plugins (this venv's schemathesis,
hypothesis, playwright and others add ~2 s of start-up to each run and nothing to its output)."""


@dataclass
class Transcript(_Transcript):
    """bench/transcripts.py's builder, running its commands in :data:`CHECK_ENV`."""

    env: dict[str, str] | None = field(default_factory=lambda: dict(CHECK_ENV))


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def make_checkout(root: Path) -> Path:
    """A git checkout with a remote, a module and a failing test of it."""
    repo = root / "shop"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "remote", "add", "origin", "git@github.com:acme/shop.git")
    (repo / "cart.py").write_text("def total(prices):\n    return round(sum(prices), 1)\n")
    (repo / "test_cart.py").write_text(
        "from cart import total\n\n\ndef test_total_keeps_cents():\n    assert total([0.1, 0.25]) == 0.35\n"
    )
    return repo


def session_with_two_checks(
    repo: Path, session_id: str = "5f0c2a9e-1111-4222-8333-444455556666"
) -> Transcript:
    """A session that runs pytest (failing for real), an `ls` (no check), fixes the code and runs
    pytest again (passing for real)."""
    t = Transcript(session_id, repo)
    t.prompt("the cart total drops a cent")
    pytest = f"{sys.executable} -m pytest -q -p no:cacheprovider test_cart.py"
    assert t.bash(pytest).returncode == 1
    t.bash("ls")
    (repo / "cart.py").write_text("def total(prices):\n    return round(sum(prices), 2)\n")
    t.edit("cart.py", "    return round(sum(prices), 2)")
    assert t.bash(pytest).returncode == 0
    return t
