"""Checksums of the derived index rows that nothing else checks: vectors, lexical term rows and
the stem vocabulary (issue 24, the tamper drill's first gap).

Content never comes from these rows (every value a read returns is parsed from a body checked
against its ledger hash), but they decide scores and which records make a ranked list. They can
be neither checked against their bodies as they are read (a vector needs the model: ~4.5 ms a
record, 8 minutes at 100k) nor rebuilt on open (the same, and re-analysing every body's terms
costs seconds at 100k), so each row carries ``chk``, a CRC-32 of its values and of the ledger
rowid (or vocabulary id) it belongs to, written with the row and checked wherever rows are loaded:

- SQLite: every vector, term row and stem, when the in-process indexes load them (the first
  search, then each refresh), and the vectors re-scored after an int8 scan;
- PostgreSQL: every term row when the in-process lexical index loads it, the stems a query maps
  to, and the vectors of each search's candidates, whose checksum the server computes
  (:data:`PG_VECTOR_CHECK`, a SHA-256 prefix, so no vector is sent; the HNSW index holds the rest).

A row that fails is an :class:`~mentis.errors.IntegrityError` naming the table and the row, and
``mentis rebuild`` regenerates it. What this catches: corruption and edits that do not also
recompute the checksum, including a valid-looking row copied from another record. What it cannot
catch: someone who recomputes it (it is a checksum, not a signature; nothing unkeyed can).
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from mentis.errors import IntegrityError

VECTORS = ("vectors", "thought_vectors", "skill_vectors")
TERMS = ("attempt_terms", "thought_terms", "skill_terms", "title_terms", "window_terms")
"""The tables whose rows carry ``chk``, with ``lex_vocab``."""


def vector_check(rowid: int, repository: str, vec: bytes) -> int:
    """``chk`` of a vector row: its repository and float32 bytes, bound to its ledger rowid."""
    return zlib.crc32(vec, zlib.crc32(b"v%d\x00%s\x00" % (rowid, repository.encode())))


def pg_vector_check(rowid: int, repository: str, vec: np.ndarray) -> int:
    """``chk`` of a PostgreSQL vector row, which the server computes as :data:`PG_VECTOR_CHECK`
    over its candidates (so they need not be sent): the first 8 bytes of the SHA-256 of the
    vector's binary form (``vector_send``: dimension, zero, big-endian float32s), its rowid and
    repository (SHA-256, not MD5: a FIPS-mode server refuses ``md5()``)."""
    array = np.ascontiguousarray(vec, dtype=np.float32)
    sent = struct.pack(">HH", len(array), 0) + array.astype(">f4").tobytes()
    digest = hashlib.sha256(b"%s\x00%d\x00%s" % (sent, rowid, repository.encode())).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


PG_VECTOR_CHECK = (
    "('x' || encode(substr(sha256(vector_send(vec) || '\\x00'::bytea || convert_to(rowid::text, 'UTF8') "
    "|| '\\x00'::bytea || convert_to(repository, 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint"
)
""":func:`pg_vector_check` in SQL, over a row's ``vec``, ``rowid`` and ``repository``."""


def terms_check(rowid: int, repository: str, length: int, terms: bytes) -> int:
    """``chk`` of a lexical row: its repository, length and packed terms, bound to its rowid."""
    return zlib.crc32(terms, zlib.crc32(b"t%d\x00%d\x00%s\x00" % (rowid, length, repository.encode())))


def vocab_check(term_id: int, term: str, repository: str = "") -> int:
    """``chk`` of a stem: its text (and, on PostgreSQL, repository), bound to its id."""
    return zlib.crc32(b"s%d\x00%s\x00%s" % (term_id, repository.encode(), term.encode()))


def holds(check: Callable[..., int], chk: object, *values: Any) -> bool:
    """Whether a row's stored ``chk`` is ``check(*values)``; a value of the wrong type (a damaged
    row) does not hold either."""
    try:
        return bool(check(*values) == chk)
    except (TypeError, ValueError, AttributeError, UnicodeError, OverflowError):
        return False


def derived_row_error(table: str, rowid: int) -> IntegrityError:
    return IntegrityError(
        f"a derived index row does not match its checksum ({table}, row {rowid}): the database was "
        "changed outside Mentis. Content is unaffected (it is read from the checked ledger); run "
        "`mentis rebuild` to regenerate the derived tables from the ledger"
    )


__all__ = [
    "PG_VECTOR_CHECK",
    "TERMS",
    "VECTORS",
    "derived_row_error",
    "holds",
    "pg_vector_check",
    "terms_check",
    "vector_check",
    "vocab_check",
]
