"""Bulk fills: a fresh store of ``n`` synthetic attempts through the public ``Store.append_attempts``
(the same ledger entries, bodies, lexical rows, vectors and task index as ``append_attempt``),
``FILL_BATCH`` attempts per transaction, random unit vectors instead of the model (the real model
embeds ~220 texts/s; 100k would take ~8 min). Same seed, same attempts on both backends."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from corpus import Corpus, Workload
from mentis.cli.progress import stderr_progress
from mentis.ledger.bodies import AttemptBody
from mentis.providers.embed.local import DIM, MODEL_ID
from mentis.store.protocol import AttemptRow, Store
from mentis.store.seal import Seal
from mentis.store.sqlite.store import SqliteStore

FILL_BATCH = 2_000
METHOD = f"bulk: store.append_attempts, {FILL_BATCH}/transaction, random unit vectors"


def attempt_rows(wl: Workload, rng: np.random.Generator, k: int) -> list[AttemptRow]:
    """``k`` attempt bodies as ``Memory.record_attempt`` builds them, each with a random unit vector."""
    bodies = [wl.body() for _ in range(k)]
    vecs = rng.standard_normal((k, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return [AttemptRow(AttemptBody.from_json(body), vec) for (body, _), vec in zip(bodies, vecs, strict=True)]


def append_all(store: Store, n: int, seed: int) -> float:
    """Append ``n`` attempts (the workload of ``seed``); returns the seconds spent generating them."""
    wl = Workload(Corpus(seed), n)
    rng = np.random.default_rng(seed + 1)
    store.set_meta("embed_model", MODEL_ID)
    store.set_meta("embed_dim", str(DIM))
    gen_s, done = 0.0, 0
    bar = stderr_progress()  # on stderr, only when it is a terminal
    job = bar.add_task(f"bulk fill: {n:,} attempts", total=n)
    bar.start()
    while done < n:
        k = min(FILL_BATCH, n - done)
        g0 = time.perf_counter()
        rows = attempt_rows(wl, rng, k)
        gen_s += time.perf_counter() - g0
        store.append_attempts(rows, Seal())
        done += k
        bar.advance(job, k)
    bar.stop()
    return gen_s


def bulk_fill(path: Path, n: int, seed: int) -> dict[str, Any]:
    """Fill a fresh SQLite store with ``n`` attempts; closing it checkpoints the WAL into the file."""
    t0 = time.perf_counter()
    store = SqliteStore(path, DIM, verify=False)
    gen_s = append_all(store, n, seed)
    store.close()
    total = time.perf_counter() - t0
    return {
        "attempts": n,
        "seconds": total,
        "generate_seconds": gen_s,
        "attempts_per_s": n / total,
        "file_mb": path.stat().st_size / 1e6,
        "method": METHOD,
    }


def pg_bulk_fill(url: str, n: int, seed: int) -> dict[str, Any]:
    """``bulk_fill`` for PostgreSQL (``append_attempts`` pipelines each batch). On its own connection
    to the throwaway database, the bench drops the HNSW index for the fill and builds it once
    afterwards with ``CREATE INDEX``."""
    import psycopg

    from mentis.store.postgres.store import PostgresStore
    from mentis.store.postgres.vectors import hnsw_index

    t0 = time.perf_counter()
    store = PostgresStore(url, DIM, verify=False)
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DROP INDEX vectors_hnsw")
        gen_s = append_all(store, n, seed)
        rows_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        admin.execute("SET maintenance_work_mem = '512MB'")  # this session only
        admin.execute(hnsw_index("vectors", DIM))
        admin.execute("ANALYZE")
        admin.execute("CHECKPOINT")
        size = admin.execute("SELECT pg_database_size(current_database())").fetchone()
    index_s = time.perf_counter() - t1
    store.close()
    total = time.perf_counter() - t0
    return {
        "attempts": n,
        "seconds": total,
        "rows_seconds": rows_s,
        "hnsw_build_seconds": index_s,
        "generate_seconds": gen_s,
        "attempts_per_s": n / total,
        "file_mb": (size[0] if size else 0) / 1e6,
        "method": f"{METHOD}, HNSW index built after the rows "
        "(maintenance_work_mem=512MB in the fill session)",
    }
