"""The PostgreSQL vector query alone: before/after ``store/postgres_vectors.py`` on one table.

    .venv/bin/python bench/pg_vectors.py [--rows 100000] [--queries 30] [--scopes 0,1,3,4]

Starts a throwaway cluster (``pg_cluster.py``, server defaults), opens a ``PostgresStore`` to
create the schema, then fills only its ``vectors`` table in SQL with random unit vectors spread
over 8 repositories (row i in repository i % 8, as the core bench's fill spreads a repository
over every heap page; the table's layout and indexes are the store's, the ledger stays empty,
so this measures the query, not a store) and builds the HNSW index as ``fill.py`` does.

For each scope (0 = unscoped, k = k of the 8 repositories) it runs the same random queries
through the query before (ordered by the HNSW index with ``strict_order`` iterative scans when
scoped) and after (``postgres_vectors.nearest``), and reports the server's CPU per query (all of
the cluster's processes, parallel workers included, from /proc), the wall p50 and recall@200
against the exact float32 cosine ranking computed here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from mentis.store.postgres.vectors import nearest
from mentis.store.shared.dialect import as_array
from pg_cluster import throwaway_cluster

DIM = 384
DEPTH = 200
"""Vector candidates per search (``retrieval.CANDIDATES``)."""


def before(conn: Any, table: str, query: np.ndarray, repositories: list[str] | None, limit: int) -> list[Any]:
    """The query as ``PostgresStore._vector`` ran it before (commit ee59af8)."""
    q = as_array(query)
    repo_sql = "WHERE repository = ANY(%s) " if repositories is not None else ""
    args: list[Any] = [q, *([repositories] if repositories is not None else []), q, limit]
    conn.execute(f"SET LOCAL hnsw.ef_search = {min(max(limit, 40), 1000)}")
    conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
    return list(
        conn.execute(
            f"SELECT rowid, s FROM (SELECT rowid, 1 - (vec <=> %s) AS s FROM {table} {repo_sql}"
            "ORDER BY vec <=> %s LIMIT %s) nearest ORDER BY s DESC, rowid",
            args,
        ).fetchall()
    )


def server_cpu_ms(data_dir: Path) -> float:
    """User + system CPU of the postmaster and its children (backends, parallel workers)."""
    pm = int((data_dir / "postmaster.pid").read_text().split()[0])
    ticks = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            f = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(d) == pm or int(f[1]) == pm:
            ticks += int(f[11]) + int(f[12])
    return ticks / os.sysconf("SC_CLK_TCK") * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--scopes", default="0,1,3,4")
    ap.add_argument("--out", default="bench/results/pg-vectors.json")
    args = ap.parse_args()
    import psycopg
    from pgvector.psycopg import register_vector

    from mentis.store.postgres.store import PostgresStore
    from mentis.store.postgres.vectors import hnsw_index

    report: dict[str, Any] = {"rows": args.rows, "queries": args.queries, "results": []}
    with throwaway_cluster() as cluster:
        url = cluster.new_database("vec_bench")
        PostgresStore(url, DIM, verify=False).close()
        report["postgres_settings"] = cluster.settings()
        with psycopg.connect(url, autocommit=True) as conn:
            t0 = time.perf_counter()
            conn.execute("DROP INDEX vectors_hnsw")
            conn.execute(
                "INSERT INTO vectors SELECT i, 'repo' || (i %% 8), (SELECT l2_normalize("
                f"array_agg(random() - 0.5)::vector({DIM})) FROM generate_series(1, {DIM}) "
                "WHERE i > 0) FROM generate_series(1, %s) i",
                (args.rows,),
            )
            conn.execute("SET maintenance_work_mem = '512MB'")
            conn.execute(hnsw_index("vectors", DIM))
            conn.execute("ANALYZE vectors")
            conn.execute("CHECKPOINT")
            report["fill_s"] = time.perf_counter() - t0
            register_vector(conn)
            rows = conn.execute("SELECT rowid, repository, vec FROM vectors").fetchall()
            ids = np.array([r[0] for r in rows])
            reps = np.array([r[1] for r in rows])
            mat = np.stack([r[2].to_numpy() for r in rows]).astype(np.float32)
            del rows
            repos = sorted(set(reps.tolist()))
            rng = np.random.default_rng(9)
            queries = [rng.standard_normal(DIM).astype(np.float32) for _ in range(args.queries)]
            queries = [q / np.linalg.norm(q) for q in queries]
            for k in (int(x) for x in args.scopes.split(",")):
                for name in ("before", "after"):
                    cpu, walls, recall = 0.0, [], []
                    for _ in range(2):  # a warm-up pass, then the measured one
                        cpu, walls, recall = 0.0, [], []
                        for i, q in enumerate(queries):
                            scope = None if k == 0 else [repos[(i + j) % len(repos)] for j in range(k)]
                            c0, t0 = server_cpu_ms(cluster.data), time.perf_counter()
                            with conn.transaction():
                                if name == "before":
                                    got = before(conn, "vectors", q, scope, DEPTH)
                                else:
                                    got = nearest(conn, "vectors", q, scope, DEPTH, iterative=True)
                            walls.append((time.perf_counter() - t0) * 1000)
                            cpu += server_cpu_ms(cluster.data) - c0
                            scores = mat @ q
                            if scope:
                                scores = np.where(np.isin(reps, scope), scores, -9.0)
                            exact = set(ids[np.argsort(-scores)[:DEPTH]].tolist())
                            recall.append(len(exact & {int(r) for r, _ in got}) / DEPTH)
                    row = {
                        "scope": f"{k}/8" if k else "all",
                        "query": name,
                        "server_cpu_ms_per_query": cpu / len(queries),
                        "wall_p50_ms": statistics.median(walls),
                        "recall_at_200": float(np.mean(recall)),
                        "loadavg_1m": os.getloadavg()[0],
                    }
                    report["results"].append(row)
                    print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
