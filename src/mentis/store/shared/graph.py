"""The graph links of search, written once for both backends: rows that share a task, a label
(a file, tag or concept) or a thought's ref or relation with each seed of a search.

:func:`for_seeds` runs one SQL per seed on SQLite (in process, each is cheap) and one statement
for every seed on PostgreSQL (a LATERAL join: one round trip); :func:`label_links` is the shared
label query the attempt and thought graphs both use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mentis.store.shared.backend import Connection
from mentis.store.shared.core import check_list
from mentis.store.shared.dialect import Dialect

LABEL_FANOUT = 200
"""Labels held by more attempts than this (a README everyone touches) link nothing."""


def for_seeds(
    d: Dialect, conn: Connection, inner: str, order: str, seeds: Sequence[int], args: Sequence[Any]
) -> dict[int, list[tuple[Any, ...]]]:
    """The rows of ``inner`` (SQL in which ``{seed}`` stands for one seed's rowid) for each seed,
    in ``inner``'s own order (``order`` repeats its ORDER BY over the output columns).

    PostgreSQL runs it once for all seeds (a LATERAL join over the seed array: one statement
    instead of one per seed, each a round trip and a plan); SQLite runs it per seed, in process.
    """
    out: dict[int, list[tuple[Any, ...]]] = {int(seed): [] for seed in seeds}
    if not seeds:
        return out
    if d.postgres:
        sql = (
            "SELECT s.seed, x.* FROM unnest(?::bigint[]) WITH ORDINALITY AS s(seed, ord) "
            f"CROSS JOIN LATERAL ({inner.format(seed='s.seed')}) x ORDER BY s.ord, {order}"
        )
        for seed, *row in conn.execute(d.q(sql), [[int(s) for s in seeds], *args]):
            out[int(seed)].append(tuple(row))
        return out
    parts = inner.split("{seed}")
    sql, taken = "?".join(parts), [part.count("?") for part in parts]
    for seed in out:
        rest, bound = iter(args), []
        for i, count in enumerate(taken):
            bound += [next(rest) for _ in range(count)] + ([seed] if i < len(taken) - 1 else [])
        out[seed] = [tuple(row) for row in conn.execute(sql, bound)]
    return out


def label_links(
    d: Dialect,
    conn: Connection,
    labels: str,
    idx: str,
    heavy: str,
    seeds: Sequence[int],
    repositories: Sequence[str] | None,
    fanout: int,
    limit: int,
) -> dict[int, list[tuple[Any, ...]]]:
    """For each seed, rows of ``repositories`` (None: all) sharing labels with it: 0.5 per
    shared label of kind ``heavy``, 0.25 per other, best ``limit``; labels held by more than
    ``fanout`` rows of those repositories link nothing.

    Label rows exist only for live documents, so the index table is joined only to filter by
    repository; the ``(kind, label, rowid)`` index answers the rest without table reads.
    """
    assert heavy.isidentifier(), heavy  # a label kind, written into the SQL
    join = count_join = where = count_where = ""
    scope: list[Any] = []
    if repositories is not None:
        check_list(repositories, "repositories")
        cond, scope = d.in_("b.scope", repositories)
        join, where = f"JOIN {idx} b ON b.rowid = l2.rowid ", f"AND {cond} "
        count_join = f"JOIN {idx} y ON y.rowid = x.rowid "
        count_where = f"AND {cond.replace('b.', 'y.', 1)} "
    inner = (
        f"SELECT l2.rowid AS other, sum(CASE l1.kind WHEN '{heavy}' THEN 0.5 ELSE 0.25 END) AS w "
        f"FROM {labels} l1 JOIN {labels} l2 ON l2.kind = l1.kind AND l2.label = l1.label "
        f"AND l2.rowid != l1.rowid {join}"
        f"WHERE l1.rowid = {{seed}} {where}AND (SELECT count(*) FROM (SELECT 1 FROM {labels} x "
        f"{count_join}WHERE x.kind = l1.kind AND x.label = l1.label {count_where}"
        "LIMIT ? + 1) capped) <= ? "
        "GROUP BY l2.rowid ORDER BY w DESC, l2.rowid LIMIT ?"
    )
    args = [*scope, *scope, fanout, fanout, limit]
    found = for_seeds(d, conn, inner, "x.w DESC, x.other", seeds, args)
    return {seed: [(int(r), float(w)) for r, w in rows] for seed, rows in found.items()}


__all__ = ["LABEL_FANOUT", "for_seeds", "label_links"]
