"""Vector candidates on PostgreSQL (``store/postgres_vectors.py``) on a real server with pgvector:
a search scoped to a small scope returns the exact nearest rows of that scope (as SQLite's scan
does), and a scope too large for the exact scan still gets its rows, and only its rows, through
the HNSW index."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from mentis.ledger.bodies import AttemptBody, CodeContextBody
from mentis.store.postgres import vectors as postgres_vectors
from mentis.store.postgres.schema import SCHEMA_VERSION
from mentis.store.postgres.store import PostgresStore
from mentis.store.protocol import AttemptRow
from mentis.store.seal import Seal
from tests.pg_server import Cluster

DIM = 384
AT = "2026-01-01T00:00:00Z"
REPOS = [f"repo-{i}" for i in range(12)]
PER_REPO = 100


def _body(repo: str, attempt_id: str) -> AttemptBody:
    return AttemptBody(
        attempt_id=attempt_id,
        repository=repo,
        task_id="T-1",
        agent_id="tester",
        created_at=AT,
        action="tried",
        observation="observed",
        files=[],
        tags=[],
        code_context=CodeContextBody(),
    )


@pytest.fixture
def filled(pg_cluster: Cluster) -> Iterator[tuple[PostgresStore, dict[str, np.ndarray], dict[str, str]]]:
    """A store of 1,200 attempts in 12 repositories with random unit vectors (the hardest case
    for an HNSW graph), the vector of each attempt id and its repository."""
    store = PostgresStore(pg_cluster.new_database(), DIM)
    rng = np.random.default_rng(15)
    vectors: dict[str, np.ndarray] = {}
    repo_of: dict[str, str] = {}
    rows = []
    for i in range(len(REPOS) * PER_REPO):
        repo, aid = REPOS[i % len(REPOS)], str(uuid.uuid4())
        v = rng.standard_normal(DIM).astype(np.float32)
        vectors[aid], repo_of[aid] = v / np.linalg.norm(v), repo
        rows.append(AttemptRow(_body(repo, aid), vectors[aid]))
    store.append_attempts(rows, Seal())
    yield store, vectors, repo_of
    store.close()


def _exact(query: np.ndarray, vectors: dict[str, np.ndarray], ids: list[str], k: int) -> list[str]:
    return sorted(ids, key=lambda a: -float(vectors[a] @ query))[:k]


def test_a_search_scoped_to_a_small_scope_returns_its_exact_nearest_rows(
    filled: tuple[PostgresStore, dict[str, np.ndarray], dict[str, str]],
) -> None:
    store, vectors, repo_of = filled
    rng = np.random.default_rng(16)
    for repo in REPOS[:4]:
        query = rng.standard_normal(DIM).astype(np.float32)
        query /= np.linalg.norm(query)
        hits = store.vector(query, [repo], 50)
        keys = store.attempt_keys([r for r, _ in hits])
        found = [keys[r][2] for r, _ in hits]
        assert found == _exact(query, vectors, [a for a, r in repo_of.items() if r == repo], 50)
        assert [s for _, s in hits] == pytest.approx([float(vectors[a] @ query) for a in found], abs=1e-5)


def test_a_scope_too_large_for_the_exact_scan_gets_only_its_rows_through_the_index(
    filled: tuple[PostgresStore, dict[str, np.ndarray], dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, vectors, repo_of = filled
    monkeypatch.setattr(postgres_vectors, "EXACT_SCOPE_MAX", PER_REPO - 1)
    scope = REPOS[:2]
    query = vectors[next(a for a, r in repo_of.items() if r == scope[1])]

    hits = store.vector(query, scope, 50)

    keys = store.attempt_keys([r for r, _ in hits])
    assert len(hits) == 50
    assert {keys[r][0] for r, _ in hits} <= set(scope)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert hits[0][1] == pytest.approx(1.0, abs=1e-5)  # the query's own row comes first


def _index_def(store: PostgresStore) -> str:
    with store._read() as conn:
        row = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'vectors_hnsw'").fetchone()
    assert row is not None
    return str(row[0])


def test_schema_7_rebuilds_an_older_stores_index_over_half_precision_and_search_uses_it(
    filled: tuple[PostgresStore, dict[str, np.ndarray], dict[str, str]],
) -> None:
    store, vectors, _ = filled
    assert "halfvec(384)" in _index_def(store)
    with store._write() as conn:  # the store as schema 6 left it: a float32 index
        conn.execute("DROP INDEX vectors_hnsw")
        conn.execute("CREATE INDEX vectors_hnsw ON vectors USING hnsw (vec vector_cosine_ops)")
        conn.execute("DROP TABLE window_terms")  # schema 8's table (no thoughts here: no rows)
        conn.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    store.close()

    upgraded = PostgresStore(store.url, DIM)
    try:
        assert upgraded.get_meta("schema_version") == str(SCHEMA_VERSION)
        assert "halfvec_cosine_ops" in _index_def(upgraded)
        aid = next(iter(vectors))
        with upgraded._read() as conn:
            conn.execute("SET LOCAL enable_seqscan = off")
            plan = "\n".join(
                str(r[0])
                for r in conn.execute(
                    "EXPLAIN SELECT rowid FROM vectors "
                    "ORDER BY vec::halfvec(384) <=> %s::halfvec(384) LIMIT 5",
                    (vectors[aid].tolist(),),
                )
            )
        assert "vectors_hnsw" in plan
        hits = upgraded.vector(vectors[aid], None, 10)
        assert upgraded.attempt_keys([hits[0][0]])[hits[0][0]][2] == aid
        assert hits[0][1] == pytest.approx(1.0, abs=1e-6)  # scored in float32, not half precision
        assert len(hits) == 10 and [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    finally:
        upgraded.close()
