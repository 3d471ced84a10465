"""Experimental retrieval variants: the real candidate pipeline (:mod:`mentis.retrieval.pipeline`)
run with other parameters (term selection, field weights, RRF k, lexical/vector weighting, score
fusion, candidate depth, graph walk) on the store a benchmark filled. Nothing in ``src`` changes.

The lexical side is a :class:`LexicalIndex` built here from the repository's bodies with the
variant's field weights (the store's own index bakes the shipped weights in at write time), and
the query's terms are chosen here by the variant's rules; the rest is the pipeline search runs.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import orjson

from mentis import retrieval
from mentis.index import lexical
from mentis.ledger import bodies as records
from mentis.ledger.bodies import AttemptBody, ThoughtBody
from mentis.retrieval import graph, pipeline, titles
from mentis.retrieval.window import WINDOW_TOP, fuse_pairs, window_fuse
from mentis.store.sqlite import indexes as sqlite_index
from mentis.store.sqlite.store import SqliteStore

_TOKEN = re.compile(r"\w+", re.UNICODE)
MAXT, DEPTH = retrieval.MAX_QUERY_TERMS, retrieval.CANDIDATES
LONG_QUERY_WORDS = 32
"""For the lab's stopword rows: a query of more words than this is a pasted report rather than a
question. The LoCoMo and FAQ questions have 3 to 20 words, and 72 of the 75 SeaMonkey query
reports more than 32 (median 103; ``query_words`` in each results file), so the rows do not hang
on this value."""


@dataclass(frozen=True)
class Variant:
    name: str
    weights: tuple[float, ...] | None = None  # FTS field weights; None = the store's shipped ones
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
    session_graph: bool = False  # thoughts: graph walk over emulated per-session tags (see Lab)
    restart: float = graph.RESTART  # the walk's restart probability
    stay: bool = True  # nodes without edges keep their mass, as graph.personalised_pagerank
    qtf_cap: int = 0  # a query word counts at most this many times (0: as often as repeated)
    stop: str = "always"  # drop stopwords "always" | only in "long" queries | "never"
    extra: tuple[str, ...] = ()  # the benchmark's extra ranked lists, RRF-fused beside lex + vec
    extra_beside_window: bool = False  # extra lists fused beside the search-time windows, not instead
    window_rows: bool = True  # as shipped: thoughts' causal window rows (window_terms) fused too
    window: bool = True  # as shipped: candidates also smoothed over same-session neighbours
    window_top: int = WINDOW_TOP
    window_sides: tuple[bool, bool] = (True, True)  # lexical, vector
    titles: bool = True  # as shipped: attempts' title-to-title BM25 fused beside lexical + vector

    def params(self) -> pipeline.Params:
        return pipeline.Params(
            depth=self.depth,
            fusion=self.fusion,
            rrf_k=self.rrf_k,
            w_lex=self.w_lex,
            w_vec=self.w_vec,
            alpha=self.alpha,
            restart=self.restart,
            stay=self.stay,
        )

    def note(self) -> str:
        return json.dumps({k: val for k, val in asdict(self).items() if k != "name"})


class Lab:
    """The pipeline over one repository's attempts (``kind`` "attempt") or thoughts ("thought").

    ``session_graph`` gives the walk the edges a tag per session would give (what the store's
    label query returns for a shared tag: weight 0.25, the first ``NEIGHBOURS_PER_SEED`` other
    thoughts of the session by rowid), from ``session_of`` (rowid -> session), without a second
    fill; nothing else about such a fill (the tag text in the lexical index) is emulated.
    """

    def __init__(
        self,
        store: SqliteStore,
        repository: str,
        kind: str,
        to_ranking: Callable[[list[retrieval.Scored]], list[Any]],
        session_of: dict[int, Any] | None = None,
        signals: dict[str, Callable[[str, np.ndarray], pipeline.Hits]] | None = None,
    ) -> None:
        self.store = store
        self.repository = repository
        self.to_ranking = to_ranking
        if kind == "attempt":
            self.idx, self.shipped_weights = "attempt_idx", records.FTS_WEIGHTS
            self.fields: Callable[[dict[str, Any]], Sequence[str]] = lambda body: (
                AttemptBody.from_json(body).index_fields.texts
            )
            self.vector: pipeline.Vector = store.vector
            self.edges: pipeline.Edges = store.attempt_edges
            self.title_lexical: pipeline.Lexical | None = store.title_lexical
            self.task_of: titles.TaskOf | None = lambda rows: {
                r: k[:2] for r, k in store.attempt_keys(rows).items()
            }
        else:
            self.idx, self.shipped_weights = "thought_idx", records.THOUGHT_FTS_WEIGHTS
            self.fields = lambda body: ThoughtBody.from_json(body).index_fields.texts
            self.vector, self.edges = store.thought_vector, store.thought_edges_between
            self.title_lexical, self.task_of = None, None
        self.window_lexical: pipeline.Lexical | None = store.window_lexical if kind == "thought" else None
        self.session_of = session_of or {}
        self.signals = signals or {}
        self.sessions: dict[Any, list[int]] = {}
        for r in sorted(self.session_of):
            self.sessions.setdefault(self.session_of[r], []).append(r)
        self._df: dict[str, int] = {}
        self._indexes: dict[tuple[float, ...], tuple[lexical.LexicalIndex, dict[str, int]]] = {}
        # A second connection, read-only, on the same file: the bench never writes through it.
        self.conn = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True)
        self.n_docs = self.conn.execute(
            f"SELECT count(*) FROM {self.idx} WHERE repository = ?", (repository,)
        ).fetchone()[0]

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

    def match(self, text: str, v: Variant) -> list[str]:
        counts: dict[str, int] = {}
        skipped: set[str] = set()
        tokens = _TOKEN.findall(text.lower())
        long = len(tokens) > LONG_QUERY_WORDS
        stop = retrieval.STOPWORDS if v.stop == "always" or (v.stop == "long" and long) else frozenset()
        for w in tokens:
            if w in counts:
                if not v.qtf_cap or counts[w] < v.qtf_cap:
                    counts[w] += 1  # query term frequency, as retrieval.query_terms
                continue
            if w in stop or w in skipped or len(w) < v.min_len:
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
        return [w for w in words for _ in range(counts[w])]

    def lexical(self, words: list[str], weights: tuple[float, ...], depth: int) -> list[tuple[int, float]]:
        index, vocab = self.index(weights)
        analyzer = lexical.analyzer()
        terms = [vocab[t] for w in words for t in analyzer.terms(w) if t in vocab]
        # the store's cut: from LEXICAL_SELECT_MIN_DOCS documents on, terms in most of them are skipped
        return index.search(terms, None, depth, sqlite_index.LEXICAL_SELECT_MIN_DOCS)

    def session_links(self, seeds: Sequence[int], *_: object) -> list[tuple[int, int, float]]:
        out: list[tuple[int, int, float]] = []
        for seed in seeds:
            others = [r for r in self.sessions[self.session_of[seed]] if r != seed]
            out += [(seed, r, 0.25) for r in others[: graph.NEIGHBOURS_PER_SEED]]
        return out

    def neighbours(self, rowids: Sequence[int]) -> dict[int, list[int]]:
        """The rows just before and after each of ``rowids`` (by rowid) in the same session, as
        a store finds them from the thoughts' session ids."""
        out: dict[int, list[int]] = {}
        for r in rowids:
            s = self.session_of.get(r)
            near = [n for n in (r - 1, r + 1) if s is not None and self.session_of.get(n) == s]
            if near:
                out[r] = near
        return out

    def rank(self, text: str, qvec: np.ndarray, v: Variant) -> list[Any]:
        if v.window and (v.window_top != WINDOW_TOP or v.window_sides != (True, True)):
            lex = self.lexical(self.match(text, v), v.weights or self.shipped_weights, v.depth)
            vec = self.vector(qvec, [self.repository], v.depth)
            fused = window_fuse(lex, vec, self.neighbours, v.rrf_k, v.window_top, v.window_sides)
            if v.window_rows and self.window_lexical is not None:
                windows = self.window_lexical(self.match(text, v), [self.repository], v.depth)
                fused = fuse_pairs(fused, windows, v.rrf_k)
            return self.to_ranking(titles.fuse_titles(fused, self.titled(text, v), v.rrf_k, self.task_of))
        if v.extra and v.extra_beside_window:
            # the shipped fusion (lexical, vector and their search-time windows), then the extra
            # lists' reciprocal ranks added to it; no graph walk (no edges on these sets)
            lex = self.lexical(self.match(text, v), v.weights or self.shipped_weights, v.depth)
            vec = self.vector(qvec, [self.repository], v.depth)
            fused = window_fuse(lex, vec, self.neighbours, v.rrf_k)
            extra = [self.signals[name](text, qvec)[: v.depth] for name in v.extra]
            if v.window_rows and self.window_lexical is not None:
                windows = self.window_lexical(self.match(text, v), [self.repository], v.depth)
                fused = fuse_pairs(fused, windows, v.rrf_k)
            return self.to_ranking(add_lists(fused, extra, v.rrf_k))
        if v.extra:
            # lexical, vector and the extra lists, RRF-fused with equal weights; no graph walk
            # (none of the sets with extra signals has edges: checked by the main run)
            lists = [
                self.lexical(self.match(text, v), v.weights or self.shipped_weights, v.depth),
                self.vector(qvec, [self.repository], v.depth),
                *(self.signals[name](text, qvec)[: v.depth] for name in v.extra),
                self.titled(text, v),
            ]
            return self.to_ranking(fuse_lists(lists, v.rrf_k))
        ranked, _ = pipeline.candidates(
            text,
            [self.repository],
            lambda _: qvec,
            lambda words, _, depth: self.lexical(words, v.weights or self.shipped_weights, depth),
            self.vector,
            self.session_links if v.session_graph else self.edges,
            params=v.params(),
            terms=lambda t: self.match(t, v),
            neighbours=self.neighbours if v.window and self.session_of else None,
            title_lexical=self.title_lexical if v.titles else None,
            task_of=self.task_of,
            window_lexical=self.window_lexical if v.window_rows else None,
        )
        return self.to_ranking(ranked)

    def titled(self, text: str, v: Variant) -> pipeline.Hits:
        """The store's title hits for the query's first line, as search takes them (none for
        thoughts, or when the variant turns the signal off)."""
        if self.title_lexical is None or not v.titles:
            return []
        return self.title_lexical(titles.title_terms(text), [self.repository], v.depth)


