"""Finding 6 of the second security review: slow and idle clients (slowloris).

Before, a connection that never finished its request head was held forever and nothing capped
the open connections: about 1,100 idle sockets took the server past its open-files limit (EMFILE)
and ``/health`` and searches went unanswered. Every test here runs a real ``mentis serve --http``
process and attacks it with real sockets; the deadlines are shortened with ``--header-timeout``
so the tests take seconds.
"""

from __future__ import annotations

import json
import os
import re
import resource
import select
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from mentis.http.connections import REFUSAL, ConnectionGuard, connection_cap
from tests.conftest import MENTIS
from tests.http_support import LiveServer

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")


def head(port: int) -> bytes:
    """A whole request head for /health; the attacks send a part of it."""
    return b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: slow\r\n\r\n" % port


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    token: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def connect(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=10)

    def health_and_search(self) -> tuple[int, int]:
        """The status of /health and of a search, each on a new connection, within 10 s."""
        with httpx2.Client(base_url=self.url, timeout=10) as http:
            health = http.get("/health", headers={"Connection": "close"})
            search = http.post(
                "/v1/search",
                json={"query": "cart total off by a cent"},
                headers={"Authorization": f"Bearer {self.token}", "Connection": "close"},
            )
        return health.status_code, search.status_code


@contextmanager
def serving(
    env: dict[str, str], db_path: Path, *options: str, nofile: tuple[int, int] | None = None
) -> Iterator[Served]:
    """`mentis serve --http 127.0.0.1:0 OPTIONS` as a user runs it (open-files limit ``nofile``)."""

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    process = subprocess.Popen(
        [*MENTIS, "serve", "--http", "127.0.0.1:0", *options],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=limit,
    )
    try:
        assert process.stderr is not None
        lines: list[str] = []
        while not any(line.startswith("harness config:") for line in lines):
            line = process.stderr.readline().decode()
            assert line, f"mentis serve exited: {lines}"
            lines.append(line)
        found = re.search(r"serving HTTP on http://([0-9.]+):([0-9]+) ", "".join(lines))
        assert found, lines
        token = (db_path.parent / "admin.token").read_text().strip()
        yield Served(process, found.group(1), int(found.group(2)), token)
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """True when the server closes ``sock`` within ``within`` seconds (EOF or reset)."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
    except (TimeoutError, BlockingIOError):  # BlockingIOError: nothing yet, with within=0
        return False
    except ConnectionResetError:
        pass
    return True


def wait_until(condition: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        select.select([], [], [], 0.05)
    return True


def test_a_connection_that_never_finishes_its_request_head_is_closed_at_the_header_timeout(
    mentis_env: dict[str, str], db_path: Path
) -> None:
    with serving(mentis_env, db_path, "--header-timeout", "1") as served, ExitStack() as stack:
        started = time.monotonic()
        idle = [stack.enter_context(served.connect()) for _ in range(5)]
        partial = stack.enter_context(served.connect())
        partial.sendall(head(served.port)[:30])
        kept_alive = stack.enter_context(served.connect())  # one request, then a stalled second head
        kept_alive.sendall(head(served.port))
        assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200")
        kept_alive.sendall(head(served.port)[:10])
        assert [closed_by_server(s, within=8) for s in [*idle, partial, kept_alive]] == [True] * 7
        assert time.monotonic() - started >= 0.9  # not before the deadline


def test_bytes_trickled_into_a_request_head_do_not_extend_its_deadline(
    mentis_env: dict[str, str], db_path: Path
) -> None:
    with serving(mentis_env, db_path, "--header-timeout", "1") as served, served.connect() as sock:
        started = time.monotonic()
        whole = head(served.port)
        sent = 0
        while sent < len(whole) - 1:  # one byte every 0.2 s: the head never completes
            sock.sendall(whole[sent : sent + 1])
            sent += 1
            if closed_by_server(sock, within=0.2):
                break
        elapsed = time.monotonic() - started
    assert sent < len(whole) - 1, "the server kept the trickling connection open"
    assert 0.9 <= elapsed < 5


def test_health_and_search_answer_while_more_idle_connections_than_the_cap_are_open(
    mentis_env: dict[str, str], db_path: Path
) -> None:
    cap, attackers = 16, 60
    with (
        serving(mentis_env, db_path, "--max-connections", str(cap), "--header-timeout", "60") as served,
        ExitStack() as stack,
    ):
        assert served.health_and_search() == (200, 200)  # the event loop and the store are up
        baseline = served.open_fds()
        idle = [stack.enter_context(served.connect()) for _ in range(attackers)]
        # every attacker is accepted; the server closes the oldest idle ones to stay at the cap
        assert wait_until(lambda: sum(closed_by_server(s, 0) for s in idle) >= attackers - cap, within=10)
        assert served.open_fds() <= baseline + cap
        assert served.health_and_search() == (200, 200)
        assert served.open_fds() <= baseline + cap


def test_health_and_search_answer_with_more_idle_sockets_than_the_server_may_open_files(
    mentis_env: dict[str, str], db_path: Path
) -> None:
    """The review's attack: 1,100 idle sockets against a process limited to 1,024 open files."""
    with (
        serving(mentis_env, db_path, nofile=(1024, 1024)) as served,
        ExitStack() as stack,
    ):
        for _ in range(1100):
            stack.enter_context(served.connect())
        assert served.health_and_search() == (200, 200)
        assert served.open_fds() < 1024
        served.process.terminate()
        assert served.process.stderr is not None
        log = served.process.stderr.read().decode()
    assert "Too many open files" not in log
    cap = connection_cap(1000, 1024)
    assert f"serving at most {cap} connections, not 1000: the open-files limit is 1024" in log


