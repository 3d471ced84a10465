"""The few ways the SQLite and PostgreSQL stores spell the same SQL, so the relational core
(:mod:`mentis.store.shared.core`) is written once.

Core SQL is written with ``?`` placeholders; :meth:`Dialect.q` gives the backend's spelling.
A list of values is matched with ``IN (?, …)`` on SQLite (in chunks of ``SQLITE_CHUNK``, under
its variable limit) and with ``= ANY(%s)`` on PostgreSQL (one array, one statement). Vectors are
float32 blobs on SQLite and pgvector values on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

SQLITE_CHUNK = 500
"""Values per ``IN (…)`` list on SQLite (its default limit is 32,766 variables; 500 keeps a
statement's plan small and reused)."""


@lru_cache(maxsize=1024)
def _pyformat(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


def as_array(vector: Any) -> np.ndarray:
    """A float32 array from a numpy array or a pgvector ``Vector`` read back from the server."""
    if hasattr(vector, "to_numpy"):
        vector = vector.to_numpy()
    return np.ascontiguousarray(vector, dtype=np.float32)


@dataclass(frozen=True, slots=True)
class Dialect:
    """One backend's spelling; ``postgres`` is False for SQLite."""

    postgres: bool

    def q(self, sql: str) -> str:
        """``sql`` written with ``?`` placeholders, in this backend's placeholder style."""
        return _pyformat(sql) if self.postgres else sql

    def chunks(self, values: Sequence[Any]) -> Iterator[list[Any]]:
        """``values`` in the pieces one ``IN`` condition takes (nothing for no values)."""
        if not values:
            return
        if self.postgres:
            yield list(values)
            return
        for start in range(0, len(values), SQLITE_CHUNK):
            yield list(values[start : start + SQLITE_CHUNK])

    def in_(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` is one of ``values`` (at most one chunk of them): the condition and its args."""
        if self.postgres:
            return f"{column} = ANY(?)", [list(values)]
        return f"{column} IN ({','.join('?' * len(values))})", list(values)

    def json_text(self, column: str, key: str) -> str:
        """The text of a top-level key of the JSON body bytes in ``column``."""
        if self.postgres:
            return f"convert_from({column}, 'UTF8')::json->>'{key}'"
        return f"json_extract({column}, '$.{key}')"

    def bytewise(self, expr: str) -> str:
        """``expr`` compared byte by byte (SQLite's default; PostgreSQL's "C" collation)."""
        return f'{expr} COLLATE "C"' if self.postgres else expr

    def vector(self, vector: np.ndarray) -> Any:
        """A vector as this backend stores it (a float32 blob, or a pgvector value)."""
        array = as_array(vector)
        return array if self.postgres else array.tobytes()

    def vector_bytes(self, stored: Any) -> bytes:
        """A stored vector's float32 bytes."""
        return as_array(stored).tobytes() if self.postgres else bytes(stored)

    def many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """One statement run for each of ``rows`` (nothing for none)."""
        if not rows:
            return
        if self.postgres:
            with conn.cursor() as cur:
                cur.executemany(_pyformat(sql), rows)
        else:
            conn.executemany(sql, rows)

    def pipelined(self, conn: Any) -> AbstractContextManager[Any]:
        """A block whose statements need no round trip each (psycopg's pipeline mode on
        PostgreSQL; nothing to do on SQLite, which runs in process)."""
        return conn.pipeline() if self.postgres else nullcontext()


SQLITE = Dialect(postgres=False)
POSTGRES = Dialect(postgres=True)