def cosine_signal(rowids: Sequence[int], vectors: np.ndarray) -> Callable[[np.ndarray, int], pipeline.Hits]:
    """Brute-force cosine over extra per-row vectors (unit length): (query vector, depth) -> hits."""

    def top(qvec: np.ndarray, depth: int) -> pipeline.Hits:
        sims = vectors @ qvec
        best = np.argsort(-sims, kind="stable")[:depth]
        return [(int(rowids[i]), float(sims[i])) for i in best]

    return top


def text_signal(
    rowids: Sequence[int], texts: Sequence[str], repository: str
) -> Callable[[list[str], int], pipeline.Hits]:
    """BM25 (the store's own scoring code) over extra per-row texts: (query words, depth) -> hits."""
    vocab: dict[str, int] = {}
    index = lexical.LexicalIndex()
    index.add(
        [lexical.document_row(r, repository, [t], (1.0,), vocab) for r, t in zip(rowids, texts, strict=True)]
    )
    analyzer = lexical.analyzer()

    def top(words: list[str], depth: int) -> pipeline.Hits:
        terms = [vocab[t] for w in words for t in analyzer.terms(w) if t in vocab]
        return index.search(terms, None, depth, sqlite_index.LEXICAL_SELECT_MIN_DOCS)

    return top


