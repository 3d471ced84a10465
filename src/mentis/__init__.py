"""Mentis: a memory for coding agents — hash-chained, offline by default."""

__version__ = "0.1.0"

from mentis.config import Settings
from mentis.errors import MentisError
from mentis.memory import Caller, Memory, open_memory

__all__ = ["Caller", "Memory", "MentisError", "Settings", "__version__", "open_memory"]
