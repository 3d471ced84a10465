"""SeaMonkey duplicates: bug reports stored as tasks, each searched for its listed duplicates."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.lab import Lab, Variant, cosine_signal, mechanism_grid, variant_grid
from evaluation.metrics import Method, paired
from evaluation.runner import (
    LIMIT,
    Benchmark,
    Bm25,
    cached_embed,
    environment,
    fill,
    shipped_parameters,
)
from mentis import retrieval
from mentis.api.attempts import RecordAttemptInput, SearchInput
from mentis.api.common import MAX_QUERY_CHARS, MAX_TEXT_BYTES
from mentis.ledger.bodies import attempt_text
from mentis.providers.embed.local import LocalEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite.store import SqliteStore

REPO = "mozilla/seamonkey"


@dataclass(frozen=True)
class Report:
    id: str
    summary: str
    description: str


def truncate_utf8(text: str, max_bytes: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", errors="ignore")


def load_seamonkey(
    data: Path,
) -> tuple[list[Report], list[tuple[str, str]], list[tuple[str, str]], dict[str, int]]:
    """Reports, all pairs (id lists split), and the pairs of single-id rows only.

    The second set is what a reader that does not split "Duplicate id" lists gets (a list is
    not an id in the reports file, so the row is skipped); the issue's BM25 reference point
    (~0.73 R@5, ~0.81 R@10) reproduces on it.
    """
    with open(data / "SeaMonkey_bugs.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    reports = [
        Report(
            r["Issue id"].strip(),
            r["Summary"].replace("\x00", "").strip(),
            r["Description"].replace("\x00", ""),
        )
        for r in rows
    ]
    known = {r.id for r in reports}
    listed, pairs, single, seen = 0, [], [], set()
    with open(data / "SeaMonkey_bugs-combined.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            query = row["Issue id"].strip()
            listed_ids = [d.strip() for d in row["Duplicate id"].split(",") if d.strip()]
            if len(listed_ids) == 1 and query in known and listed_ids[0] in known:
                single.append((query, listed_ids[0]))
            # "Duplicate id" may list several ids: "1284028, 1648584".
            for dup in (d.strip() for d in row["Duplicate id"].split(",")):
                if not dup:
                    continue
                listed += 1
                if query in known and dup in known and query != dup and (query, dup) not in seen:
                    seen.add((query, dup))
                    pairs.append((query, dup))
    counts = {
        "reports": len(reports),
        "pairs_listed": listed,
        "pairs_used": len(pairs),
        "pairs_skipped_unknown_id": listed - len(pairs),
        "query_reports": len({q for q, _ in pairs}),
        "pairs_single_id_rows": len(single),
    }
    return reports, pairs, single, counts


def observation_of(r: Report) -> str:
    text = r.description if r.description.strip() else r.summary
    return truncate_utf8(text, MAX_TEXT_BYTES)


def query_of(r: Report) -> str:
    return (r.summary + "\n" + r.description)[:MAX_QUERY_CHARS]


class SeaMonkey(Benchmark):
    name, repository, kind = "seamonkey", REPO, "attempt"

    def __init__(self, data: Path) -> None:
        self.reports, self.pairs, self.single, self.counts = load_seamonkey(data)
        by_id = {r.id: r for r in self.reports}
        self.queries = {q: query_of(by_id[q]) for q in dict.fromkeys(q for q, _ in self.pairs)}
        self.corpus = [r.summary + "\n" + r.description for r in self.reports]
        self.doc_ids = [r.id for r in self.reports]
        self.notes = {
            "bm25s": Bm25.note,
            "dense": "cosine, all-MiniLM-L6-v2, attempt_text(body), brute force",
            "lexical": "store.lexical(query_terms(q)) grouped to tasks",
            "vector": "store.vector(embed(q)) grouped to tasks",
            "fused": "pipeline.candidates without the graph walk (lexical + vector, RRF), grouped to tasks",
            "fused+graph": "Memory.search as shipped (bm25 + vector, RRF, personalised PageRank)",
        }

    def fill(self, store: SqliteStore, embedder: LocalEmbedder) -> tuple[dict[str, Any], np.ndarray]:
        """Every report through Memory.record_attempt."""
        caller = Caller(agent_id="bench-eval")
        reqs = [
            RecordAttemptInput(
                repository=REPO,
                task_id=r.id,
                task_title=r.summary,
                action=r.summary,
                observation=observation_of(r),
            )
            for r in self.reports
        ]
        texts = [attempt_text(req.model_dump(exclude_none=True)) for req in reqs]
        record = lambda memory, req: memory.record_attempt(caller, req)  # noqa: E731
        self.embedder = embedder
        info, _, vectors = fill(store, embedder, texts, record, reqs, "recording reports")
        info["record_s"] = info.pop("write_s")
        return info, vectors

    def shipped(self, memory: Memory, caller: Caller, text: str) -> list[Any]:
        res = memory.search(caller, SearchInput(query=text, repository=REPO, limit=LIMIT))
        return [t.task_id for t in res.tasks]

    def ranking(self, store: SqliteStore, ranked: list[retrieval.Scored]) -> list[Any]:
        keys = store.attempt_keys([s.rowid for s in ranked])
        hits = retrieval.group_tasks(ranked, {r: (k[0], k[1]) for r, k in keys.items()}, LIMIT)
        return [h.task_id for h in hits]

    def output(
        self, store: SqliteStore, methods: list[Method], edges_seen: int, fill: dict[str, Any]
    ) -> dict[str, Any]:
        results = [m.result(self.pairs) for m in methods]
        results_single = [m.result(self.single) for m in methods]
        for rows in (results, results_single):
            bm25_ranks = list(rows[0]["ranks"].values())
            for r in rows:
                r["vs_bm25s"] = paired(bm25_ranks, list(r["ranks"].values()))
        searched, fused = methods[-1], methods[-2]
        differ = [q for q in self.queries if searched.rankings[q] != fused.rankings[q]]
        return {
            "benchmark": "seamonkey-duplicates",
            "protocol": {
                "repository": REPO,
                "search_limit": LIMIT,
                "query": f"summary + '\\n' + description, first {MAX_QUERY_CHARS} chars",
                "stored": "task_title=action=summary, "
                "observation=description (summary if empty), via Memory.record_attempt",
                "scoring": "rank of the duplicate's task after dropping the query's own task; "
                "R@k, MRR over the top 50 (0 if absent)",
                "latency": "per query report, wall time of one call (fused+graph: Memory.search incl. "
                "query embedding; fused: embedding + lexical + vector + fuse + grouping; "
                "lexical/vector: excl. the embedding)",
            },
            "environment": environment(),
            "counts": {**self.counts, "attempts_stored": store.counts()["attempts"]},
            "fill": fill,
            "shipped_parameters": shipped_parameters(),
            "graph_check": {
                "edges_from_top_seeds_all_queries": edges_seen,
                "queries_where_graph_changes_ranking": len(differ),
                "queries": len(self.queries),
                "graph_equals_fused": not differ,
            },
            "results": results,
            "results_single_id_rows": results_single,
        }

    def lab(self, store: SqliteStore) -> Lab:
        """The lab with a title-to-title dense signal beside the shipped lexical one: the query's
        first line (a report's summary) against the stored task titles, by cosine between the
        model's vectors of the two."""
        lab = Lab(store, self.repository, self.kind, lambda ranked: self.ranking(store, ranked))
        rows = [r for (r,) in lab.conn.execute("SELECT rowid FROM attempt_idx WHERE repository = ?", (REPO,))]
        task_of = {r: k[1] for r, k in store.attempt_keys(rows).items()}
        by_id = {r.id: r for r in self.reports}
        titles = [by_id[task_of[r]].summary for r in rows]
        title_vec = cosine_signal(rows, cached_embed(self.embedder, titles))
        first_vecs: dict[str, np.ndarray] = {}

        def by_title_vec(text: str, _: np.ndarray) -> Any:
            line = text.split("\n", 1)[0]
            if line not in first_vecs:
                first_vecs[line] = self.embedder.embed([line])[0]
            return title_vec(first_vecs[line], retrieval.CANDIDATES)

        lab.signals = {"title_vec": by_title_vec}
        return lab

    def grid(self) -> list[Variant]:
        return mechanism_grid([("+ title-to-title dense", ("title_vec",))])

    def sweep(self) -> list[Variant]:
        return variant_grid()

    def variant_rows(self, methods: list[Method]) -> list[dict[str, Any]]:
        rows = []
        for m in methods:
            rows.append(m.result(self.pairs))
            rows[-1]["single_id_rows"] = {
                k: val for k, val in m.result(self.single).items() if k in ("R@1", "R@5", "R@10", "MRR")
            }
        base = list(rows[0]["ranks"].values())
        for r in rows:
            r["vs_shipped"] = paired(base, list(r["ranks"].values()))
        return rows
