"""What bounds one ``recall`` SQL call: per-value and per-statement limits, a deadline that
interrupts, linear stand-ins for SQLite's quadratic string functions, and a result budget.

SQLite checks its interrupt flag between virtual-machine steps, so the deadline cannot stop one
long function call; what one call may cost is bounded instead. Every string or blob is at most
:data:`VALUE_LIMIT_BYTES` (``SQLITE_LIMIT_LENGTH``), a LIKE/GLOB pattern at most
:data:`LIKE_PATTERN_LIMIT` characters (cost ≈ value × pattern), and ``instr``, ``replace`` and the
two-argument ``trim``/``ltrim``/``rtrim`` — quadratic in SQLite 3.40 (a 64 KiB ``instr`` took
0.15 s, so a 1 MiB one would take ~40 s) — are replaced on the recall connection by linear ones.

:class:`ResultBudget` applies the row and byte caps value by value, so a row over the byte cap is
dropped before it is encoded (a blob's base64 size is known without encoding it).
"""

from __future__ import annotations

import base64
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import orjson

VIEW_NAMES = frozenset({"attempts", "corrections", "tasks", "thoughts", "relations"})
"""The documented views ``recall`` SQL may read (DESIGN §6), on both backends."""


class RecallBounds(NamedTuple):
    """What one recall call may see and spend: the caller's scope (per repository) and its limits."""

    visible: Callable[[str], bool]
    max_rows: int
    max_bytes: int
    timeout_s: float


VALUE_LIMIT_BYTES = 1_048_576
"""The largest string or blob a recall statement may hold (an attempt body written over HTTP fits)."""
LIKE_PATTERN_LIMIT = 100
"""The longest LIKE or GLOB pattern, in characters."""
COLUMN_LIMIT = 32
"""Columns in a result (the widest view has 21): with the value limit, what one row may hold."""
SQLITE_LIMITS = {
    sqlite3.SQLITE_LIMIT_LENGTH: VALUE_LIMIT_BYTES,
    sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: LIKE_PATTERN_LIMIT,
    sqlite3.SQLITE_LIMIT_SQL_LENGTH: 65_536,
    sqlite3.SQLITE_LIMIT_COLUMN: COLUMN_LIMIT,
    sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 200,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 50,
    sqlite3.SQLITE_LIMIT_VDBE_OP: 100_000,
    sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 64,
    sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER: 100,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
    sqlite3.SQLITE_LIMIT_WORKER_THREADS: 0,
}
CACHE_KIB = 4_096
"""Page cache of a recall connection; sorts and temporary b-trees spill to temporary files past it."""

_TOO_BIG = "x" * (VALUE_LIMIT_BYTES + 1)
"""Returned by a stand-in whose result would pass the value limit: SQLite answers 'string or blob
too big' for it, as for its own functions (a Python function cannot raise a specific SQLite error)."""
_numbers = sqlite3.connect(":memory:", check_same_thread=False)
_numbers_lock = threading.Lock()


def limit_connection(conn: sqlite3.Connection) -> None:
    """Apply the limits and the linear string functions to a recall connection."""
    for limit, value in SQLITE_LIMITS.items():
        conn.setlimit(limit, value)
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    conn.execute("PRAGMA temp_store=FILE")
    conn.execute("PRAGMA mmap_size=0")
    conn.create_function("instr", 2, _instr, deterministic=True)
    conn.create_function("replace", 3, _replace, deterministic=True)
    for name, side in (("trim", 0), ("ltrim", -1), ("rtrim", 1)):
        conn.create_function(name, 2, _trimmer(side), deterministic=True)


def _text(value: Any) -> str:
    """A value as SQLite would convert it to text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    with _numbers_lock:
        return str(_numbers.execute("SELECT CAST(? AS TEXT)", (value,)).fetchone()[0])


def _instr(haystack: Any, needle: Any) -> int | None:
    if haystack is None or needle is None:
        return None
    if isinstance(haystack, bytes) and isinstance(needle, bytes):
        return haystack.find(needle) + 1
    return _text(haystack).find(_text(needle)) + 1


def _replace(value: Any, pattern: Any, replacement: Any) -> Any:
    if value is None or pattern is None:
        return None
    old = _text(pattern).encode()
    if not old:  # SQLite hands back the value itself, read as text if it was a blob
        return _text(value) if isinstance(value, bytes) else value
    if replacement is None:
        return None
    text, new = _text(value).encode(), _text(replacement).encode()
    if len(new) > len(old) and len(text) + text.count(old) * (len(new) - len(old)) > VALUE_LIMIT_BYTES:
        return _TOO_BIG
    return text.replace(old, new).decode("utf-8", "replace")


def _trimmer(side: int) -> Callable[[Any, Any], str | None]:
    def trim(value: Any, characters: Any) -> str | None:
        if value is None or characters is None:
            return None
        text, drop = _text(value), frozenset(_text(characters))
        start, end = 0, len(text)
        if side <= 0:
            while start < end and text[start] in drop:
                start += 1
        if side >= 0:
            while end > start and text[end - 1] in drop:
                end -= 1
        return text[start:end]

    return trim


class Deadline:
    """Interrupts a connection's running statement when ``timeout_s`` passes, until stopped.

    The timer and :meth:`stop` share a lock, so an interrupt never lands after the call ended
    (when the connection may already serve the next caller).
    """

    def __init__(self, interrupt: Callable[[], None], timeout_s: float) -> None:
        self._interrupt = interrupt
        self._lock = threading.Lock()
        self._active = True
        self.fired = False
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._active:
                self.fired = True
                self._interrupt()

    def stop(self) -> None:
        with self._lock:
            self._active = False
        self._timer.cancel()


def _size(value: Any) -> tuple[int, Callable[[], Any]]:
    """A value's size once encoded in the JSON result, and how to encode it (done only if it fits)."""
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        return 4 * ((len(raw) + 2) // 3) + 2, lambda: base64.b64encode(raw).decode("ascii")
    return len(orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)), lambda: value


class ResultBudget:
    """Collects result rows up to the row and byte caps.

    The size is counted value by value, as ``orjson`` writes the rows (brackets, commas and the
    row separator included); the first value that passes the byte cap ends the result, and the
    values after it are never converted or encoded.
    """

    def __init__(self, convert: Callable[[Any], Any], *, max_rows: int, max_bytes: int) -> None:
        self.convert, self.max_rows, self.max_bytes = convert, max_rows, max_bytes
        self.rows: list[list[Any]] = []
        self.size = 2
        self.truncated = False
        self.reason: str | None = None

    def take(self, rows: Iterable[Sequence[Any]]) -> bool:
        """Add ``rows``; False once the result is truncated (stop fetching)."""
        for row in rows:
            if len(self.rows) == self.max_rows:
                return self._stop(f"more than {self.max_rows} rows")
            size = self.size + len(row) + 2
            values: list[Any] = []
            for raw in row:
                value = raw if isinstance(raw, bytes | bytearray | memoryview) else self.convert(raw)
                n, encode = _size(value)
                size += n
                if size > self.max_bytes:
                    return self._stop(f"more than {self.max_bytes:,} bytes")
                values.append(encode())
            self.rows.append(values)
            self.size = size
        return True

    def _stop(self, reason: str) -> bool:
        self.truncated, self.reason = True, reason
        return False
