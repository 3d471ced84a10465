"""Tokens live in the store's database on both backends: outside the ledger and out of recall's
reach, shared by every process on the store, and moved once from the local file PostgreSQL
servers used before."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from mentis.config import Settings
from mentis.errors import InvalidInput, QueryError, StoreError
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore, bootstrap_admin
from tests.pg_server import Cluster

from .helpers import REPOS, ledger, record, sql

RawSql = Callable[[str], list[tuple[object, ...]]]


@pytest.fixture
def tokens(settings: Settings) -> Iterator[TokenStore]:
    with closing(TokenStore.open(settings)) as store:
        yield store


def test_a_token_is_a_row_of_the_store_database_and_never_a_ledger_entry_or_exported(
    memory: Memory, caller: Caller, tokens: TokenStore, raw_sql: RawSql
) -> None:
    record(memory, caller)
    before = ledger(memory)
    token, info = tokens.create(scope="write", repositories=(REPOS[0],), agent="ci-bot")
    out = io.BytesIO()
    memory.export(caller, out)
    assert raw_sql("SELECT id, agent, scope FROM tokens") == [(info.id, "ci-bot", "write")]
    assert ledger(memory) == before
    exported = out.getvalue()
    assert len(exported.splitlines()) == 1 + len(before)
    for secret_or_name in (info.id.encode(), b"ci-bot", token.encode(), b"tokens"):
        assert secret_or_name not in exported


def test_recall_cannot_read_the_tokens_table(
    memory: Memory, caller: Caller, tokens: TokenStore, settings: Settings
) -> None:
    tokens.create(scope="admin", agent="root")
    qualified = "public.tokens" if settings.uses_postgres else "main.tokens"
    for text in (
        "select * from tokens",
        f"select * from {qualified}",
        f"select count(*) from attempts where exists (select 1 from {qualified})",
        f"with t as (select digest from {qualified}) select * from t",
    ):
        with pytest.raises(QueryError, match="may only SELECT from the views"):
            sql(memory, caller, text)


def test_a_revocation_by_one_process_is_refused_by_another_at_its_next_lookup(
    settings: Settings, tokens: TokenStore
) -> None:
    with closing(TokenStore.open(settings)) as other:
        token, info = tokens.create(scope="read", repositories=(REPOS[0],), agent="reader")
        seen = other.lookup(token)
        assert seen is not None and seen.status() == "active"
        assert seen.caller() == Caller(agent_id="reader", can_write=False, repositories=(REPOS[0],))
        tokens.revoke(info.id)
        again = other.lookup(token)
        assert again is not None and again.status() == "revoked"
        assert [t.status() for t in other.list()] == ["revoked"]


def test_the_first_admin_token_is_made_once_however_many_servers_start(
    settings: Settings, tokens: TokenStore, tmp_path: Path
) -> None:
    with closing(TokenStore.open(settings)) as other:
        made = [
            bootstrap_admin(store, tmp_path / f"admin-{n}.token") for n, store in enumerate((tokens, other))
        ]
    assert made == [True, False]
    assert [(t.agent, t.scope) for t in tokens.list()] == [("admin", "admin")]


def test_a_token_refused_at_creation_writes_nothing(tokens: TokenStore, raw_sql: RawSql) -> None:
    for bad in (
        {"scope": "root", "repositories": (REPOS[0],)},
        {"scope": "read"},
        {"scope": "write", "repositories": ("ok/*", " padded")},
        {"scope": "write", "repositories": (REPOS[0],), "agent": "bell\x07"},
    ):
        with pytest.raises(InvalidInput):
            tokens.create(**bad)  # type: ignore[arg-type]
    assert raw_sql("SELECT count(*) FROM tokens") == [(0,)]


# ------------------------------------------------------------ the local file of earlier servers


@pytest.fixture
def pg_settings(pg_cluster: Cluster, tmp_path: Path) -> Settings:
    return Settings(
        home=tmp_path, db_path=tmp_path / "mentis.db", embedder="hash", database_url=pg_cluster.new_database()
    )


def _pg_rows(settings: Settings) -> list[tuple[object, ...]]:
    import psycopg

    assert settings.database_url is not None
    with psycopg.connect(settings.database_url) as conn:
        return conn.execute("SELECT id, revoked_at, digest FROM tokens ORDER BY id").fetchall()


def test_tokens_of_the_local_file_move_into_postgresql_once_and_keep_working(pg_settings: Settings) -> None:
    with closing(TokenStore(pg_settings.db_path)) as local:  # where a server on the URL kept them before
        kept, kept_info = local.create(scope="write", repositories=(REPOS[0],), agent="ci-bot")
        gone, gone_info = local.create(scope="read", repositories=(REPOS[0],))
        revoked_info = local.revoke(gone_info.id)
    with closing(TokenStore.open(pg_settings)) as shared:
        assert (shared.lookup(kept), shared.lookup(gone)) == (kept_info, revoked_info)
        shared.revoke(kept_info.id)
    moved = _pg_rows(pg_settings)
    with closing(TokenStore(pg_settings.db_path)) as local:
        local.create(scope="admin", agent="later")  # made for the local SQLite store afterwards
    with closing(TokenStore.open(pg_settings)) as shared:
        assert sorted(t.id for t in shared.list()) == sorted([kept_info.id, gone_info.id])
        assert shared.lookup(kept).status() == "revoked"  # type: ignore[union-attr]
    assert _pg_rows(pg_settings) == moved


def test_a_token_already_in_postgresql_wins_over_the_local_file(pg_settings: Settings) -> None:
    with closing(TokenStore(pg_settings.db_path)) as local:
        token, info = local.create(scope="write", repositories=(REPOS[0],))
    with closing(TokenStore.open(pg_settings)) as shared:
        shared.revoke(info.id)
    conn = sqlite3.connect(pg_settings.db_path)
    with conn:
        conn.execute("DELETE FROM meta")  # a copy of the file from before the move, on another machine
    conn.close()
    with closing(TokenStore.open(pg_settings)) as shared:
        assert shared.lookup(token).status() == "revoked"  # type: ignore[union-attr]
        assert shared.count() == 1


def test_no_local_file_is_created_when_tokens_live_in_postgresql(pg_settings: Settings) -> None:
    with closing(TokenStore.open(pg_settings)) as shared:
        shared.create(scope="admin")
    assert not pg_settings.db_path.exists()


def test_an_unreadable_local_token_file_is_a_clear_error_and_moves_nothing(pg_settings: Settings) -> None:
    pg_settings.db_path.write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError, match=f"could not read the tokens of {pg_settings.db_path}"):
        TokenStore.open(pg_settings)
    assert _pg_rows(pg_settings) == []
    assert pg_settings.db_path.read_bytes() == b"not a database" * 100
