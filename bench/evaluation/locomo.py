"""LoCoMo dev: every conversation turn stored as a thought, each question asked with search_thoughts."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.lab import Lab, Variant, cosine_signal, locomo_variant_grid, mechanism_grid, text_signal
from evaluation.metrics import Method, metrics, paired
from evaluation.runner import (
    LIMIT,
    Benchmark,
    cached_embed,
    environment,
    fill,
    shipped_parameters,
    thought_notes,
)
from mentis import retrieval
from mentis.api.thoughts import AppendThoughtInput, SearchThoughtsInput
from mentis.providers.embed.local import LocalEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite.store import SqliteStore

LOCOMO_REPO = "locomo/dev"
LOCOMO_KS = (5, 10, 20)
LOCOMO_WINDOW = 2  # lenient: same session, within this many turns of an evidence turn
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
"""LoCoMo's category numbers as commonly mapped (Maharana et al. 2024 release)."""
LOCOMO_REFERENCES = [
    ("MentisDB", 0.719, "lenient R@10, full 10-conversation LoCoMo (published)"),
    ("MemPalace", 0.889, "lenient R@10, full 10-conversation LoCoMo (published)"),
]


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


def by_mode(base: dict[str, Any], row: dict[str, Any], questions: Sequence[Question]) -> dict[str, Any]:
    """``paired`` for the strict and the lenient ranks of two result rows."""
    return {
        mode: paired([base[q.qid][i] for q in questions], [row[q.qid][i] for q in questions], ks=LOCOMO_KS)
        for i, mode in enumerate(("strict", "lenient"))
    }


