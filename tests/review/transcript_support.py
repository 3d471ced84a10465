"""Claude Code transcripts for the tests, built from the real output of real checks: each check's
command is run here (pytest on a real failing, then passing, test file) and its output and exit
code written into the transcript the way Claude Code writes them (see
mentis.integrations.transcripts for the format and its sources)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Transcript:
    """Lines of one session, appended in the order Claude Code writes them."""

    session_id: str
    cwd: Path
    branch: str = "feature/rounding"
    lines: list[dict[str, Any]] = field(default_factory=list)

    def _line(self, kind: str, message: dict[str, Any], **extra: Any) -> None:
        self.lines.append(
            {
                "type": kind,
                "uuid": str(uuid.uuid4()),
                "timestamp": f"2026-12-06T10:{len(self.lines):02d}:00.000Z",
                "sessionId": self.session_id,
                "cwd": str(self.cwd),
                "gitBranch": self.branch,
                "version": "2.1.0",
                "message": message,
                **extra,
            }
        )

    def prompt(self, text: str) -> None:
        self._line("user", {"role": "user", "content": text})

    def edit(self, path: str, new: str) -> None:
        call = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": "Edit"}
        call["input"] = {"file_path": str(self.cwd / path), "old_string": "", "new_string": new}
        self._line("assistant", {"role": "assistant", "content": [call]})
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": "The file has been updated."}
        self._line("user", {"role": "user", "content": [result]})

    def bash(self, command: str) -> subprocess.CompletedProcess[str]:
        """Run ``command`` in the checkout for real, and write the call and its result."""
        done = subprocess.run(command, shell=True, cwd=self.cwd, capture_output=True, text=True, check=False)
        call = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": "Bash"}
        call["input"] = {"command": command, "description": "run it"}
        self._line(
            "assistant", {"role": "assistant", "content": [{"type": "text", "text": "Running."}, call]}
        )
        output = "\n".join(s for s in (done.stdout.rstrip("\n"), done.stderr.rstrip("\n")) if s)
        if done.returncode == 0:
            result = {"type": "tool_result", "tool_use_id": call["id"], "content": output, "is_error": False}
            extra = {"toolUseResult": {"stdout": done.stdout, "stderr": done.stderr, "interrupted": False}}
        else:
            text = f"Exit code {done.returncode}\n{output}"
            result = {"type": "tool_result", "tool_use_id": call["id"], "content": text, "is_error": True}
            extra = {"toolUseResult": f"Error: {text}"}
        self._line("user", {"role": "user", "content": [result]}, **extra)
        return done

    def write(self, path: Path, *, torn: bool = False) -> Path:
        text = "".join(json.dumps(line) + "\n" for line in self.lines)
        path.write_text(text + ('{"type": "assistant", "mess' if torn else ""))
        return path


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
