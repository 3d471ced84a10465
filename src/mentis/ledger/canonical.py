"""The bytes a hash covers: ``canonical`` is RFC 8785 (JCS), ``sha256_hex`` its digest (DESIGN §3).

Hashed documents hold no floats and no integers beyond ±(2^53 - 1); within that domain orjson with
sorted keys produces the same bytes as JCS as long as every object key lies in the Basic
Multilingual Plane (JCS sorts keys by UTF-16 code units, orjson by code points; the two orders
agree there). Documents outside the fast domain go through the reference ``rfc8785`` encoder.
``tests/conformance/test_ledger.py`` proves byte-equality on a hypothesis-generated corpus.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
import rfc8785

from mentis.errors import InvalidInput

MAX_SAFE_INT = 2**53 - 1


def _fast_domain(obj: Any) -> bool:
    """True when orjson's sorted output equals JCS for ``obj``; raises on floats."""
    if isinstance(obj, str) or obj is None or isinstance(obj, bool):
        return True
    if isinstance(obj, int):
        if -MAX_SAFE_INT <= obj <= MAX_SAFE_INT:
            return True
        raise InvalidInput(f"integer {obj} is outside ±(2^53 - 1) and cannot be hashed exactly")
    if isinstance(obj, float):
        raise InvalidInput("floats are not allowed in hashed documents; use integers or strings")
    if isinstance(obj, dict):
        ok = True
        for key, value in obj.items():
            if not isinstance(key, str):
                raise InvalidInput("object keys in hashed documents must be strings")
            if ok and not key.isascii() and any(ord(ch) > 0xFFFF for ch in key):
                ok = False
            if not _fast_domain(value):
                ok = False
        return ok
    if isinstance(obj, list | tuple):
        return all([_fast_domain(item) for item in obj])
    raise InvalidInput(f"{type(obj).__name__} values cannot be hashed")


def canonical(obj: Any) -> bytes:
    """RFC 8785 canonical bytes of ``obj`` (no floats; integers within ±(2^53 - 1))."""
    if _fast_domain(obj):
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    return rfc8785.dumps(obj)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
