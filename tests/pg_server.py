"""A throwaway PostgreSQL cluster for tests: initdb + pg_ctl on a private unix socket.

The cluster lives in its own temporary directory (data, socket and log), listens on no TCP
address, trusts local connections and is stopped and removed afterwards. The directory is made in
RAM (``/dev/shm``) when that has room, else in the system's temporary directory: a session creates
hundreds of ~7 MB databases, and on a busy disk writing and deleting them cost minutes. Each
database is dropped again at the end of the test that made it (``drop_created``), so the cluster
stays small. As root it runs as
the ``postgres`` OS user (``runuser``), which owns the directory. Without PostgreSQL binaries or
pgvector the caller is skipped with the reason — or failed, when ``MENTIS_REQUIRE_POSTGRES`` is
set (CI sets it, so a missing server can never pass as a skip). ``scripts/install-postgres.sh``
installs both.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

INSTALL_HINT = "run scripts/install-postgres.sh (as root) to install PostgreSQL 15 and pgvector"
INITDB_FLAGS = ("-E", "UTF8", "--no-sync", "--locale=C")
START = ("-w", "-t", "60", "start")
PORT = 54329
"""Only names the socket file; the socket lives in the cluster's private directory."""
RAM_DIR = Path("/dev/shm")
RAM_NEEDED = 2 << 30
"""Free bytes /dev/shm must have to hold a cluster (a container's default 64 MB does not)."""


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("MENTIS_REQUIRE_POSTGRES"):
        pytest.fail(f"PostgreSQL is required here (MENTIS_REQUIRE_POSTGRES is set) but {reason}")
    pytest.skip(f"PostgreSQL tests skipped: {reason}; {INSTALL_HINT}")


def find_bindir() -> Path | None:
    for candidate in [os.environ.get("MENTIS_PG_BINDIR"), *sorted(glob.glob("/usr/lib/postgresql/*/bin"))]:
        if candidate and (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found else None


class Cluster:
    def __init__(self, root: Path, bindir: Path) -> None:
        self.root = root
        self.bindir = bindir
        self.socket_dir = root / "sock"
        self.data = root / "data"
        self.log = root / "log" / "postgres.log"
        self.created: list[str] = []
        """Databases made by :meth:`new_database` and not dropped yet."""
        self.migrated: dict[int, str] = {}
        """The template of :meth:`new_migrated_database` for each vector size, once made."""

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.socket_dir}&port={PORT}"

    def execute(self, sql: str, dbname: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def new_database(self, template: str = "mentis_template") -> str:
        """A fresh database (with pgvector) and its URL. Copied file by file (``FILE_COPY``: with
        fsync off, quicker than PostgreSQL 15's default of logging every block of the template)."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.execute(f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY")
        self.created.append(name)
        return self.url(name)

    def new_migrated_database(self, dim: int) -> str:
        """A fresh database already holding this Mentis's schema, for vectors of ``dim``: a copy of
        a template that the first call migrates with :class:`PostgresStore` (the same migrations a
        fresh database gets on its first open), which saves each store the ~150 ms they take.
        The template holds the schema only: no ledger entry, token or setting of the service."""
        template = self.migrated.get(dim)
        if template is None:
            from mentis.store.postgres.store import PostgresStore

            template = f"mentis_schema_{dim}"
            self.execute(f"CREATE DATABASE {template} TEMPLATE mentis_template")
            PostgresStore(self.url(template), dim).close()
            self.migrated[dim] = template
        return self.new_database(template)

    def drop_created(self) -> None:
        """Drops the databases :meth:`new_database` made that nobody is connected to any more; one
        still in use (a fixture of wider scope holds it) is kept, and dropped with the cluster."""
        import psycopg

        if not self.created:
            return
        with psycopg.connect(self.url(), autocommit=True) as conn:
            busy = {
                name
                for (name,) in conn.execute(
                    "SELECT DISTINCT datname FROM pg_stat_activity WHERE datname = ANY(%s)", (self.created,)
                )
            }
            for name in [n for n in self.created if n not in busy]:
                conn.execute(f"DROP DATABASE IF EXISTS {name}")  # type: ignore[arg-type]
        self.created = [n for n in self.created if n in busy]


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    if shutil.which("runuser"):
        return ["runuser", "-u", "postgres", "--", *argv]
    return ["su", "postgres", "-c", " ".join(argv)]


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(_as_postgres(argv), capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        unavailable(f"{what} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-800:]}")


def _scratch_parent() -> Path | None:
    """/dev/shm when it is there with room for a cluster, else None (the system's temp dir)."""
    try:
        if os.access(RAM_DIR, os.W_OK) and shutil.disk_usage(RAM_DIR).free >= RAM_NEEDED:
            return RAM_DIR
    except OSError:
        pass
    return None


@contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    bindir = find_bindir()
    if bindir is None:
        unavailable("no initdb/pg_ctl binaries were found")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[postgres]')")
    root = Path(tempfile.mkdtemp(prefix="mentis-pg-", dir=_scratch_parent()))
    cluster = Cluster(root, bindir)
    for sub in (cluster.socket_dir, cluster.log.parent):
        sub.mkdir()
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            unavailable("running as root but there is no `postgres` OS user to run the server as")
        for path in (root, cluster.socket_dir, cluster.log.parent):
            os.chown(path, pw.pw_uid, pw.pw_gid)
    started = False
    try:
        _run(
            [
                str(bindir / "initdb"),
                "-D",
                str(cluster.data),
                "-U",
                "postgres",
                "--auth=trust",
                *INITDB_FLAGS,
            ],
            "initdb",
        )
        options = (
            f"-c listen_addresses='' -c unix_socket_directories={cluster.socket_dir} -p {PORT} -c fsync=off"
        )
        _run(
            [str(bindir / "pg_ctl"), "-D", str(cluster.data), "-l", str(cluster.log), "-o", options, *START],
            "pg_ctl start",
        )
        started = True
        try:
            cluster.execute("CREATE DATABASE mentis_template")
            cluster.execute("CREATE EXTENSION vector", "mentis_template")
        except Exception as exc:
            unavailable(f"the pgvector extension could not be created ({exc})")
        yield cluster
    finally:
        if started:
            subprocess.run(
                _as_postgres(
                    [str(bindir / "pg_ctl"), "-D", str(cluster.data), "-m", "immediate", "-w", "stop"]
                ),
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)
