"""Which text of a record is embedded, indexed or fingerprinted: defined once, used by the
service on write and by the store when it rebuilds derived tables from the ledger."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Any

_SPACE = re.compile(r"\s+")
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


def attempt_text(body: dict[str, Any]) -> str:
    """What an attempt's vector is computed from (the model truncates at 256 tokens)."""
    parts = [body.get("task_title"), body["action"], body["observation"], body.get("inference")]
    return "\n".join(p for p in parts if p)


def attempt_conclusion(body: dict[str, Any]) -> str:
    """An attempt's conclusion: its inference when it drew one, else its observation."""
    return str(body.get("inference") or body["observation"])


def thought_text(body: dict[str, Any]) -> str:
    return str(body["content"])


def normalise(text: str) -> str:
    """Case, accents, punctuation and spacing removed: the exact-match form of a conclusion."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return _SPACE.sub(" ", _PUNCT.sub(" ", folded)).strip()


def fingerprint(text: str) -> str:
    return hashlib.sha256(normalise(text).encode()).hexdigest()
