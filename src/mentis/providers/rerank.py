"""Optional LLM usefulness rerank over an OpenAI-compatible ``/chat/completions`` (DESIGN §5).

:meth:`Reranker.rerank` sends the query and the candidate tasks' texts (scrubbed, each cut to
``max_chars``) and asks for ``{"scores": [{"id": "1", "score": 0..1}, …]}``. Candidates are
numbered ``"1"…"n"`` in the order given (the model copies short ids reliably; the caller's
keys are never sent). All or nothing: a failed or slow call, a reply that is not that JSON
object, an id missing, repeated or unknown, or a score that is not a number in [0, 1] raises
:class:`RerankFailed` with a short reason, and the caller keeps the fused order and says so.

:func:`apply_rerank` orders candidates by score, fused rank breaking ties.

Settings for :meth:`Reranker.from_env` (used when ``MENTIS_RERANKER=openai``; default ``off``; read
once by :mod:`mentis.config` and passed in):
``MENTIS_RERANK_BASE_URL`` (default ``https://openrouter.ai/api/v1``), ``MENTIS_RERANK_MODEL``
(default ``typesafe/jev-1.13``), ``MENTIS_RERANK_API_KEY`` else ``OPENROUTER_API_KEY``,
``MENTIS_RERANK_TIMEOUT`` seconds (default 20).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from mentis.errors import ConfigError, RerankFailed
from mentis.providers.http import OPENROUTER_BASE_URL, OpenAIClient, env_api_key, env_float
from mentis.providers.scrub import scrub_text

if TYPE_CHECKING:
    from mentis.config import Settings

DEFAULT_MODEL = "typesafe/jev-1.13"
MAX_CHARS = 1500
"""Characters of each candidate's text sent."""
MAX_QUERY_CHARS = 4000

SYSTEM_PROMPT = """\
You rank search results from a memory of coding agents' past work.
The user message is a JSON object with a "query" (a problem an agent is working on, in its own \
words) and "candidates", each with an "id" and a "text": one task's recorded history (what was \
tried, what was observed, what was concluded).
For every candidate, judge how useful its history would be to the agent working on the query: \
1 means it is the same problem and its attempts answer it or save real work; 0.5 means related \
and partly useful; 0 means unrelated. Judge usefulness, not wording overlap.
Reply with only a JSON object, no prose: {"scores": [{"id": "<id>", "score": <number from 0 to 1>}]} \
with exactly one entry for each candidate id."""


@dataclass(frozen=True)
class RerankItem:
    """One candidate: the caller's key (never sent) and the text the model judges."""

    key: str
    text: str


class Reranker:
    """LLM usefulness scores for search candidates. Close it when done."""

    def __init__(
        self,
        base_url: str,
        model: str = DEFAULT_MODEL,
        api_key: str | None = None,
        timeout: float = 20.0,
        *,
        max_chars: int = MAX_CHARS,
        retries: int = 0,
        backoff: float = 0.5,
        max_wait: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.model = model
        self.max_chars = max_chars
        self._http = OpenAIClient(
            base_url,
            api_key,
            timeout=timeout,
            fail=RerankFailed,
            retries=retries,
            backoff=backoff,
            max_wait=max_wait,
            sleep=sleep,
        )
        self.base_url = self._http.base_url

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Reranker:
        """Build the reranker from ``MENTIS_RERANK_*`` settings (see the module docstring)."""
        base_url = env.get("MENTIS_RERANK_BASE_URL", "").strip() or OPENROUTER_BASE_URL
        return cls(
            base_url=base_url,
            model=env.get("MENTIS_RERANK_MODEL", "").strip() or DEFAULT_MODEL,
            api_key=env_api_key(env, ("MENTIS_RERANK_API_KEY", "OPENROUTER_API_KEY"), base_url),
            timeout=env_float(env, "MENTIS_RERANK_TIMEOUT", 20.0),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Reranker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request_body(self, query: str, candidates: Sequence[RerankItem]) -> dict[str, Any]:
        """The chat-completions request for ``candidates`` (texts scrubbed and cut)."""
        user = {
            "query": scrub_text(query[:MAX_QUERY_CHARS]),
            "candidates": [
                {"id": str(n), "text": scrub_text(item.text[: self.max_chars])}
                for n, item in enumerate(candidates, start=1)
            ],
        }
        return {
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": json.dumps(user, ensure_ascii=False)},
            ],
        }

    def rerank(self, query: str, candidates: Sequence[RerankItem]) -> list[float]:
        """One usefulness score in [0, 1] per candidate, in the order given; else :class:`RerankFailed`."""
        if not candidates:
            return []
        reply = self._http.post("chat/completions", self.request_body(query, candidates))
        return parse_scores(reply, len(candidates), self._http.redact)


_FENCE = re.compile(r"^```[A-Za-z]*\s*|\s*```$")


def _content(reply: Any) -> str:
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices:
        raise RerankFailed("the reply has no choices")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: [{"type": "text", "text": …}]
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str) or not content.strip():
        raise RerankFailed("the reply has no message content")
    return content


