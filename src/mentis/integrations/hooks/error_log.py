"""The hook error log: a hook never breaks the harness, so what went wrong is appended to
``Settings.hook_error_log`` (one JSON line each) for ``mentis doctor`` and a person to read."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

from mentis.config import Settings
from mentis.errors import MentisError


def log_error(harness: str, event: str, exc: BaseException) -> None:
    """Append ``{"at", "harness", "event", "error"}`` to the hook error log; never raises."""
    from mentis.providers.scrub import scrub_text

    text = str(exc) if isinstance(exc, MentisError) else f"{type(exc).__name__}: {exc}"
    line = {
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "harness": harness,
        "event": event,
        "error": scrub_text(text)[:4000],
    }
    try:
        path = Settings.from_env().hook_error_log
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as fh:
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    except Exception:  # nowhere left to report it; stay silent for the harness
        pass
