"""Vector candidates on PostgreSQL: pgvector's HNSW index for the whole store or a large scope,
an exact scan for a small one.

Measured at 100k random unit vectors (384 dims, the bench's fill; server CPU per query, 2 shared
cores under load, ``bench/README.md``): the HNSW query with ``ef_search`` 200 costs about 13 ms
unscoped, but scoped to one repository holding 1/8 to 3/8 of the rows it costs 35-50 ms, because
the index walks the whole graph's neighbourhood and the filter throws most of it away (recall@200
against the exact answer: 0.17 with ``strict_order``, 0.3-0.4 with ``relaxed_order``). Scanning
the scope's rows exactly costs 26-29 ms for a scope of 1/8 to 6/8 of the rows (every heap page
holding one of them is read, so it costs about a whole-table scan once a scope spans most pages;
the server runs it in parallel) and returns the exact top rows, as SQLite's in-process scan does;
the filtered index walk costs 28 ms only from 6/8 on. So a scope of at most :data:`EXACT_SCOPE_MAX` rows is
scanned exactly; a larger one, which the index serves well, uses the index with pgvector's
iterative scan (``relaxed_order``: the rows are re-ordered by their exact score here anyway).

The attempts' index is built over ``vec::halfvec(dim)`` (schema 7, :func:`hnsw_index`): 112 MB
instead of 195 MB at 100k, so it stays in the server's cache (server CPU per unscoped query 13.0 →
10.6 ms, same recall@200); the index walk orders by the half-precision distance, and the rows it
returns are scored and re-sorted in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mentis.store.postgres.connection import Conn
from mentis.store.shared.derived_check import PG_VECTOR_CHECK, derived_row_error
from mentis.store.shared.dialect import as_array

HALF_INDEXED = frozenset({"vectors"})
"""Tables whose HNSW index is built over ``vec::halfvec(dim)`` (schema 7): half the index's size,
so it stays in the server's cache; the rows keep float32 and are scored in float32."""
EXACT_SCOPE_MAX = 50_000
"""A scope of at most this many rows is scanned exactly (measured at 100k rows: 27 ms against 38 ms
for the filtered index walk at 4/8 of the rows, and recall 1.0 against 0.3)."""
EF_SEARCH_MIN, EF_SEARCH_MAX = 40, 1000
COUNTED_IN = {"vectors": "vectors", "thought_vectors": "thought_idx", "skill_vectors": "skill_idx"}
"""Where a scope's rows are counted: a table with an index leading on ``repository`` and one row
per vector (``thought_vectors`` and ``skill_vectors`` have no such index of their own)."""


def nearest(
    conn: Conn,
    table: str,
    query: np.ndarray,
    repositories: Sequence[str] | None,
    limit: int,
    *,
    iterative: bool,
) -> list[tuple[int, float]]:
    """The ``limit`` rows of ``table`` (of ``repositories``; None: all) nearest to ``query`` by
    cosine, as (rowid, cosine similarity), best first, ties by rowid. ``conn`` is in a transaction;
    ``iterative``: the server's pgvector has iterative index scans (0.8+)."""
    assert table.isidentifier(), table
    q = as_array(query)
    scope: list[Any] = [] if repositories is None else [list(repositories)]
    where = "" if repositories is None else "WHERE repository = ANY(%s) "
    if repositories is not None and _scope_rows(conn, table, scope[0]) <= EXACT_SCOPE_MAX:
        # Ordered by the score and rowid, which no index provides: the planner scans the scope.
        rows = conn.execute(
            f"SELECT rowid, s, chk = {PG_VECTOR_CHECK} FROM (SELECT rowid, 1 - (vec <=> %s) AS s, vec, "
            f"chk, repository FROM {table} {where}ORDER BY s DESC, rowid LIMIT %s) nearest "
            "ORDER BY s DESC, rowid",
            [q, *scope, limit],
        ).fetchall()
        return _checked(table, rows)
    ef = min(max(limit, EF_SEARCH_MIN), EF_SEARCH_MAX)
    if repositories is not None and iterative:
        conn.execute(
            "SELECT set_config('hnsw.ef_search', %s, true), "
            "set_config('hnsw.iterative_scan', 'relaxed_order', true)",
            (str(ef),),
        )
    else:
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef),))
    # ORDER BY the indexed distance alone, so the HNSW index serves it; the rows found are
    # scored in float32 and ties are ordered outside
    rows = conn.execute(
        f"SELECT rowid, s, chk = {PG_VECTOR_CHECK} FROM (SELECT rowid, 1 - (vec <=> %s) AS s, vec, chk, "
        f"repository FROM {table} {where}ORDER BY {_indexed_distance(table, len(q))} LIMIT %s) nearest "
        "ORDER BY s DESC, rowid",
        [q, *scope, q, limit],
    ).fetchall()
    return _checked(table, rows)


def _checked(table: str, rows: Sequence[Any]) -> list[tuple[int, float]]:
    """(rowid, score) of the candidates ``rows`` (rowid, score, whether the server found the row's
    checksum right: ``derived_check.PG_VECTOR_CHECK``); the index ranked them by these vectors."""
    for rowid, _, ok in rows:
        if not ok:
            raise derived_row_error(table, int(rowid))
    return [(int(r), float(s)) for r, s, _ in rows]


def hnsw_index(table: str, dim: int) -> str:
    """The statement that builds ``table``'s HNSW index (cosine)."""
    assert table.isidentifier(), table
    column = (
        f"(vec::halfvec({int(dim)})) halfvec_cosine_ops" if table in HALF_INDEXED else "vec vector_cosine_ops"
    )
    return f"CREATE INDEX {table}_hnsw ON {table} USING hnsw ({column})"


def _indexed_distance(table: str, dim: int) -> str:
    """The cosine distance to the parameter that ``table``'s HNSW index orders by."""
    if table in HALF_INDEXED:
        return f"vec::halfvec({int(dim)}) <=> %s::halfvec({int(dim)})"
    return "vec <=> %s"


def _scope_rows(conn: Conn, table: str, repositories: list[str]) -> int:
    """How many rows ``repositories`` hold in ``table``, counted up to ``EXACT_SCOPE_MAX + 1``."""
    counted = COUNTED_IN.get(table, table)
    row = conn.execute(
        f"SELECT count(*) FROM (SELECT 1 FROM {counted} WHERE repository = ANY(%s) LIMIT %s) n",
        (repositories, EXACT_SCOPE_MAX + 1),
    ).fetchone()
    return int(row[0]) if row is not None else 0


__all__ = ["EXACT_SCOPE_MAX", "HALF_INDEXED", "hnsw_index", "nearest"]
