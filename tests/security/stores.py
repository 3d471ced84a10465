"""Store fixtures for the security tests, over ``sqlite`` and ``postgres`` as in tests/conformance.

A test module imports the fixtures it uses from here (this folder has no conftest of its own).
"""

from __future__ import annotations

import hashlib
import io
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest
import rfc8785

from mentis.config import Settings
from mentis.service.memory import Caller, Memory
from tests.backends import backend_settings

ADMIN = Caller(agent_id="operator")


@pytest.fixture
def settings(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    return backend_settings(backend, tmp_path / "store", request)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Memory]:
    """A separate SQLite store where an attacker prepares the chain they will export."""
    m = Memory.open(
        Settings(home=tmp_path / "scratch", db_path=tmp_path / "scratch" / "m.db", embedder="hash")
    )
    yield m
    m.close()


# ---------------------------------------------------------------- crafting exports


def export_lines(memory: Memory, repository: str | None = None) -> list[dict[str, Any]]:
    out = io.BytesIO()
    memory.export(ADMIN, out, repository)
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def reseal(lines: list[dict[str, Any]]) -> list[bytes]:
    """Hash every entry again, in order, with the reference RFC 8785 encoder: body hashes, entry
    hashes, prev links and the header's heads, as an attacker who knows the format would."""
    header, rows = lines[0], lines[1:]
    heads: dict[str, tuple[int, str]] = {}
    for row in rows:
        entry = row["entry"]
        seq, prev = heads.get(entry["chain"], (-1, ""))
        entry["seq"], entry["prev"] = seq + 1, prev
        if row["body"] is not None:
            entry["body_hash"] = hashlib.sha256(rfc8785.dumps(row["body"])).hexdigest()
        doc = {k: v for k, v in entry.items() if k not in ("hash", "sig")}
        entry["hash"] = hashlib.sha256(rfc8785.dumps(doc)).hexdigest()
        heads[entry["chain"]] = (entry["seq"], entry["hash"])
    header["heads"] = {chain: [seq, hash_] for chain, (seq, hash_) in heads.items()}
    return [orjson.dumps(line) for line in lines]


def raw_sql(settings: Settings, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One statement straight on the store's database, outside Mentis."""
    if settings.uses_postgres:
        import psycopg

        assert settings.database_url is not None
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            cur = conn.execute(sql.replace("?", "%s"), args)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []
    with closing(sqlite3.connect(settings.db_path, isolation_level=None)) as con:
        return con.execute(sql, args).fetchall()


def state(memory: Memory) -> list[tuple[str, int, str, bytes | None]]:
    """Every entry and body of a store: equal before and after means nothing was written."""
    return [(e.chain, e.seq, e.hash, body) for e, body in memory.store.iter_ledger()]
