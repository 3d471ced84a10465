"""How well ``mentis propose transcript`` finds the checks that ran in a session (issue 27):
recall (checks found / checks that ran to an exit) and precision (proposals that are a check that
ran, with the right status and the right edited files / proposals).

    .venv/bin/python bench/transcripts.py [--json]

No public Claude Code transcripts with known ground truth exist to download, so the sessions are
synthetic but their checks are real: every command below runs for real in a scratch git checkout
(pytest, unittest, mypy, ruff, make, npm with node) and its real output and exit code are written
into a Claude Code JSONL transcript the way Claude Code writes them (:class:`Transcript`; the
format's sources are in ``mentis/integrations/transcripts.py``). Each command carries its ground
truth: whether a person would call it a check. The proposals come from the library function the
CLI calls (:func:`mentis.integrations.transcripts.read_claude_code`) with the built-in patterns.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mentis.integrations.hooks.config import HookConfig, default_checks
from mentis.integrations.transcripts import read_claude_code

BIN = Path(sys.executable).parent


@dataclass
class Transcript:
    """Lines of one Claude Code session, appended in the order Claude Code writes them; each
    ``bash`` runs its command for real in ``cwd``."""

    session_id: str
    cwd: Path
    branch: str = "feature/rounding"
    lines: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, str] | None = None

    def _line(self, kind: str, message: dict[str, Any], **extra: Any) -> None:
        self.lines.append(
            {
                "type": kind,
                "uuid": str(uuid.uuid4()),
                "timestamp": f"2026-12-06T10:{len(self.lines) % 60:02d}:00.000Z",
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

    def say(self, text: str) -> None:
        """What the agent said (a text block of an assistant turn)."""
        self._line("assistant", {"role": "assistant", "content": [{"type": "text", "text": text}]})

    def edit(self, path: str, new: str) -> None:
        call = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": "Edit"}
        call["input"] = {"file_path": str(self.cwd / path), "old_string": "", "new_string": new}
        self._line("assistant", {"role": "assistant", "content": [call]})
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": "The file has been updated."}
        self._line("user", {"role": "user", "content": [result]})

    def bash(self, command: str, *, interrupted: bool = False) -> subprocess.CompletedProcess[str]:
        """Run ``command`` in the checkout for real, and write the call and its result
        (``interrupted``: written as a call the user interrupted, whatever it did)."""
        done = subprocess.run(
            command, shell=True, cwd=self.cwd, capture_output=True, text=True, check=False, env=self.env
        )
        call = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": "Bash"}
        call["input"] = {"command": command, "description": "run it"}
        self._line(
            "assistant", {"role": "assistant", "content": [{"type": "text", "text": "Running."}, call]}
        )
        output = "\n".join(s for s in (done.stdout.rstrip("\n"), done.stderr.rstrip("\n")) if s)
        if interrupted:
            text = "[Request interrupted by user for tool use]"
            result = {"type": "tool_result", "tool_use_id": call["id"], "content": text, "is_error": True}
            extra: dict[str, Any] = {"toolUseResult": {"stdout": "", "stderr": "", "interrupted": True}}
        elif done.returncode == 0:
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


def checkout(root: Path) -> Path:
    """A scratch git checkout with a module, its failing test, a Makefile and an npm package."""
    repo = root / "shop"
    (repo / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "cart.py").write_text(
        "def total(prices: list[float]) -> float:\n    return round(sum(prices), 1)\n"
    )
    (repo / "test_cart.py").write_text(
        "from cart import total\n\n\ndef test_total_keeps_cents():\n    assert total([0.1, 0.25]) == 0.35\n"
    )
    (repo / "sub" / "test_sub.py").write_text("def test_ok():\n    assert True\n")
    (repo / "Makefile").write_text(
        "test:\n\tpython -m pytest -q -p no:cacheprovider test_cart.py\nbuild:\n\ttrue\n"
    )
    (repo / "package.json").write_text('{"name": "shop", "scripts": {"test": "node t.js"}}\n')
    (repo / "t.js").write_text(
        "process.exit(require('fs').readFileSync('cart.py','utf8').includes(', 2)') ? 0 : 1)\n"
    )
    return repo


@dataclass(frozen=True)
class Step:
    command: str
    check: bool
    """Ground truth: a person reading the session would call this a check that ran."""
    interrupted: bool = False


PY = "python -m pytest -q -p no:cacheprovider"
BEFORE_FIX = [
    Step(f"{PY} test_cart.py", True),
    Step("ls", False),
    Step("git status --short", False),
    Step("cat cart.py", False),
    Step("echo 'now run pytest'", False),
    Step("grep -rn pytest . || true", False),
    Step(f"{BIN}/pytest -q -p no:cacheprovider test_cart.py", True),
    Step("pytest -q -p no:cacheprovider -k total test_cart.py", True),
    Step(f"cd sub && {PY}", True),
    Step("FOO=1 pytest -q -p no:cacheprovider test_cart.py", True),
    Step("timeout 120 pytest -q -p no:cacheprovider test_cart.py", True),
    Step("python -m mypy --no-incremental cart.py", True),
    Step("make test", True),
    Step("npm test --silent", True),
    Step("pytest --version", False),
    Step("python -c 'print(1 + 1)'", False),
    Step("make build", False),
    Step("git log --oneline -3 || true", False),
    Step(f"{PY} test_cart.py", True, interrupted=True),
]
AFTER_FIX = [
    Step(f"{PY} test_cart.py", True),
    Step("ruff check --no-cache .", True),
    Step("ruff format --check --no-cache .", True),
    Step("python -m unittest -q 2>&1 || true", True),
    Step("make test", True),
    Step("npm test --silent", True),
    Step("sed -n 1,2p cart.py", False),
    Step("pip list 2>/dev/null | head -3", False),
]


def session(repo: Path) -> tuple[Transcript, list[tuple[Step, int | None]]]:
    """One session: the steps before the fix, the fix (an Edit), the steps after; each step with
    the exit code it really had (None when interrupted)."""
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    t = Transcript(str(uuid.uuid4()), repo, env=env)
    t.prompt("the cart total drops a cent")
    ran: list[tuple[Step, int | None]] = []
    for step in BEFORE_FIX:
        code = t.bash(step.command, interrupted=step.interrupted).returncode
        ran.append((step, None if step.interrupted else code))
    (repo / "cart.py").write_text(
        "def total(prices: list[float]) -> float:\n    return round(sum(prices), 2)\n"
    )
    t.edit("cart.py", "    return round(sum(prices), 2)")
    for step in AFTER_FIX:
        ran.append((step, t.bash(step.command).returncode))
    return t, ran


def measure() -> dict[str, Any]:
    cfg = HookConfig(checks=tuple(default_checks()))
    with tempfile.TemporaryDirectory() as tmp:
        repo = checkout(Path(tmp))
        t, ran = session(repo)
        proposals = read_claude_code(t.write(Path(tmp) / "session.jsonl"), cfg)
        shutil.rmtree(repo, ignore_errors=True)
    commands = [step.command for step, _ in ran]
    truth = [(step, code) for step, code in ran if step.check and code is not None]
    found = {p.fields["check"]["command"] for p in proposals}
    right, wrong = [], []
    at = 0  # proposals come in the order their commands ran: pair each with the next such run
    for p in proposals:
        cmd, code = p.fields["check"]["command"], p.fields["check"]["exit_code"]
        nxt = next(
            (k for k in range(at, len(ran)) if ran[k][0].command == cmd and ran[k][1] is not None), None
        )
        if nxt is None:
            wrong.append(cmd)
            continue
        step, real = ran[nxt]
        at = nxt + 1
        status = "passed" if real == 0 else "failed"
        ok = step.check and code == real and p.fields["check"]["status"] == status
        (right if ok else wrong).append(cmd)
    missed = [s.command for s, _ in truth if s.command not in found]
    with_files = [(p.fields["check"]["command"], p.fields["files"]) for p in proposals if p.fields["files"]]
    return {
        "date": datetime.now(UTC).date().isoformat(),
        "commands": len(commands),
        "checks_that_ran": len(truth),
        "proposals": len(proposals),
        "found": len(truth) - len(missed),
        "recall": round((len(truth) - len(missed)) / len(truth), 3),
        "precision": round(len(right) / len(proposals), 3) if proposals else None,
        "missed": missed,
        "wrong": wrong,
        "proposals_with_files": with_files,  # only the first check after the edit should carry cart.py
    }


def main() -> None:
    data = measure()
    if "--json" in sys.argv:
        print(json.dumps(data, indent=2))
        return
    ran, proposed = data["checks_that_ran"], data["proposals"]
    print(f"{data['commands']} commands, {ran} checks ran to an exit, {proposed} proposed")
    print(f"recall {data['found']}/{data['checks_that_ran']} = {data['recall']:.3f}")
    right = data["proposals"] - len(data["wrong"])
    print(f"precision {right}/{data['proposals']} = {data['precision']:.3f}")
    for cmd in data["missed"]:
        print(f"  missed: {cmd}")
    for cmd in data["wrong"]:
        print(f"  wrong:  {cmd}")
    print(f"edited files carried by: {data['proposals_with_files']}")


if __name__ == "__main__":
    main()
