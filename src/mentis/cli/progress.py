"""Progress bars for operations that can take more than a second (export, import, rebuild,
reindex, migrate, the benchmark fills).

They are drawn on stderr, never stdout (stdout is the data, or the MCP channel), and only when
stderr is a terminal: piped or logged, nothing is printed. Transient: the bar is erased when done.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import Progress


def stderr_progress() -> Progress:
    """A transient progress bar on stderr, disabled when stderr is not a terminal."""
    console = Console(stderr=True)
    return Progress(console=console, transient=True, disable=not console.is_terminal)
