"""The background server hooks share: one ``mentis serve --http unix:SOCKET`` per user and store.

Without ``[server] url`` in hooks.toml, a hook that needs the memory reaches a server on
``$MENTIS_HOME/run/<key>.sock`` (a unix socket, mode 0600, in a directory of mode 0700 owned by
the user), and starts it when none answers; every later hook, from any session, checkout or
harness of this user on this store, reaches the same one. The server has the model loaded, so a
prompt hook answers in about a tenth of a second instead of loading it (about 2 s) every time.

- **Key.** ``<key>`` hashes the store's location (:meth:`Settings.store_location`) and the
  settings the server opens it with (embedder, reranker, signing key, the providers' variables):
  hooks with other settings reach another server rather than one that would answer differently.
- **Single.** The server holds an exclusive ``flock`` on ``<key>.lock`` (beside the socket) for
  its whole life; the kernel drops it when the process ends, even by SIGKILL. A hook that takes
  that lock knows no server lives: it removes a stale socket, binds a new one and starts the
  server with the lock and the listening socket inherited (:func:`claim`, :func:`spawn`), then
  connects at once (the kernel queues the connection until the server answers). A hook killed
  before the server started dies with the lock (the next hook claims it again); killed after, it
  leaves the server running. A hook that cannot take the lock waits for the socket to answer.
- **Version and store.** Each hook asks ``GET /health`` first, on the connection it then calls
  through: a server of another Mentis version, or whose store file is no longer the one the
  path names (deleted or replaced: :meth:`Settings.store_identity` holds the inode), is stopped
  (SIGTERM, by the pid it reported) and replaced. Asking costs one round trip on the socket;
  putting the version in the socket name instead would leave an old server running beside the
  new one until its idle period ends, and could not see a replaced file.
- **Idle.** The server exits after ``idle_s`` seconds without a connection (hooks.toml
  ``[background] idle_s``, default 30 minutes) and removes its socket; the next hook starts
  another.

The server is detached (its own session, stdin and stdout on /dev/null, stderr appended to
``$MENTIS_HOME/logs/hook-server.log``), so the harness never waits for it. Only the standard
library is imported here: this runs in every hook.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mentis.config import Settings
from mentis.errors import ConfigError, HookCallFailed
from mentis.version import __version__

START_TIMEOUT_S = 30.0
"""Seconds a hook waits for a server to answer, one it started included (model load, verify)."""
POLL_S = 0.02
LISTEN_BACKLOG = 128
MAX_SOCKET_PATH = 100
"""Bytes of a socket address at most (the system's limit is 104 on macOS, 108 on Linux); a longer
path is reached through ``/proc/self/fd`` of its directory where there is one (:func:`address`)."""
LOG_MAX_BYTES = 1 << 20
AGENT_HEADER = "X-Mentis-Agent"
"""The agent a hook calls for (``MENTIS_AGENT_ID``, else the harness's name)."""


@dataclass(frozen=True)
class Place:
    """The files of one store's background server."""

    socket: Path
    log: Path

    @property
    def lock(self) -> Path:
        return lock_path(self.socket)


def lock_path(socket_path: Path) -> Path:
    return socket_path.with_name(socket_path.name + ".lock")


def place(settings: Settings) -> Place:
    """Where the background server of ``settings``'s store listens (see the module's Key)."""
    shape = {
        "store": settings.store_location(),
        "embedder": settings.embedder,
        "reranker": settings.reranker,
        "signing_key": str(settings.signing_key.resolve()) if settings.signing_key else None,
        "providers": sorted(settings.providers.items()),
    }
    key = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]
    home = settings.home.resolve()
    return Place(home / "run" / f"{key}.sock", home / "logs" / "hook-server.log")


@contextlib.contextmanager
def address(path: Path) -> Iterator[str]:
    """``path`` as a socket address: itself, or when longer than the system takes, the same file
    through ``/proc/self/fd/N/`` of its directory held open meanwhile (Linux)."""
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        alias = f"/proc/self/fd/{fd}/{path.name}"
        if not os.path.isdir(os.path.dirname(alias)):
            raise ConfigError(
                f"{path} is too long for a unix socket ({len(os.fsencode(path))} bytes, at most "
                f"{MAX_SOCKET_PATH}); set MENTIS_HOME to a shorter path, or run `mentis serve --http` "
                "and name it in hooks.toml [server] url"
            )
        yield alias
    finally:
        os.close(fd)


def private_dir(path: Path) -> None:
    """Make ``path`` a directory of this user's that no one else may enter (0700), or refuse."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ConfigError(f"{path} must be a directory owned by you (not a link); remove it and retry")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


@dataclass(frozen=True)
class Slot:
    """A held lock and the listening socket bound under it: whoever holds these serves the path."""

    lock_fd: int
    sock: socket.socket

    @classmethod
    def adopt(cls, lock_fd: int, socket_fd: int) -> Slot:
        """The lock and socket a starting hook handed down (``serve --lock-fd --socket-fd``)."""
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # already ours: a no-op that proves it
            sock = socket.socket(fileno=socket_fd)
        except OSError as exc:
            raise ConfigError(
                f"--lock-fd {lock_fd} / --socket-fd {socket_fd}: {exc.strerror or exc}"
            ) from None
        if sock.family != socket.AF_UNIX:
            sock.close()
            raise ConfigError(f"--socket-fd {socket_fd} is not a unix socket")
        os.set_inheritable(lock_fd, False)
        return cls(lock_fd, sock)

    def close(self) -> None:
        """Let go of this process's copies (a server that inherited them keeps its own)."""
        self.sock.close()
        os.close(self.lock_fd)


def claim(socket_path: Path) -> Slot | None:
    """Take the lock of ``socket_path``, remove a stale socket there, bind a new one (mode 0600)
    and listen; None when the lock is held (a server lives, or another hook is starting one)."""
    fd = os.open(lock_path(socket_path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)  # no live server holds the lock, so whatever is here is stale
        with address(socket_path) as where:
            sock.bind(where)
        os.chmod(socket_path, 0o600)  # before listen(): no one connects in between
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        os.close(fd)
        raise ConfigError(f"cannot listen on {socket_path}: {exc.strerror or exc}") from None
    return Slot(fd, sock)


@dataclass(frozen=True)
class Started:
    """A server this process started, and where its log begins."""

    process: subprocess.Popen[bytes]
    log_start: int


def spawn(slot: Slot, where: Place, settings: Settings, idle_s: int) -> Started:
    """Start ``mentis serve --http unix:SOCKET`` detached, handing it ``slot`` (then closed here)."""
    try:
        where.log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(OSError):
            if where.log.stat().st_size > LOG_MAX_BYTES:
                os.replace(where.log, where.log.with_name(where.log.name + ".1"))
        env = dict(os.environ)
        env.pop("MENTIS_AGENT_ID", None)  # each hook names its agent in its request
        env.pop(
            "MENTIS_TOOLS", None
        )  # an MCP tool profile: the hooks call REST, which offers every operation
        env.update(MENTIS_HOME=str(settings.home.resolve()), MENTIS_DB=str(settings.db_path.resolve()))
        if settings.signing_key is not None:
            env["MENTIS_SIGNING_KEY"] = str(settings.signing_key.resolve())
        sock_fd = slot.sock.fileno()
        command = [sys.executable, "-m", "mentis", "serve", "--http", f"unix:{where.socket}"]
        command += ["--idle-exit", str(idle_s), "--lock-fd", str(slot.lock_fd), "--socket-fd", str(sock_fd)]
        log_fd = os.open(where.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        log_start = os.fstat(log_fd).st_size
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_fd,
                cwd="/",  # all its paths are absolute; it holds no checkout busy
                env=env,
                start_new_session=True,  # outlives the hook, untouched by the harness's signals
                pass_fds=(slot.lock_fd, sock_fd),
            )
        finally:
            os.close(log_fd)
    finally:
        slot.close()
    return Started(process, log_start)


def reach(settings: Settings, agent: str, idle_s: int, *, timeout_s: float = START_TIMEOUT_S) -> Client:
    """A connection to this store's background server that answered ``/health`` as the right
    version and store, starting (or replacing) the server when needed; HookCallFailed when none
    answers within ``timeout_s``."""
    where = place(settings)
    private_dir(where.socket.parent)
    deadline = time.monotonic() + timeout_s
    started: Started | None = None
    while True:
        client = Client(UnixConnection(where.socket, max(deadline - time.monotonic(), POLL_S)), agent)
        try:
            health = client.health()
        except (OSError, http.client.HTTPException, ValueError):  # none there, stale, or going away
            client.close()
        else:
            if health.get("version") == __version__ and health.get("store") == settings.store_identity():
                return client
            client.close()
            if started is not None:
                raise HookCallFailed(
                    f"the background server started for {where.socket} reports version "
                    f"{health.get('version')!r} and store {health.get('store')!r}, not {__version__!r} "
                    f"and {settings.store_identity()!r}"
                )
            _stop(health.get("pid"))
        if started is None:
            slot = claim(where.socket)
            if slot is not None:
                started = spawn(slot, where, settings, idle_s)
                continue
        elif started.process.poll() is not None:  # it ended: all it had to say is in its log
            raise HookCallFailed(
                f"the background server exited while starting: {_last_line(where.log, started.log_start)}"
            )
        if time.monotonic() >= deadline:
            raise HookCallFailed(
                f"the background server on {where.socket} did not answer within {timeout_s:g} s; "
                f"see {where.log}"
            )
        time.sleep(POLL_S)


def warm(settings: Settings, idle_s: int) -> bool:
    """Start the background server when none lives, without waiting for it; whether one was started."""
    where = place(settings)
    private_dir(where.socket.parent)
    slot = claim(where.socket)
    if slot is None:
        return False
    spawn(slot, where, settings, idle_s)
    return True


def _stop(pid: object) -> None:
    """Ask a server of another version or store to exit (it reported ``pid`` on our private socket)."""
    if isinstance(pid, int) and pid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)


def _last_line(log: Path, start: int) -> str:
    """The last line a server wrote to ``log`` after ``start`` (its error, or a traceback's end)."""
    try:
        with log.open("rb") as fh:
            fh.seek(max(start, fh.seek(0, os.SEEK_END) - 4096))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    return f"{lines[-1]} (log: {log})" if lines else f"no reason logged in {log}"


class UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix socket."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            with address(self.path) as where:
                sock.connect(where)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Client:
    """JSON requests over one kept-alive connection (standard library only)."""

    def __init__(
        self, connection: http.client.HTTPConnection, agent: str | None = None, token: str | None = None
    ):
        self.connection = connection
        self.headers = {"Accept": "application/json"}
        if agent is not None:
            self.headers[AGENT_HEADER] = agent
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def request(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        """The status and the JSON answer; OSError, HTTPException or ValueError when the exchange fails."""
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.connection.request(method, path, body=data, headers=headers)
        response = self.connection.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None

    def health(self) -> dict[str, object]:
        status, answer = self.request("GET", "/health")
        if status != 200 or not isinstance(answer, dict):
            raise ValueError(f"/health answered {status}")
        return answer

    def set_timeout(self, seconds: float) -> None:
        self.connection.timeout = seconds
        if self.connection.sock is not None:
            self.connection.sock.settimeout(seconds)

    def close(self) -> None:
        self.connection.close()