def parse_scores(reply: Any, count: int, redact: Callable[[str], str] = scrub_text) -> list[float]:
    """The ``count`` scores in a chat-completions ``reply``, in id order; else :class:`RerankFailed`."""
    content = _FENCE.sub("", _content(reply).strip())
    start, end = content.find("{"), content.rfind("}")
    try:
        if start < 0 or end < start:
            raise ValueError("no JSON object")
        payload = json.loads(content[start : end + 1])
    except ValueError:
        raise RerankFailed(f"the reply is not a JSON object: {redact(content[:80])!r}") from None
    entries = payload.get("scores") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        raise RerankFailed("the reply has no 'scores' list")
    scores: dict[int, float] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise RerankFailed("a 'scores' entry is not an object")
        raw_id, score = entry.get("id"), entry.get("score")
        n = _candidate_number(raw_id, count)
        if n is None:
            raise RerankFailed(f"unknown candidate id {redact(str(raw_id))[:40]!r}")
        if n in scores:
            raise RerankFailed(f"candidate id {n} is scored twice")
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise RerankFailed(f"candidate {n} has a score that is not a number")
        if not (math.isfinite(score) and 0.0 <= score <= 1.0):
            raise RerankFailed(f"candidate {n} has score {score!r}, outside 0..1")
        scores[n] = float(score)
    if len(scores) != count:
        missing = [n for n in range(1, count + 1) if n not in scores]
        raise RerankFailed(f"{len(missing)} of {count} candidates have no score (ids {missing[:5]})")
    return [scores[n] for n in range(1, count + 1)]


def _candidate_number(raw: object, count: int) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        n = raw
    elif isinstance(raw, str) and raw.strip().isdigit():
        n = int(raw.strip())
    else:
        return None
    return n if 1 <= n <= count else None


T = TypeVar("T")


def apply_rerank(order: Sequence[T], scores: Sequence[float]) -> list[T]:
    """``order`` (fused, best first) sorted by ``scores``, highest first; fused rank breaks ties."""
    if len(order) != len(scores):
        raise ValueError(f"{len(scores)} scores for {len(order)} candidates")
    ranked = sorted(range(len(order)), key=lambda i: (-scores[i], i))
    return [order[i] for i in ranked]


def load_reranker(settings: Settings) -> Reranker | None:
    """The reranker ``MENTIS_RERANKER`` names: ``off`` (default, None) or ``openai``."""
    if settings.reranker == "off":
        return None
    if settings.reranker == "openai":
        return Reranker.from_env(settings.providers)
    raise ConfigError(f"unknown reranker {settings.reranker!r}; use 'off' (default) or 'openai'")


__all__ = [
    "DEFAULT_MODEL",
    "SYSTEM_PROMPT",
    "RerankItem",
    "Reranker",
    "apply_rerank",
    "load_reranker",
    "parse_scores",
]
