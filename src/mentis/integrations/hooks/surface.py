"""The additional context a hook hands the agent: related attempts, within a token budget.

Tokens are estimated as characters / 4 (the usual rate for English and code with BPE
tokenizers), so the default budget of 1,500 tokens is 6,000 characters. A task is shown only when
its best attempt's cosine similarity to the query reaches ``min_similarity``; when none does,
the hook says nothing at all.
"""

from __future__ import annotations

from typing import Any

CHARS_PER_TOKEN = 4
FIELD_CHARS = 300


def _cut(text: str | None, limit: int = FIELD_CHARS) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def relevant(tasks: list[dict[str, Any]], min_similarity: float) -> list[dict[str, Any]]:
    """Tasks whose best attempt is at least ``min_similarity`` (cosine) from the query."""
    out = []
    for task in tasks:
        vector = (task.get("score_parts") or {}).get("vector")
        if isinstance(vector, int | float) and vector >= min_similarity:
            out.append(task)
    return out


def render(repository: str, query: str, tasks: list[dict[str, Any]], budget_tokens: int) -> str | None:
    """Markdown the agent reads; None when no task fits."""
    budget = budget_tokens * CHARS_PER_TOKEN
    head = (
        f"Mentis memory: earlier attempts in {repository} related to {_cut(query, 120)!r}. "
        "Check them before repeating work; a passed check speaks only for the code it ran on. "
        "Full history: the recall tool with repository + task_id."
    )
    lines = [head]
    used = len(head)
    shown = 0
    for task in tasks:
        block = _task_block(task)
        if used + len(block) + 1 > budget:
            break
        lines.append(block)
        used += len(block) + 1
        shown += 1
    return "\n".join(lines) if shown else None


def _task_block(task: dict[str, Any]) -> str:
    a = task.get("attempt") or {}
    title = f" — {_cut(task.get('title'), 120)}" if task.get("title") else ""
    out = [
        f"- task `{task.get('task_id')}`{title} ({task.get('attempt_count', 1)} attempts); "
        f"best match [{a.get('status', '?')}] {str(a.get('created_at', ''))[:16]} "
        f"by {a.get('agent_id', '?')}",
        f"  action: {_cut(a.get('action'))}",
        f"  observed: {_cut(a.get('observation'))}",
    ]
    if a.get("inference"):
        out.append(f"  concluded: {_cut(a.get('inference'))}")
    correction = a.get("correction")
    if correction:
        out.append(
            f"  OUTDATED ({str(correction.get('at', ''))[:10]}, "
            f"{a.get('corrections_count', 1)} corrections): "
            f"{_cut(correction.get('reason'))}"
        )
    if a.get("stale_files"):
        out.append(f"  stale: changed since it ran: {_cut(', '.join(a['stale_files']), 200)}")
    return "\n".join(out)
