"""One small module per coding-agent harness behind one interface (``base.Harness``)."""

from __future__ import annotations

from mentis.errors import InvalidInput
from mentis.integrations.harnesses.base import Harness
from mentis.integrations.harnesses.claude_code import ClaudeCode
from mentis.integrations.harnesses.claude_desktop import ClaudeDesktop
from mentis.integrations.harnesses.codex import Codex
from mentis.integrations.harnesses.cursor import Cursor
from mentis.integrations.harnesses.gemini_cli import GeminiCli
from mentis.integrations.harnesses.opencode import OpenCode
from mentis.integrations.harnesses.vscode import VSCode
from mentis.integrations.harnesses.windsurf import Windsurf

HARNESSES: dict[str, Harness] = {
    h.name: h
    for h in (ClaudeCode(), ClaudeDesktop(), Codex(), Cursor(), VSCode(), GeminiCli(), OpenCode(), Windsurf())
}


def get(name: str) -> Harness:
    """The harness called ``name``; an unknown name lists the known ones."""
    try:
        return HARNESSES[name]
    except KeyError:
        raise InvalidInput(
            f"unknown harness {name!r}; known harnesses: {', '.join(HARNESSES)}", "harness"
        ) from None


__all__ = ["HARNESSES", "Harness", "get"]
