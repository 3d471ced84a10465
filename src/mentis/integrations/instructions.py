"""The block of agent instructions for AGENTS.md / CLAUDE.md / GEMINI.md, and writing it between markers.

``render`` gives the block; ``write`` inserts it into a file, or replaces the block already there
(between ``BEGIN`` and ``END``), so running it again changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from mentis.errors import ConfigError
from mentis.integrations.harnesses import files

BEGIN = (
    "<!-- mentis:instructions:begin (written by `mentis instructions --write`; edits here are replaced) -->"
)
END = "<!-- mentis:instructions:end -->"

# How each harness names an MCP server's tools, when it prefixes them.
_TOOL_NAMES = {"claude-code": "mcp__mentis__{}", "claude-desktop": "mcp__mentis__{}"}
_FILES = {"claude-code": "CLAUDE.md", "gemini-cli": "GEMINI.md"}


def suggested_file(harness: str | None) -> str:
    return _FILES.get(harness or "", "AGENTS.md")


def render(harness: str | None = None) -> str:
    """The instructions block, markers included, ending with a newline."""
    name = _TOOL_NAMES.get(harness or "", "{}")

    def tool(t: str) -> str:
        return f"`{name.format(t)}`"

    lines = [
        BEGIN,
        "## Memory (Mentis)",
        "",
        "This project keeps a shared memory of what agents tried, in the `mentis` MCP server.",
        "",
        f"- **Search first.** Before starting a task, and whenever you are stuck, call {tool('search')} "
        "with the problem in your own words. Read a promising task's whole history with "
        f"{tool('recall')} (repository + task_id). Results marked failed or outdated tell you what "
        "not to repeat.",
        f"- **Record every check.** After each check you run (tests, build, linter, type checker), "
        f"call {tool('record_attempt')}: the `action` you took, the `files`, what you saw "
        "(`observation`), what you conclude (`inference`), and the `check` with its command and "
        "status. Record failed checks too: they save the next agent from repeating them.",
        f"- **Correct the record.** When a recorded conclusion no longer holds (the code changed, or "
        f"it was wrong), call {tool('mark_conclusion_outdated')} with the attempt id (`recall` gives it) and "
        "the reason.",
        "- Use the checkout's normalised git remote as `repository` (e.g. `github.com/acme/shop`) "
        "and one `task_id` per task (the branch name will do). `mentis context --json` prints the "
        "commit and file hashes to pass as `code_context`.",
        END,
    ]
    return "\n".join(lines) + "\n"


def write(path: Path, block: str) -> bool:
    """Insert ``block`` into ``path`` (created if missing), or replace the one between the markers.
    Returns whether the file changed; a file with unmatched markers is refused untouched."""
    target, before = files.read(path)
    text = before or ""
    newline = "\r\n" if "\r\n" in text else "\n"
    block = block.replace("\n", newline)
    begins, ends = text.count(BEGIN), text.count(END)
    if begins == 0 and ends == 0:
        after = block if not text else text + ("" if text.endswith(newline) else newline) + newline + block
    elif begins == 1 and ends == 1 and text.index(BEGIN) < text.index(END):
        start = text.index(BEGIN)
        end = text.index(END) + len(END)
        if text.startswith(newline, end):
            end += len(newline)
        after = text[:start] + block + text[end:]
    else:
        raise ConfigError(
            f"{path}: found {begins} begin and {ends} end Mentis markers out of order or repeated; "
            "fix them by hand (or delete the old block) and run again; the file was not changed"
        )
    if after == before:
        return False
    files.write_atomic(target, after, private=False)
    return True