def test_serve_raises_its_soft_open_files_limit_to_the_hard_one(
    mentis_env: dict[str, str], db_path: Path
) -> None:
    with serving(mentis_env, db_path, nofile=(256, 4096)) as served:
        limits = Path(f"/proc/{served.process.pid}/limits").read_text()
    assert re.search(r"^Max open files\s+4096\s+4096\s+files", limits, re.MULTILINE), limits


def test_a_request_body_trickled_past_the_request_timeout_is_cut_off(db_path: Path) -> None:
    with (
        LiveServer(db_path, request_timeout_s=1, header_timeout_s=1) as live,
        socket.create_connection(("127.0.0.1", live.port), timeout=10) as sock,
    ):
        body = json.dumps({"query": "x" * 200}).encode()
        sock.sendall(
            b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n"
            % (live.port, live.token("read").encode(), len(body))
        )
        started = time.monotonic()
        sent = 0
        while sent < len(body) - 1:
            sock.sendall(body[sent : sent + 1])
            sent += 1
            if closed_by_server(sock, within=0.2):
                break
        elapsed = time.monotonic() - started
    assert sent < len(body) - 1, "the server kept the trickling body open"
    assert elapsed < 5


def test_a_client_that_does_not_read_its_answers_is_dropped_after_the_answer_deadline(
    db_path: Path,
) -> None:
    with (
        LiveServer(db_path, request_timeout_s=1, header_timeout_s=1) as live,
        socket.create_connection(("127.0.0.1", live.port), timeout=10) as sock,
    ):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        request = b"GET /v1/openapi.json HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n\r\n"
        sock.sendall(request % (live.port, live.token("read").encode()) * 200)  # pipelined, never read
        connections = live.server.server_state.connections
        assert wait_until(lambda: len(connections) == 1, within=5)
        assert wait_until(lambda: not connections, within=8), "the server still holds the connection"


def test_an_unfinished_request_head_over_16_kib_is_refused_at_once(db_path: Path) -> None:
    with (
        LiveServer(db_path) as live,
        socket.create_connection(("127.0.0.1", live.port), timeout=10) as sock,
    ):
        sock.sendall(head(live.port)[:-4] + b"\r\nX-Pad: " + b"a" * 17_000)  # no blank line: unfinished
        assert sock.recv(65536).startswith(b"HTTP/1.1 400 ")
        assert closed_by_server(sock, within=5)


class _Connection:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


def test_at_the_cap_a_waiting_connection_makes_room_before_a_sending_one_and_a_busy_one_never() -> None:
    guard = ConnectionGuard(max_connections=3, head_timeout_s=10, body_timeout_s=30)
    answering, sending, waiting = _Connection(), _Connection(), _Connection()
    for connection, phase in ((answering, "answer"), (sending, "body"), (waiting, "head")):
        assert guard.admit(connection)
        guard.enter(connection, phase)  # type: ignore[arg-type]
    assert guard.admit(_Connection()) and (waiting.aborted, sending.aborted) == (True, False)
    assert guard.admit(_Connection()) and sending.aborted
    assert not guard.admit(_Connection()) and not answering.aborted
    assert len(guard.open) == 3
    assert REFUSAL.startswith(b"HTTP/1.1 503 ")
