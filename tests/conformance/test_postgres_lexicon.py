"""The PostgreSQL store's lexical index (``store/postgres_lexicon.py``) on a real server: each
process's in-process index follows the other processes' writes and forgets, including a writer
that commits after a later rowid; the schema 1 → 2 migration indexes what was stored; a rebuild
reloads every process; writers of different repositories never wait on each other's terms."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

from mentis.errors import StoreError
from mentis.ledger.bodies import AttemptBody, CodeContextBody
from mentis.ledger.canonical import canonical
from mentis.providers.embed import HashEmbedder
from mentis.retrieval import query_terms
from mentis.store.postgres.schema import SCHEMA_VERSION
from mentis.store.postgres.store import PostgresStore
from mentis.store.seal import Seal
from tests.pg_server import Cluster

DIM = HashEmbedder().dim
AT = "2026-01-01T00:00:00Z"


@pytest.fixture
def url(pg_cluster: Cluster) -> str:
    return pg_cluster.new_database()


@pytest.fixture
def stores(url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database: two server processes."""
    a, b = PostgresStore(url, DIM), PostgresStore(url, DIM)
    yield a, b
    a.close()
    b.close()


def _body(repo: str, attempt_id: str, observation: str) -> AttemptBody:
    return AttemptBody(
        attempt_id=attempt_id,
        repository=repo,
        task_id="T-1",
        agent_id="tester",
        created_at=AT,
        action="tried",
        observation=observation,
        files=[],
        tags=[],
        code_context=CodeContextBody(),
    )


def _vector(text: str) -> np.ndarray:
    return HashEmbedder().embed([text])[0]


def _append(store: PostgresStore, repo: str, attempt_id: str, observation: str) -> None:
    store.append_attempt(_body(repo, attempt_id, observation), _vector(observation), Seal())


def _found(store: PostgresStore, query: str, scope: list[str] | None = None) -> list[str]:
    hits = store.lexical(query_terms(query), scope, 50)
    keys = store.attempt_keys([r for r, _ in hits])
    return [keys[r][2] for r, _ in hits]


def test_a_process_finds_attempts_another_process_wrote_and_forgot(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    writer, reader = stores
    _append(writer, "r1", "a-1", "the quokka escaped the zoo")
    assert _found(reader, "quokka") == ["a-1"]
    _append(writer, "r1", "a-2", "a second quokka, quokka again")
    assert _found(reader, "quokka") == ["a-2", "a-1"]
    writer.forget_attempt("r1", "a-2", "test", "tester", Seal(id="tomb-1", at=AT))
    assert _found(reader, "quokka") == ["a-1"]
    assert reader.reloads == 1  # loaded once; the write and the forget were applied in place


def test_a_writer_committing_after_a_later_rowid_is_not_missed(
    stores: tuple[PostgresStore, PostgresStore], url: str
) -> None:
    early, other = stores
    reader = PostgresStore(url, DIM)
    try:
        assert _found(reader, "wombat") == []
        body = _body("r1", "slow", "a slow wombat")
        with early._write("r1") as conn:  # takes its rowid now, commits last
            raw = canonical(body.to_json())
            rowid, _ = early._append(conn, Seal(), "r1", "attempt", "slow", AT, "tester", raw)
            assert rowid is not None
            early._derive_attempt(conn, rowid, body, _vector("a slow wombat"))
            _append(other, "r2", "fast", "a fast wombat")
            assert _found(reader, "wombat") == ["fast"]
        assert set(_found(reader, "wombat")) == {"slow", "fast"}
        assert reader.attempt_keys([rowid])[rowid][2] == "slow"
    finally:
        reader.close()


def test_writers_of_different_repositories_do_not_wait_on_new_terms(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = stores
    done = threading.Event()
    errors: list[BaseException] = []

    def write_other_repository() -> None:
        try:
            _append(second, "r2", "b-1", "brandnewstem anotherfreshstem")
            done.set()
        except BaseException as exc:  # reported below
            errors.append(exc)

    body = _body("r1", "a-1", "brandnewstem anotherfreshstem")
    with first._write("r1") as conn:  # holds r1's new vocabulary rows uncommitted
        rowid, _ = first._append(
            conn, Seal(), "r1", "attempt", "a-1", AT, "tester", canonical(body.to_json())
        )
        assert rowid is not None
        first._derive_attempt(conn, rowid, body, _vector("brandnewstem"))
        worker = threading.Thread(target=write_other_repository)
        worker.start()
        finished = done.wait(timeout=20)
    worker.join(timeout=20)
    assert not errors and finished, errors
    assert set(_found(second, "brandnewstem")) == {"a-1", "b-1"}


def test_forget_erases_the_stems_only_it_held_from_the_vocabulary(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    store, _ = stores
    _append(store, "r1", "a-1", "xylophone common")
    _append(store, "r1", "a-2", "common words")
    _append(store, "r2", "b-1", "xylophone elsewhere")
    store.forget_attempt("r1", "a-1", None, "tester", Seal(id="tomb", at=AT))
    with store._read() as conn:
        rows = sorted(
            conn.execute("SELECT repository, term, df FROM lex_vocab WHERE term IN ('xylophon', 'common')")
        )
    assert rows == [("r1", "common", 1), ("r2", "xylophon", 1)]
    assert _found(store, "xylophone") == ["b-1"]


def test_migration_from_schema_1_indexes_the_stored_records(url: str) -> None:
    store = PostgresStore(url, DIM)
    _append(store, "r1", "a-1", "pelican landed")
    _append(store, "r1", "a-2", "nothing here")
    with store._write() as conn:  # back to schema 1 as an older Mentis left it
        conn.execute("DROP TABLE lex_vocab, attempt_terms, thought_terms, lex_removed")
        conn.execute("CREATE TABLE attempt_fts(rowid bigint PRIMARY KEY, repository text, tsv tsvector)")
        conn.execute("CREATE TABLE thought_fts(rowid bigint PRIMARY KEY, repository text, tsv tsvector)")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    store.close()
    migrated = PostgresStore(url, DIM)
    try:
        assert migrated.get_meta("schema_version") == str(SCHEMA_VERSION)
        assert _found(migrated, "pelican") == ["a-1"]
    finally:
        migrated.close()


def test_rebuild_reloads_every_process_and_keeps_the_answers(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    writer, reader = stores
    for i in range(5):
        _append(writer, f"r{i % 2}", f"a-{i}", f"heron {'heron ' * i}flew")
    before = reader.lexical(query_terms("heron flew"), None, 50)
    writer.rebuild(lambda texts: HashEmbedder().embed(texts))
    assert reader.lexical(query_terms("heron flew"), None, 50) == before
    assert reader.reloads == 2


def test_lexical_search_on_a_closed_store_is_a_store_error(url: str) -> None:
    store = PostgresStore(url, DIM)
    store.close()
    with pytest.raises(StoreError):
        store.lexical(query_terms("anything"), None, 10)
