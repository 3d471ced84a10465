"""The C heap of a long-running server process (glibc's malloc; a no-op elsewhere).

A server's in-process indexes are loaded in chunks whose numpy temporaries are freed again. glibc
raises its mmap threshold each time such a block is freed (up to 32 MB), so the next loads'
temporaries come from the heap, which grows and keeps its freed chunks: at 1M attempts that put
``serve``'s peak ~250 MB above what it holds once loaded. A fixed threshold keeps every large
temporary in its own mapping (returned to the system when freed), and two arenas bound the heap
the preload thread and the request threads can each grow. What an operator sets in the
environment (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_ARENA_MAX``) is left as set.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 256 * 1024
"""Allocations from this size on get their own mapping (glibc's default starts at 128 KiB and
moves; fixing it turns the moving off)."""
ARENA_MAX = 2


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def tune_for_server() -> bool:
    """Set the heap up for a long-running server (see the module docstring); False where there
    is no glibc."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    if "MALLOC_ARENA_MAX" not in os.environ:
        libc.mallopt(M_ARENA_MAX, ARENA_MAX)
    return True


def release_free_heap() -> None:
    """Hand freed heap back to the system (glibc keeps freed chunks: measured ~75 MB resident
    after loading 100k attempts, ~140 MB after opening 1M)."""
    libc = _libc()
    if libc is not None:
        with contextlib.suppress(AttributeError):
            libc.malloc_trim(0)