class LoCoMo(Benchmark):
    name, repository, kind = "locomo", LOCOMO_REPO, "thought"

    def __init__(self, data: Path) -> None:
        self.turns, self.questions, self.counts = load_locomo(data)
        self.queries = {q.qid: q.question for q in self.questions}
        self.corpus = [content_of(t) for t in self.turns]
        self.doc_ids = [t.key for t in self.turns]
        self.notes = thought_notes("turn texts")

    def fill(self, store: SqliteStore, embedder: LocalEmbedder) -> tuple[dict[str, Any], np.ndarray]:
        """Every turn through Memory.append_thought (link_duplicates=False); thought id -> turn key."""
        caller = Caller(agent_id="bench-eval")
        reqs = [
            AppendThoughtInput(
                repository=LOCOMO_REPO,
                type="FactLearned",
                content=content_of(t),
                session_id=f"locomo-{t.conv}-S{dia_pos(t.dia_id)[0]}",
            )
            for t in self.turns
        ]
        texts = [req.content for req in reqs]
        unique = list(dict.fromkeys(texts))
        append = lambda memory, req: memory.append_thought(caller, req, link_duplicates=False)  # noqa: E731
        self.embedder = embedder
        info, results, vectors = fill(store, embedder, unique, append, reqs, "appending turns")
        table = dict(zip(unique, vectors, strict=True))
        info = {
            "embed_s": info["embed_s"],
            "append_s": info["write_s"],
            "misses": info["misses"],
            "distinct_texts": len(unique),
            "append_warnings": sum(len(r.warnings) for r in results),
            "superseded": sum(len(r.superseded) for r in results),
            "batch_vs_single_max_abs_diff": info["batch_vs_single_max_abs_diff"],
        }
        self.by_id = {r.thought_id: t.key for t, r in zip(self.turns, results, strict=True)}
        self.row_keys = {r: self.by_id[t] for t, r in store.thought_rowids(list(self.by_id)).items()}
        return info, np.stack([table[t] for t in texts])

    def shipped(self, memory: Memory, caller: Caller, text: str) -> list[Any]:
        req = SearchThoughtsInput(query=text, repository=LOCOMO_REPO, limit=LIMIT)
        return [self.by_id[s.thought.thought_id] for s in memory.search_thoughts(caller, req).thoughts]

    def ranking(self, store: SqliteStore, ranked: list[retrieval.Scored]) -> list[Any]:
        return [self.row_keys[s.rowid] for s in ranked[:LIMIT]]

    def lab(self, store: SqliteStore) -> Lab:
        """The lab with the conversational signals: each turn's window (the turn before it, the
        turn, the turn after it, within its session) by cosine and by BM25, and the turn with its
        session date in front, by cosine."""
        sessions = {r: (k[0], dia_pos(k[1])[0]) for r, k in self.row_keys.items()}
        lab = Lab(store, self.repository, self.kind, lambda ranked: self.ranking(store, ranked), sessions)
        rowid_of = {k: r for r, k in self.row_keys.items()}
        rows = [rowid_of[t.key] for t in self.turns]
        windows, dated = [], []
        for i, t in enumerate(self.turns):
            near = [
                u
                for u in self.turns[max(0, i - 1) : i + 2]
                if (u.conv, dia_pos(u.dia_id)[0]) == (t.conv, dia_pos(t.dia_id)[0])
            ]
            windows.append("\n".join(content_of(u) for u in near))
            dated.append(f"{t.date}. {content_of(t)}")
        # causal windows: the turn with the one said just before it in its session (what can be
        # written when the turn is recorded); turns opening a session have none. A window's hit
        # ranks both of its turns (the later one first: the row it was written for)
        pairs, later, earlier = [], [], []
        for i, t in enumerate(self.turns):
            if i and (self.turns[i - 1].conv, dia_pos(self.turns[i - 1].dia_id)[0]) == (
                t.conv,
                dia_pos(t.dia_id)[0],
            ):
                pairs.append(f"{content_of(self.turns[i - 1])}\n{content_of(t)}")
                later.append(rows[i])
                earlier.append(rows[i - 1])
        before = dict(zip(later, earlier, strict=True))
        causal_vec = cosine_signal(later, cached_embed(self.embedder, pairs))
        causal_lex = text_signal(later, pairs, self.repository)

        def both(hits: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
            out: dict[int, float] = {}
            for r, score in hits:
                out.setdefault(r, score)
                out.setdefault(before[r], score)
            return list(out.items())

        window_vec = cosine_signal(rows, cached_embed(self.embedder, windows))
        dated_vec = cosine_signal(rows, cached_embed(self.embedder, dated))
        window_lex = text_signal(rows, windows, self.repository)
        lab.signals = {
            "window_vec": lambda _, qvec: window_vec(qvec, retrieval.CANDIDATES),
            "window_lex": lambda text, _: window_lex(retrieval.query_terms(text), retrieval.CANDIDATES),
            "dated_vec": lambda _, qvec: dated_vec(qvec, retrieval.CANDIDATES),
            "causal_vec": lambda _, qvec: causal_vec(qvec, retrieval.CANDIDATES),
            "causal_lex": lambda text, _: causal_lex(retrieval.query_terms(text), retrieval.CANDIDATES),
            "causal_vec_both": lambda _, qvec: both(causal_vec(qvec, retrieval.CANDIDATES)),
            "causal_lex_both": lambda text, _: both(
                causal_lex(retrieval.query_terms(text), retrieval.CANDIDATES)
            ),
        }
        return lab

    def output(
        self, store: SqliteStore, methods: list[Method], edges_seen: int, fill: dict[str, Any]
    ) -> dict[str, Any]:
        questions = self.questions
        results = [locomo_result(m, questions) for m in methods]
        for r in results:
            r["vs_bm25s"] = by_mode(results[0]["ranks"], r["ranks"], questions)
        searched, fused = methods[-1], methods[-2]
        differ = sum(1 for q in questions if searched.rankings[q.qid] != fused.rankings[q.qid])
        return {
            "benchmark": "locomo-dev",
            "protocol": {
                "repository": LOCOMO_REPO,
                "stored": "one thought per turn, all conversations in one repository, via "
                "Memory.append_thought(link_duplicates=False): type FactLearned, content "
                "'{speaker}: {text}', no tags, session_id 'locomo-<conv>-S<session>' (not embedded; "
                "the store writes each turn's causal window row with the turn before it, and "
                "search_thoughts reads it to find a turn's neighbours for its search-time windows); "
                "session date not stored",
                "query": "the question text, Memory.search_thoughts(repository, limit 50; RRF then "
                "graph.rerank, which has no edges here)",
                "strict": "an evidence dia_id of the question's conversation in the top k",
                "lenient": f"a turn of the same conversation and session within {LOCOMO_WINDOW} turns "
                "of an evidence turn in the top k",
                "scoring": "R@5/10/20, MRR over the 50 returned (0 if absent); all categories",
                "latency": "per question, wall time of one call (search_thoughts, fused and dense incl. "
                "query embedding; bm25s incl. tokenising; lexical/vector: excl. the embedding)",
                "baselines": "bm25s and dense over the same '{speaker}: {text}' texts, same run",
            },
            "environment": environment(),
            "counts": {**self.counts, "thoughts_stored": len(self.row_keys)},
            "fill": fill,
            "shipped_parameters": shipped_parameters(),
            "graph_check": {
                "edges_from_top_seeds_all_questions": edges_seen,
                "questions_where_search_differs_from_fused": differ,
                "questions": len(questions),
            },
            "search_equals_fused": not differ,
            "references_other_systems": [
                {"system": s, "R@10": v, "note": n + "; other systems, different (larger) set"}
                for s, v, n in LOCOMO_REFERENCES
            ],
            "results": results,
        }

    def grid(self) -> list[Variant]:
        return mechanism_grid(
            [
                ("index-time windows, dense (instead of search-time)", ("window_vec",)),
                ("index-time windows, lexical (instead of search-time)", ("window_lex",)),
                (
                    "index-time windows, dense + lexical (instead of search-time)",
                    ("window_vec", "window_lex"),
                ),
                ("+ turn with its session date, dense (no windows)", ("dated_vec",)),
            ]
        ) + [
            Variant(name, extra=signals, extra_beside_window=beside, window_rows=rows)
            for name, signals, beside, rows in (
                # the shipped causal window rows (store) replaced by the lab's, crediting only the
                # later turn of each window hit
                ("causal windows: later turn only (not both)", ("causal_lex",), True, False),
                # one more embedding per thought: the window's text embedded too
                ("+ causal windows, dense (previous + turn embedded)", ("causal_vec_both",), True, True),
                (
                    "causal windows, lexical, instead of search-time",
                    ("causal_lex_both",),
                    False,
                    False,
                ),
                (
                    "causal windows, dense + lexical, instead of search-time",
                    ("causal_vec_both", "causal_lex_both"),
                    False,
                    False,
                ),
            )
        ]

    def sweep(self) -> list[Variant]:
        return locomo_variant_grid()

    def variant_rows(self, methods: list[Method]) -> list[dict[str, Any]]:
        rows = [locomo_result(m, self.questions) for m in methods]
        for r in rows:
            r["vs_shipped"] = by_mode(rows[0]["ranks"], r["ranks"], self.questions)
        for r in rows:
            del r["ranks"]  # per-question ranks only for the main methods (keeps the file small)
        return rows
