"""Optional LLM extraction of thoughts from a session's conversation, over the OpenAI-compatible
``/chat/completions`` the rerank uses (``mentis propose transcript --llm``; docs/review.md).

:meth:`Extractor.extract` sends one chunk of a session — numbered lines of what the user asked and
what the agent said, each **scrubbed** before it is sent — and asks for
``{"thoughts": [{"kind": "decision"|"finding"|"constraint"|"lesson", "content": "…",
"from_line": n, "to_line": m}]}``. All or nothing: a failed call, a reply that is not that JSON
object, an unknown kind, an empty or over-long content, or a line range outside the chunk raises
:class:`ExtractFailed` and nothing of the run is proposed.

Tokens: the provider's own ``usage`` (``prompt_tokens``, ``completion_tokens``) is what a run
reports after; before sending, :func:`estimate_tokens` (about four characters a token, rounded
up, plus the instructions) is what the caller compares with the user's budget. Each request asks
for at most :data:`MAX_OUTPUT_TOKENS`.

Settings (:meth:`Extractor.from_env`): the rerank provider's — ``MENTIS_RERANK_BASE_URL`` (default
OpenRouter), ``MENTIS_RERANK_API_KEY`` else ``OPENROUTER_API_KEY``, ``MENTIS_RERANK_TIMEOUT`` — with
``MENTIS_EXTRACT_MODEL`` (default: ``MENTIS_RERANK_MODEL``, else ``openai/gpt-4o-mini``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from mentis.errors import ExtractFailed
from mentis.providers.http import OPENROUTER_BASE_URL, OpenAIClient, env_api_key, env_float
from mentis.providers.scrub import scrub_text

DEFAULT_MODEL = "openai/gpt-4o-mini"
KINDS = ("decision", "finding", "constraint", "lesson")
MAX_OUTPUT_TOKENS = 1024
MAX_CONTENT_CHARS = 2000
CHARS_PER_TOKEN = 4

SYSTEM_PROMPT = """\
You read part of a coding agent's session: numbered lines of what the user asked and what the \
agent said. Extract only what a later agent working on the same code should know: decisions \
taken (and why), findings about the code or its tools, constraints that must hold, and lessons \
learned from a mistake. Skip chit-chat, plans that were not carried out, and anything uncertain.
Reply with only a JSON object, no prose: {"thoughts": [{"kind": "decision" | "finding" | \
"constraint" | "lesson", "content": "<one or two self-contained sentences>", "from_line": <n>, \
"to_line": <n>}]} where from_line..to_line are the lines it comes from. Reply {"thoughts": []} \
when there is nothing worth keeping."""


@dataclass(frozen=True)
class Line:
    """One numbered line of a session (its line in the transcript file) and its text."""

    number: int
    speaker: str
    text: str


@dataclass(frozen=True)
class Extracted:
    kind: str
    content: str
    from_line: int
    to_line: int


@dataclass(frozen=True)
class Usage:
    tokens_in: int
    tokens_out: int


def render(lines: Sequence[Line], max_chars: int) -> str:
    """The chunk as the model reads it: ``<line> <speaker>: <text>``, each text scrubbed and cut."""
    return "\n".join(f"{ln.number} {ln.speaker}: {scrub_text(ln.text[:max_chars])}" for ln in lines)


def estimate_tokens(text: str) -> int:
    """About how many tokens ``text`` and the instructions cost (four characters a token)."""
    return -(-(len(text) + len(SYSTEM_PROMPT)) // CHARS_PER_TOKEN)


class Extractor:
    """LLM extraction of thoughts. Close it when done."""

    def __init__(
        self, base_url: str, model: str = DEFAULT_MODEL, api_key: str | None = None, timeout: float = 60.0
    ):
        self.model = model
        self._http = OpenAIClient(base_url, api_key, timeout=timeout, fail=ExtractFailed, retries=1)
        self.base_url = self._http.base_url

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Extractor:
        base_url = env.get("MENTIS_RERANK_BASE_URL", "").strip() or OPENROUTER_BASE_URL
        model = env.get("MENTIS_EXTRACT_MODEL", "").strip() or env.get("MENTIS_RERANK_MODEL", "").strip()
        return cls(
            base_url=base_url,
            model=model or DEFAULT_MODEL,
            api_key=env_api_key(env, ("MENTIS_RERANK_API_KEY", "OPENROUTER_API_KEY"), base_url),
            timeout=env_float(env, "MENTIS_RERANK_TIMEOUT", 60.0),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Extractor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request_body(self, text: str) -> dict[str, Any]:
        return {
            "model": self.model,
            "temperature": 0,
            "max_tokens": MAX_OUTPUT_TOKENS,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": text},
            ],
        }

    def extract(self, lines: Sequence[Line], text: str) -> tuple[list[Extracted], Usage]:
        """The thoughts in one chunk (``text``, rendered from ``lines``), and the tokens it cost."""
        reply = self._http.post("chat/completions", self.request_body(text))
        return parse_thoughts(reply, lines[0].number, lines[-1].number, self._http.redact), usage_of(reply)


_FENCE = re.compile(r"^```[A-Za-z]*\s*|\s*```$")


def usage_of(reply: Any) -> Usage:
    usage = reply.get("usage") if isinstance(reply, dict) else None
    if not isinstance(usage, dict):
        return Usage(0, 0)
    tokens = [usage.get(k) for k in ("prompt_tokens", "completion_tokens")]
    return Usage(*(t if isinstance(t, int) and not isinstance(t, bool) and t >= 0 else 0 for t in tokens))


def parse_thoughts(reply: Any, first: int, last: int, redact: Any = scrub_text) -> list[Extracted]:
    """The thoughts of a chat-completions ``reply`` for a chunk of lines ``first..last``; else
    :class:`ExtractFailed` naming what is wrong."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    message = (
        choices[0].get("message")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict)
        else None
    )
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or not content.strip():
        raise ExtractFailed("the reply has no message content")
    text = _FENCE.sub("", content.strip())
    try:
        payload = json.loads(text)
    except ValueError:
        raise ExtractFailed(f"the reply is not JSON: {redact(text[:80])!r}") from None
    items = payload.get("thoughts") if isinstance(payload, dict) else None
    if not isinstance(items, list):
        raise ExtractFailed("the reply has no 'thoughts' list")
    found = []
    for n, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise ExtractFailed(f"thought {n} is not an object")
        kind, body, lo, hi = (item.get(k) for k in ("kind", "content", "from_line", "to_line"))
        if kind not in KINDS:
            raise ExtractFailed(
                f"thought {n} has kind {redact(str(kind))[:40]!r}, not one of {', '.join(KINDS)}"
            )
        if not isinstance(body, str) or not body.strip() or len(body) > MAX_CONTENT_CHARS:
            raise ExtractFailed(f"thought {n} has no content, or more than {MAX_CONTENT_CHARS} characters")
        if not (_line_number(lo) and _line_number(hi) and first <= lo <= hi <= last):
            raise ExtractFailed(f"thought {n} has lines {lo!r}..{hi!r}, outside the chunk's {first}..{last}")
        found.append(Extracted(kind, scrub_text(body.strip()), lo, hi))
    return found


def _line_number(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
