"""The exact-match form of a rejected conclusion (which text is embedded and indexed is
``mentis.ledger.bodies``')."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_SPACE = re.compile(r"\s+")
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


def normalise(text: str) -> str:
    """Case, accents, punctuation and spacing removed: the exact-match form of a conclusion."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return _SPACE.sub(" ", _PUNCT.sub(" ", folded)).strip()


def fingerprint(text: str) -> str:
    return hashlib.sha256(normalise(text).encode()).hexdigest()
