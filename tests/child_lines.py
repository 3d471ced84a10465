"""Reading a child process's stdout line by line, each read bounded by a deadline (no sleeps)."""

from __future__ import annotations

import os
import select
import subprocess
import time


class Lines:
    """Lines from a child's stdout, each read bounded by a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buf = b""
        self.eof = False

    def next(self, deadline: float) -> str | None:
        while b"\n" not in self.buf:
            if self.eof:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the child did not answer before the deadline")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 65536)
                self.eof = not chunk
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode()
