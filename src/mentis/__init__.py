"""Mentis: a memory for coding agents — hash-chained, offline by default.

The public names are imported on first use (PEP 562), so a light entry point such as
``mentis hook`` does not pay for the store, the model and numpy when it needs none of them.
"""

from mentis.version import __version__

TYPE_CHECKING = False  # not typing's: importing typing costs a verify worker ~10 ms of its ~20 ms start
if TYPE_CHECKING:
    from mentis.config import Settings
    from mentis.errors import MentisError
    from mentis.service.access import Caller
    from mentis.service.memory import Memory, open_memory
del TYPE_CHECKING

_WHERE = {
    "Caller": "mentis.service.access",
    "Memory": "mentis.service.memory",
    "open_memory": "mentis.service.memory",
    "Settings": "mentis.config",
    "MentisError": "mentis.errors",
}


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module 'mentis' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = ["Caller", "Memory", "MentisError", "Settings", "__version__", "open_memory"]
