"""Mentis: a memory for coding agents — hash-chained, offline by default."""

__version__ = "0.1.0"

from mentis.config import Settings  # noqa: E402
from mentis.errors import MentisError  # noqa: E402
from mentis.memory import Caller, Memory, open_memory  # noqa: E402

__all__ = ["Caller", "Memory", "MentisError", "Settings", "__version__", "open_memory"]
