"""Recording in the background when no server is configured.

Without ``[server] url`` the post-tool-use hook hands the prepared ``record_attempt`` body to a
detached child process (``python -m mentis.integrations.hooks.recorder HARNESS``, the body on
stdin) and returns at once. The child sends it to the background server
(:mod:`mentis.integrations.hooks.background`), starting that server when none runs, so the hook
never waits for the model to load; it logs any error to the hook error log.

While a child runs it holds a shared ``flock`` on ``$MENTIS_HOME/hooks/recording.lock`` (the
parent takes the lock and the child inherits it), so anyone who takes the lock exclusively, such
as a test or a script about to read the store, waits exactly until every pending recording ended.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

RECORD_TIMEOUT_S = 60.0
"""Seconds the child waits for the server's answer: longer than the server waits for a locked
store (30 s), so a recording is not given up while another process holds the store."""


def lock_path(home: Path) -> Path:
    return home / "hooks" / "recording.lock"


def detach(home: Path, harness: str, body: dict[str, Any]) -> None:
    path = lock_path(home)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        child = subprocess.Popen(
            [sys.executable, "-m", "mentis.integrations.hooks.recorder", harness],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # outlives the hook, untouched by the harness's signals
            pass_fds=(fd,),
        )
        assert child.stdin is not None
        child.stdin.write(json.dumps(body).encode())
        child.stdin.close()
    finally:
        os.close(fd)  # the child's copy keeps the shared lock until it exits


def wait_for_pending(home: Path) -> None:
    """Block until no background recording runs (takes the lock exclusively, then lets go)."""
    path = lock_path(home)
    if not path.exists():
        return
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


def main() -> None:
    from mentis.config import Settings
    from mentis.integrations.hooks import config as hook_config
    from mentis.integrations.hooks.backend import open_backend, record_attempt
    from mentis.integrations.hooks.error_log import log_error

    harness = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        body = json.loads(sys.stdin.buffer.read())
        settings = Settings.from_env()
        idle_s = hook_config.load(settings.home, None).idle_s
        backend = open_backend(None, None, settings, harness, idle_s)
        backend.client.set_timeout(RECORD_TIMEOUT_S)  # no one waits for this process: outwait a lock
        try:
            record_attempt(backend, body)
        finally:
            backend.close()
    except Exception as exc:
        log_error(harness, "post-tool-use", exc)


if __name__ == "__main__":
    main()
