"""The sizes of the reliability drills, in one place.

``MENTIS_DRILL_SCALE=full`` (what ``make drill`` sets) runs the full sizes; anything else, or
nothing, runs the bounded CI sizes. Every drill reads its size from :data:`SIZES`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Sizes:
    name: str
    kills: int  # kill -9 rounds of a `mentis serve` writer over MCP stdio
    tamper_edits: int  # single-byte edits of a closed database file, each on a fresh copy
    fuzz_examples: int  # hypothesis examples per tool and transport
    soak_processes: int
    soak_seconds: float
    hook_calls: int = 1_000  # CI: calls of the hook's code from four processes; full: `mentis hook` processes
    fast_path_rows: int = 600  # hypothesis rows through the attempt loop, the general loop and the reference


CI = Sizes("ci", kills=20, tamper_edits=200, fuzz_examples=25, soak_processes=8, soak_seconds=15.0)
FULL = Sizes(
    "full",
    kills=100,
    tamper_edits=1_000,
    fuzz_examples=150,
    soak_processes=8,
    soak_seconds=60.0,
    fast_path_rows=3_000,
)
SIZES = FULL if os.environ.get("MENTIS_DRILL_SCALE", "").lower() == "full" else CI

# Drills write their reports here (relative to the repository root).
REPORTS = Path(__file__).resolve().parents[2] / "build" / "drills"
