"""What each record contributes to the lexical index: its fields and their BM25 weights, shared by
the SQLite and PostgreSQL stores so both index (and so rank) a record the same way.

The weights are applied when a record is indexed: changing them needs ``mentis rebuild``.
"""

from __future__ import annotations

from typing import Any

FTS_WEIGHTS = (3.0, 1.0, 1.0, 0.5, 1.5, 1.0)
"""BM25 field weights for title, action, observation, inference, files, tags."""
THOUGHT_FTS_WEIGHTS = (1.0, 0.5, 0.5, 0.2)
"""BM25 field weights for a thought's content, tags, concepts and type."""


def attempt_fields(body: dict[str, Any]) -> tuple[str, str, str, str, str, str]:
    """An attempt's indexed fields, in ``FTS_WEIGHTS`` order."""
    return (
        body.get("task_title") or "",
        body["action"],
        body["observation"],
        body.get("inference") or "",
        " ".join(body.get("files") or ()),
        " ".join(body.get("tags") or ()),
    )


def thought_fields(body: dict[str, Any]) -> tuple[tuple[str, str, str, str], tuple[float, ...]]:
    """A thought's indexed fields (content, tags, concepts, type) and their BM25 weights."""
    fields = (
        body["content"],
        " ".join(body.get("tags", [])),
        " ".join(body.get("concepts", [])),
        body["type"],
    )
    return fields, THOUGHT_FTS_WEIGHTS
