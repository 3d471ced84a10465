"""A throwaway PostgreSQL cluster for the benchmarks (initdb + pg_ctl on a private unix socket).

The minimal start/stop of ``tests/pg_server.py`` without pytest, and **without** ``fsync=off``:
the server runs with its default durable settings (fsync=on, synchronous_commit=on,
full_page_writes=on, shared_buffers as initdb sizes it). As root it runs as the ``postgres`` OS user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

PORT = 54331
"""Only names the socket file; the socket lives in the cluster's private directory."""


def find_bindir() -> Path:
    for c in [os.environ.get("MENTIS_PG_BINDIR"), *sorted(glob.glob("/usr/lib/postgresql/*/bin"))]:
        if c and (Path(c) / "initdb").exists() and (Path(c) / "pg_ctl").exists():
            return Path(c)
    found = shutil.which("initdb")
    if not found:
        raise SystemExit("no initdb/pg_ctl found; run scripts/install-postgres.sh")
    return Path(found).resolve().parent


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _run(argv: list[str]) -> str:
    done = subprocess.run(_as_postgres(argv), capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {(done.stderr or done.stdout).strip()[-800:]}")
    return done.stdout


class Cluster:
    def __init__(self, root: Path, bindir: Path) -> None:
        self.root, self.bindir = root, bindir
        self.sock, self.data = root / "sock", root / "data"
        self.log = root / "log" / "postgres.log"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.sock}&port={PORT}"

    def execute(self, sql: str, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            cur = conn.execute(sql)  # type: ignore[arg-type, unused-ignore]
            return cur.fetchall() if cur.description else []

    def new_database(self, name: str) -> str:
        self.execute(f"CREATE DATABASE {name}")
        self.execute("CREATE EXTENSION IF NOT EXISTS vector", name)
        return self.url(name)

    def settings(self) -> dict[str, str]:
        names = ("server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_sync_method",
                 "shared_buffers", "work_mem", "maintenance_work_mem", "max_connections")  # fmt: skip
        rows = self.execute(
            "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY(ARRAY["
            + ",".join(f"'{n}'" for n in names)
            + "])"
        )
        out = dict(rows)
        out["pgvector"] = self.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name='vector'"
        )[0][0]
        return out


@contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    bindir = find_bindir()
    root = Path(tempfile.mkdtemp(prefix="mentis-bench-pg-"))
    c = Cluster(root, bindir)
    c.sock.mkdir()
    c.log.parent.mkdir()
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        for p in (root, c.sock, c.log.parent):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    started = False
    try:
        _run([str(bindir / "initdb"), "-D", str(c.data), "-U", "postgres", "--auth=trust",
              "-E", "UTF8", "--locale=C"])  # fmt: skip
        opts = f"-c listen_addresses='' -c unix_socket_directories={c.sock} -p {PORT}"
        _run(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(c.data),
                "-l",
                str(c.log),
                "-o",
                opts,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        started = True
        yield c
    finally:
        if started:
            subprocess.run(
                _as_postgres([str(bindir / "pg_ctl"), "-D", str(c.data), "-m", "fast", "-w", "stop"]),
                capture_output=True, timeout=120, check=False,
            )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
