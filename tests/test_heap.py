"""``mentis.index.malloc``: the allocator settings ``serve`` makes before its preload (glibc only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# A child process: free a 4 MiB mapped block (glibc then raises its mmap threshold to 4 MiB unless
# the threshold was fixed), allocate 512 KiB, and report whether it was mapped (mallinfo2's
# hblkhd, the bytes in mmapped blocks, grew) or came from the heap.
PROBE = """
import ctypes, sys
from mentis.index import malloc as heap
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "tune":
    assert heap.tune_for_server()
libc.free(libc.malloc(4 << 20))
before = libc.mallinfo2().hblkhd
block = libc.malloc(512 << 10)
print("mapped" if libc.mallinfo2().hblkhd - before >= 512 << 10 else "heap")
"""


def probe(mode: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not Path("/proc/self/maps").exists(), reason="glibc's mallopt"
)


@glibc
def test_a_tuned_heap_maps_large_blocks_after_a_large_free() -> None:
    # untuned, glibc's moving threshold keeps the 512 KiB block in the heap after a 4 MiB free;
    # tuned, the fixed 256 KiB threshold maps it (given back to the system when freed)
    assert probe("plain") == "heap"
    assert probe("tune") == "mapped"


@glibc
def test_an_operators_malloc_setting_is_left_as_set() -> None:
    # MALLOC_MMAP_THRESHOLD_ in the environment wins over the server's own setting
    assert probe("tune", MALLOC_MMAP_THRESHOLD_=str(8 << 20)) == "heap"