def fuse_lists(lists: Sequence[pipeline.Hits], k: float) -> list[retrieval.Scored]:
    """Reciprocal-rank fusion of any number of ranked lists (the first two fill the lexical and
    vector parts of each :class:`retrieval.Scored`)."""
    by_row: dict[int, retrieval.Scored] = {}
    for i, items in enumerate(lists):
        for rank, (rowid, score) in enumerate(items, start=1):
            s = by_row.setdefault(rowid, retrieval.Scored(rowid))
            if i == 0:
                s.lexical, s.lexical_rank = score, rank
            elif i == 1:
                s.vector, s.vector_rank = score, rank
            s.fused += 1.0 / (k + rank)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


def add_lists(
    ranked: Sequence[retrieval.Scored], lists: Sequence[pipeline.Hits], k: float
) -> list[retrieval.Scored]:
    """``ranked`` with the reciprocal ranks of further ``lists`` added to its fused scores."""
    by_row = {s.rowid: s for s in ranked}
    for items in lists:
        for rank, (rowid, _) in enumerate(items, start=1):
            s = by_row.setdefault(rowid, retrieval.Scored(rowid))
            s.fused += 1.0 / (k + rank)
    return sorted(by_row.values(), key=lambda s: (-s.fused, s.rowid))


def mechanism_grid(extra: Sequence[tuple[str, tuple[str, ...]]] = ()) -> list[Variant]:
    """Issue 16's mechanisms, the same rows on every benchmark (``extra``: the benchmark's own
    additional signals, named rows). Each row changes one thing from the shipped pipeline."""
    grid = [
        Variant(f"shipped (first {MAXT} terms, k={retrieval.RRF_K}, depth {DEPTH}, session windows)"),
        Variant("qtf capped at 2 (~k1+1)", qtf_cap=2),
        Variant("qtf capped at 1", qtf_cap=1),
        Variant(f"stopwords kept in short queries (<= {LONG_QUERY_WORDS} words)", stop="long"),
        Variant("stopwords never dropped", stop="never"),
        Variant("qtf cap 2 + stopwords kept in short queries", qtf_cap=2, stop="long"),
        Variant("fusion: agreement-weighted RRF", fusion="agree"),
        Variant("fusion: min-max scores, alpha 0.5", fusion="minmax", alpha=0.5),
        Variant("rrf k=60 (the usual constant)", rrf_k=60),
        Variant("no session windows (shipped before issue 16)", window=False, window_rows=False),
        Variant("no causal window rows (shipped before them)", window_rows=False),
        Variant("no title-to-title signal (shipped before it)", titles=False),
        Variant("windows: all 200 candidates widened", window_top=200),
        Variant("windows: lexical side only", window_sides=(True, False)),
        Variant("windows: vector side only", window_sides=(False, True)),
    ]
    grid += [Variant(name, extra=signals) for name, signals in extra]
    return grid


def faq_variant_grid() -> list[Variant]:
    return mechanism_grid()


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
        Variant("graph over session tags, walk without stay", session_graph=True, stay=False),
        Variant("graph over session tags, restart 0.85", session_graph=True, restart=0.85),
        Variant("graph over session tags, restart 0.95", session_graph=True, restart=0.95),
        Variant(
            "graph over session tags, restart 0.95 + rrf k=10", session_graph=True, restart=0.95, rrf_k=10
        ),
    ]
    return grid
