"""What a finished shell command says as an attempt, when it is a recognised check: one
implementation for the hooks (a check as it runs) and for transcripts (checks that ran in a
recorded session, :mod:`mentis.integrations.transcripts`).

A command is a check when :meth:`HookConfig.check_in` recognises it (the default patterns plus
the user's and the project's ``hooks.toml``). Its attempt has the command and exit status, the
scrubbed tail of its output, and the observation an agent reads first: the command, passed or
failed, and the output's last line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mentis.integrations.hooks.config import HookConfig
from mentis.integrations.hooks.payload import ShellRun

MAX_COMMAND_CHARS = 8192
MAX_FILES = 1000


@dataclass(frozen=True)
class CheckRun:
    """A recognised check that ran to an exit, scrubbed: the parts of its attempt."""

    command: str
    status: str
    exit_code: int
    output_tail: str

    def attempt_fields(self, files: list[str]) -> dict[str, Any]:
        """``action``, ``files``, ``observation`` and ``check`` of its attempt, after ``files`` changed."""
        short = short_command(self.command)
        last_line = next((ln.strip() for ln in reversed(self.output_tail.splitlines()) if ln.strip()), "")
        observation = f"`{short}` {self.status} (exit {self.exit_code})"
        if last_line:
            observation += f": {last_line[:300]}"
        kept = [p for p in files if storable_path(p)][:MAX_FILES]
        return {
            "action": f"ran `{short}`" + (f" after changing {len(kept)} files" if kept else ""),
            "files": kept,
            "observation": observation,
            "check": {
                "command": self.command,
                "status": self.status,
                "exit_code": self.exit_code,
                "output": self.output_tail,
            },
        }


def recognise(run: ShellRun | None, cfg: HookConfig) -> CheckRun | None:
    """``run`` as a check (command and output scrubbed, the output cut to its tail), or None
    when it is not a recognised check or did not run to an exit."""
    if run is None or run.exit_code is None or cfg.check_in(run.command) is None:
        return None
    from mentis.providers.scrub import scrub_text  # its patterns compile on first use

    return CheckRun(
        command=scrub_text(clean(run.command))[:MAX_COMMAND_CHARS],
        status="passed" if run.exit_code == 0 else "failed",
        exit_code=run.exit_code,
        output_tail=scrub_text(clean(run.output))[-cfg.output_tail_chars :],
    )


def clean(text: str) -> str:
    """Text the store accepts: no NUL characters, lone surrogates replaced."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def storable_path(path: str) -> bool:
    return 0 < len(path) <= 4096 and path == path.strip() and not any(ord(c) < 32 for c in path)


def short_command(command: str) -> str:
    one_line = " ".join(command.split())
    return one_line if len(one_line) <= 200 else one_line[:199] + "…"
