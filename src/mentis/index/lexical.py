"""BM25 over an in-process inverted index (the lexical half of DESIGN §5).

Text is split like SQLite's ``unicode61`` tokenizer (runs of letters and digits, lower-cased,
Latin diacritics removed) and stemmed with the original Porter algorithm (PyStemmer's
``porter``, the stemmer FTS5's ``porter`` tokenizer implements). A document is a weighted bag of
stems: ``tf`` is summed over its fields with per-field weights, its length is the unweighted token
count. Scoring is Okapi BM25 with FTS5's constants and IDF floor, so ranks match what
``bm25(fts, weights…)`` gives for the same query terms:

    score(D) = Σ_t idf(t) · tf(t, D) · (k1 + 1) / (tf(t, D) + k1 · (1 − b + b · |D| / avgdl))
    idf(t)   = max(log((N − df + 0.5) / (df + 0.5)), 1e-6)

Why not FTS5's ``bm25()``: it evaluates the rank for every matching row in C, one row at a time.
A problem description names common words, so at 100k attempts the median query matched 77% of
the rows and ranking took ~60 ms. Here each query term is one vectorised pass over its posting
list (two numpy arrays), ~10x less at that size; and when a query's lists are long, only the
postings that can still change its top ``limit`` are scored (MaxScore over tf tiers,
:mod:`lexical_topk`), with the same scores and order as scoring them all.

The store persists each document's stems as a row of ``(term id, weighted tf)`` pairs (a
derived table, rebuilt from the ledger like every other) and this index loads them in bulk,
then picks up new rows incrementally.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from mentis.index import lexical_topk
from mentis.index.lexical_segments import Parts, Segment, concat
from mentis.index.lexical_topk import K1, B
from mentis.index.vectors import RepositoryCodes

IDF_FLOOR = 1e-6
SEGMENT_DOCS = 16_384
"""Documents per frozen segment. Sorting a segment's postings by term is the cost of a bulk load
(~3M postings at ~90 distinct stems a document); a query gathers each term's postings from every
segment, so fewer, larger segments cost it fewer steps. A segment's build holds ~30 bytes of
temporaries per posting, so the size also sets a bulk load's peak memory: at 1M attempts 32,768
put the peak ~100 MB higher than 16,384 for ~1.3 ms less CPU per search (p50,
``bench/lexical_prune.py``), and serve's peak is what the 1.5 GB target is about."""
TAIL_MAX = 1_024
"""Batches smaller than this go to the open tail; the tail is frozen once it holds this many."""

POSTING = np.dtype([("t", "<u4"), ("w", "<f4")])
"""One persisted ``(term id, weighted tf)`` pair."""

_WORD = re.compile(r"[^\W_]+")
_STEM_CACHE_MAX = 500_000
_STEM_MIN, _STEM_MAX = 3, 64


class Analyzer:
    """Tokenise and stem text; stems are cached per process (the vocabulary repeats)."""

    def __init__(self) -> None:
        import Stemmer  # type: ignore[import-not-found, unused-ignore]

        self._stem = Stemmer.Stemmer("porter").stemWords
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()

    def words(self, text: str) -> list[str]:
        text = text.lower()
        if not text.isascii():
            text = _strip_diacritics(text)
        return _WORD.findall(text)

    def stems(self, words: Sequence[str]) -> list[str]:
        cache = self._cache
        missing = [w for w in dict.fromkeys(words) if w not in cache]
        if missing:
            # FTS5's porter tokenizer leaves tokens under 3 or over 64 bytes as they are
            long = [w for w in missing if _STEM_MIN <= len(w.encode()) <= _STEM_MAX]
            with self._lock:
                if len(cache) + len(missing) > _STEM_CACHE_MAX:
                    cache.clear()
                cache.update(zip(missing, missing, strict=True))
                cache.update(zip(long, self._stem(long), strict=True))
        return [cache.get(w) or self.stems([w])[0] for w in words]

    def terms(self, text: str) -> list[str]:
        return self.stems(self.words(text))

    def document(self, fields: Sequence[str], weights: Sequence[float]) -> tuple[dict[str, float], int]:
        """Weighted term frequencies of a document's fields and its length in tokens."""
        tf: dict[str, float] = {}
        length = 0
        for text, weight in zip(fields, weights, strict=True):
            if not text:
                continue
            terms = self.terms(text)
            length += len(terms)
            for term in terms:
                tf[term] = tf.get(term, 0.0) + weight
        return tf, length


def _strip_diacritics(text: str) -> str:
    """Drop the combining marks of Latin letters (``remove_diacritics 2``); other scripts keep
    theirs, and nothing is compatibility-folded (FTS5 keeps ``ﬁ`` and full-width letters)."""
    out: list[str] = []
    latin = False
    for ch in unicodedata.normalize("NFD", text):
        if unicodedata.combining(ch):
            if latin:
                continue
        else:
            latin = ch < "\u0250" or "\u1e00" <= ch <= "\u1eff"
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


_analyzer: Analyzer | None = None
_analyzer_lock = threading.Lock()


def analyzer() -> Analyzer:
    """The process-wide analyzer."""
    global _analyzer
    if _analyzer is None:
        with _analyzer_lock:
            if _analyzer is None:
                _analyzer = Analyzer()
    return _analyzer


@dataclass(frozen=True, slots=True)
class DocRow:
    """A persisted document: rowid, repository, length in tokens and its packed postings."""

    rowid: int
    repository: str
    length: int
    terms: bytes


_Located = tuple[list[Parts], list[float], int, Parts]
"""Per tf tier the (segment, lo, hi) slices of a stem's postings and their largest tf; their
count; and per segment the slice of all its tiers."""


_Keep = Callable[..., np.ndarray]
"""``keep(docs, first=0)``: which of the documents ``first + docs`` a search may score."""


class LexicalIndex:
    """An inverted index over one kind of document (attempts or thoughts), BM25-ranked.

    Documents are numbered in rowid order (rowids only grow), so ties rank the older document
    first. Postings live in frozen segments of up to ``SEGMENT_DOCS`` documents, each sorted
    by term once, plus an open tail (a dict) that takes small batches — the documents written
    since the index was loaded — and is frozen when it fills. The owner loads rows with
    :meth:`add` and clears the index when documents were removed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.clear()

    def clear(self) -> None:
        self._rowids = np.zeros(0, dtype=np.int64)
        self._lengths = np.zeros(0, dtype=np.float64)
        self._codes = np.zeros(0, dtype=np.int32)
        self._dead = np.zeros(0, dtype=bool)
        self._dead_count = 0
        self._repos = RepositoryCodes()
        self._size = 0
        self._total_length = 0.0
        self._segments: list[Segment] = []
        self._frozen = 0  # documents [0, _frozen) are in segments, the rest in the tail
        self._tail: dict[int, tuple[list[int], list[float]]] = {}
        self._tail_rows: list[bytes] = []
        self.max_rowid = 0
        self._sorted = True  # document indexes follow rowids (always so when loaded from SQLite)
        self._min_length = 0.0  # no document is shorter (a bound, kept after removals)
        # per repository code: live documents and their total length (exact: lengths are integers)
        self._code_docs = np.zeros(0, dtype=np.int64)
        self._code_length = np.zeros(0, dtype=np.float64)
        self._scratch = lexical_topk.Scratch()

    def __len__(self) -> int:
        return self._size - self._dead_count

    def remove(self, rowids: Sequence[int]) -> None:
        """Drop documents in place (a forget): they stay in the posting lists but count in no
        statistic and are never returned. Unknown rowids are ignored."""
        if not rowids:
            return
        with self._lock:
            size = self._size
            wanted = np.unique(np.asarray(rowids, dtype=np.int64))
            if self._sorted:
                pos = np.searchsorted(self._rowids[:size], wanted)
                known = pos < size
                pos, wanted = pos[known], wanted[known]
                # each wanted rowid at its own position: an unknown rowid lands on the next
                # known one, which must not be counted twice
                pos = pos[self._rowids[pos] == wanted]
            else:
                pos = np.flatnonzero(np.isin(self._rowids[:size], wanted))
            pos = pos[~self._dead[pos]]
            if not len(pos):
                return
            self._dead[pos] = True
            self._dead_count += len(pos)
            self._total_length -= float(self._lengths[pos].sum())
            self._count_codes(pos, -1)

    def add(self, rows: Sequence[DocRow]) -> None:
        """Append documents, each batch in rowid order. A row below :attr:`max_rowid` (a writer
        that committed late, on PostgreSQL) is taken too: ties still rank by rowid."""
        self.add_columns(
            [r.rowid for r in rows],
            [r.repository for r in rows],
            [r.length for r in rows],
            [r.terms for r in rows],
        )

    def add_columns(
        self,
        rowids: Sequence[int],
        repositories: Sequence[str],
        lengths: Sequence[int],
        blobs: Sequence[bytes],
    ) -> None:
        """:meth:`add` for rows given as columns (a bulk load skips building ``DocRow`` objects)."""
        if not rowids:
            return
        blobs = list(blobs)
        with self._lock:
            start = self._size
            end = start + len(rowids)
            self._grow(end)
            self._rowids[start:end] = rowids
            self._lengths[start:end] = lengths
            self._codes[start:end] = [self._repos.code(r) for r in repositories]
            self._size = end
            self._total_length += float(sum(lengths))
            shortest = float(min(lengths))
            self._min_length = shortest if start == 0 else min(self._min_length, shortest)
            self._count_codes(np.arange(start, end), 1)
            if start and int(self._rowids[start]) <= self.max_rowid:
                self._sorted = False
            self.max_rowid = max(self.max_rowid, int(self._rowids[end - 1]))
            if len(blobs) >= TAIL_MAX:
                # the tail's documents come right before these: freeze them all in order
                tail, self._tail_rows, self._tail = self._tail_rows, [], {}
                self._freeze(self._frozen, tail + blobs)
                return
            for i, blob in enumerate(blobs):
                p = np.frombuffer(blob, dtype=POSTING)
                doc = start + i
                for t, w in zip(p["t"].tolist(), p["w"].tolist(), strict=True):
                    entry = self._tail.get(t)
                    if entry is None:
                        entry = self._tail[t] = ([], [])
                    entry[0].append(doc)
                    entry[1].append(w)
            self._tail_rows.extend(blobs)
            if len(self._tail_rows) >= TAIL_MAX:
                rows_, self._tail_rows, self._tail = self._tail_rows, [], {}
                self._freeze(self._frozen, rows_)

    def _freeze(self, first: int, blobs: list[bytes]) -> None:
        """Turn the documents ``first, first + 1, …`` (their packed postings) into segments."""
        for lo in range(0, len(blobs), SEGMENT_DOCS):
            chunk = blobs[lo : lo + SEGMENT_DOCS]
            counts = np.fromiter((len(b) for b in chunk), dtype=np.int64, count=len(chunk))
            counts //= POSTING.itemsize
            postings = np.frombuffer(b"".join(chunk), dtype=POSTING)
            self._segments.append(Segment(first + lo, counts, postings))
        self._frozen = first + len(blobs)

    def _count_codes(self, pos: np.ndarray, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) documents ``pos`` in the per-repository counts."""
        codes = self._codes[pos]
        width = max(len(self._repos), len(self._code_docs))
        if width > len(self._code_docs):
            self._code_docs = np.concatenate(
                [self._code_docs, np.zeros(width - len(self._code_docs), np.int64)]
            )
            self._code_length = np.concatenate(
                [self._code_length, np.zeros(width - len(self._code_length), np.float64)]
            )
        self._code_docs += sign * np.bincount(codes, minlength=width)
        self._code_length += sign * np.bincount(codes, weights=self._lengths[pos], minlength=width)

    def _grow(self, need: int) -> None:
        if need <= len(self._rowids):
            return
        cap = max(need, 2 * len(self._rowids), 1024)
        self._rowids = _grown(self._rowids, self._size, cap)
        self._lengths = _grown(self._lengths, self._size, cap)
        self._codes = _grown(self._codes, self._size, cap)
        self._dead = _grown(self._dead, self._size, cap)

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """Document indexes and weighted tfs of ``term`` across segments and the tail."""
        docs: list[np.ndarray] = []
        weights: list[np.ndarray] = []
        for seg in self._segments:
            lo, hi = seg.find(term)
            if hi > lo:
                docs.append(seg.docs_of(lo, hi))
                weights.append(seg.weights[lo:hi])
        tail = self._tail.get(term)
        if tail is not None:
            docs.append(np.asarray(tail[0], dtype=np.int32))
            weights.append(np.asarray(tail[1], dtype=np.float32))
        if not docs:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
        if len(docs) == 1:
            return docs[0], weights[0]
        return np.concatenate(docs), np.concatenate(weights)

    def _rows(self, ids: set[int]) -> dict[int, list[tuple[Segment, int]]]:
        """For each term id, the segments holding it and its row there (one search per segment)."""
        wanted = np.fromiter(ids, dtype=np.int64, count=len(ids))
        out: dict[int, list[tuple[Segment, int]]] = {t: [] for t in ids}
        for seg in self._segments:
            if not len(seg.terms):
                continue
            at = np.searchsorted(seg.terms, wanted)
            np.minimum(at, len(seg.terms) - 1, out=at)
            hit = seg.terms[at] == wanted
            for term, row in zip(wanted[hit].tolist(), at[hit].tolist(), strict=True):
                out[term].append((seg, row))
        return out

    def _pieces(self, ids: tuple[int, ...], rows: dict[int, list[tuple[Segment, int]]]) -> _Located:
        """Where the postings of the stem numbered ``ids`` are, per tf tier: segment slices, the
        largest tf of the tier and how many postings there are in all (the tail is read apart)."""
        tiers = len(lexical_topk.TIERS) + 1
        parts: list[Parts] = [[] for _ in range(tiers)]
        whole: Parts = []
        tops = [0.0] * tiers
        count = 0
        for term in ids:
            for seg, i in rows[term]:
                cut = seg.cuts[i].tolist()
                top = seg.tier_max[i].tolist()
                count += cut[-1] - cut[0]
                whole.append((seg, cut[0], cut[-1]))
                for k in range(tiers):
                    if cut[k + 1] > cut[k]:
                        parts[k].append((seg, cut[k], cut[k + 1]))
                        tops[k] = max(tops[k], top[k])
            tail = self._tail.get(term)
            if tail is not None:
                count += len(tail[0])
        return parts, tops, count, whole

    def _gather(self, ids: tuple[int, ...], located: _Located, whole: bool) -> list[lexical_topk.Piece]:
        """The postings of the stem numbered ``ids`` (``located`` by :meth:`_pieces`), one piece
        per tf tier, documents ascending; or with ``whole`` one piece, in no order."""
        parts, tops, _, all_tiers = located
        if whole:
            tail = [self._tail[t] for t in ids if t in self._tail]
            docs, tf = concat(all_tiers, [d for d, _ in tail], [w for _, w in tail])
            top = max([*tops, *(max(w) for _, w in tail)])
            return [lexical_topk.Piece(docs, tf, top)]
        tiers = len(lexical_topk.TIERS) + 1
        tail_docs = np.zeros(0, dtype=np.int32)
        tail_tf = np.zeros(0, dtype=np.float32)
        tail_tier = np.zeros(0, dtype=np.intp)
        found = [self._tail[t] for t in ids if t in self._tail]
        if found:
            tail_docs = np.concatenate([np.asarray(d, dtype=np.int32) for d, _ in found])
            tail_tf = np.concatenate([np.asarray(w, dtype=np.float32) for _, w in found])
            tail_tier = np.searchsorted(np.asarray(lexical_topk.TIERS, dtype=np.float32), tail_tf)
        out: list[lexical_topk.Piece] = []
        for k in range(tiers):
            in_tail = tail_tier == k
            extra = int(np.count_nonzero(in_tail))
            count = sum(hi - lo for _, lo, hi in parts[k]) + extra
            if count == 0:
                continue
            here = parts[k]
            docs = np.empty(count, dtype=np.int32)
            at = count - extra
            if here:
                docs[:at] = np.concatenate([seg.docs[lo:hi] for seg, lo, hi in here])
                docs[:at] += np.repeat(
                    np.array([seg.first for seg, _, _ in here], dtype=np.int32),
                    [hi - lo for _, lo, hi in here],
                )
            weights = [seg.weights[lo:hi] for seg, lo, hi in here]
            top = tops[k]
            if extra:
                docs[at:] = tail_docs[in_tail]
                weights.append(tail_tf[in_tail])
                top = max(top, float(tail_tf[in_tail].max()))
            tf = weights[0] if len(weights) == 1 else np.concatenate(weights)
            if len(ids) > 1:  # one stem under several ids (PostgreSQL): one document holds one
                order = np.argsort(docs, kind="stable")
                docs, tf = docs[order], tf[order]
            out.append(lexical_topk.Piece(docs, tf, top))
        return out

    def search(
        self,
        terms: Iterable[int | tuple[int, ...]],
        repositories: Sequence[str] | None,
        limit: int,
        select_min_docs: int | None = None,
    ) -> list[tuple[int, float]]:
        """The ``limit`` best (rowid, BM25) for the query ``terms`` among the documents of
        ``repositories`` (None: all), best first, equal scores in rowid order. A term given k
        times counts k times (FTS5 sums a repeated phrase the same way). A term may be a tuple of
        ids that are one stem (PostgreSQL numbers stems per repository): their postings are
        scored as one list.

        The statistics (document count, document frequencies, average length) are those of the
        documents searched, so a score depends only on what its caller may read: documents in
        other repositories change no score and take no rank. From ``select_min_docs`` documents
        searched on, a term found in more than half of them is skipped (its weight is near zero,
        its posting list most of the index).

        Scores are those of scoring every posting of every term (term by term, in query order),
        but only the postings that can still change the top ``limit`` are read
        (:mod:`lexical_topk`), and nothing the size of the index is allocated per query.
        """
        with self._lock:
            if self._size == 0 or limit <= 0:
                return []
            table = self._scope(repositories)
            if table is None:
                n, total = self._size - self._dead_count, self._total_length
            else:
                n = int(self._code_docs[table].sum())
                total = float(self._code_length[table].sum())
            if n == 0:
                return []
            avgdl = total / n if total else 1.0
            max_df = n // 2 if select_min_docs is not None and n >= select_min_docs else None
            picked: list[lexical_topk.Term] = []
            keep_of = self._keep(table)
            counted = Counter(terms)
            rows = self._rows({i for ids, _ in _ids(counted) for i in ids})
            found = [(ids, qtf, self._pieces(ids, rows)) for ids, qtf in _ids(counted)]
            # few postings to score: scoring each is cheaper than pruning (pieces need no order)
            sizes = [located[2] for _, _, located in found]
            whole = sum(c for c in sizes if max_df is None or c <= max_df) <= lexical_topk.DENSE_MAX
            for ids, qtf, located in found:
                if (
                    max_df is not None
                    and located[2] > max_df
                    and (keep_of is None or self._count(located, keep_of) > max_df)
                ):
                    continue
                pieces = self._gather(ids, located, whole)
                if keep_of is not None:
                    pieces = [p for p in (p.where(keep_of(p.docs)) for p in pieces) if len(p.docs)]
                df = sum(len(p.docs) for p in pieces)
                if df == 0 or (max_df is not None and df > max_df):
                    continue
                idf = max(math.log((n - df + 0.5) / (df + 0.5)), IDF_FLOOR)
                picked.append(lexical_topk.Term(qtf * idf * (K1 + 1.0), pieces))
            self._scratch.ensure(self._size)
            lengths = self._lengths[: self._size]
            docs, scores = lexical_topk.top_k(
                picked, lengths, self._min_length, avgdl, limit, self._scratch, prune=not whole
            )
            # best first; equal scores in rowid order (document indexes follow rowids unless a
            # late row came in)
            order = docs if self._sorted else self._rowids[docs]
            best = np.lexsort((order, -scores))[:limit]
            return [(int(self._rowids[d]), float(x)) for d, x in zip(docs[best], scores[best], strict=True)]

    def _count(self, located: _Located, keep_of: _Keep) -> int:
        """How many of the postings ``located`` (tail aside) are of documents a search may score:
        a term skipped for being in over half of them is counted, never gathered."""
        count = 0
        for parts in located[0]:
            for seg, lo, hi in parts:
                count += int(np.count_nonzero(keep_of(seg.docs[lo:hi], seg.first)))
        return count

    def _keep(self, table: np.ndarray | None) -> _Keep | None:
        """Which documents a search may score (None: all of them): those of the repositories in
        ``table`` (a bool per repository code), alive."""
        if table is None and not self._dead_count:
            return None
        size = self._size
        if table is None:
            mask = ~self._dead[:size]
        else:
            mask = table[self._codes[:size]]  # one pass over the index, cheaper than two per posting
            if self._dead_count:
                mask &= ~self._dead[:size]
        return lambda docs, first=0: mask[first:][docs] if first else mask[docs]

    def _scope(self, repositories: Sequence[str] | None) -> np.ndarray | None:
        """Which repository codes a search covers, as a bool per code (None: every one)."""
        if repositories is None:
            return None
        if isinstance(repositories, str):  # a str is a Sequence[str] of its letters
            raise TypeError("repositories must be a list of names, not one string")
        wanted = {c for r in repositories if (c := self._repos.get(r)) is not None}
        if len(wanted) == len(self._repos):
            return None
        table = np.zeros(max(len(self._repos), len(self._code_docs), 1), dtype=bool)
        table[list(wanted)] = True
        return table


def _ids(counted: Counter[int | tuple[int, ...]]) -> list[tuple[tuple[int, ...], int]]:
    """Each distinct query term as its ids, and its count."""
    return [(t if isinstance(t, tuple) else (t,), n) for t, n in counted.items()]


def document_row(
    rowid: int, repository: str, fields: Sequence[str], weights: Sequence[float], vocab: dict[str, int]
) -> DocRow:
    """A document's row with term ids from an in-memory ``vocab`` (new stems are added to it):
    for indexes built outside a store (the evaluation lab, tests)."""
    tf, length = analyzer().document(fields, weights)
    for term in tf:
        vocab.setdefault(term, len(vocab) + 1)
    return DocRow(rowid, repository, length, pack(tf, vocab))


def pack(tf: dict[str, float], ids: dict[str, int]) -> bytes:
    """The persisted form of a document's weighted term frequencies."""
    out = np.empty(len(tf), dtype=POSTING)
    out["t"] = [ids[t] for t in tf]
    out["w"] = list(tf.values())
    return out.tobytes()


def _grown(array: np.ndarray, size: int, cap: int) -> np.ndarray:
    """``array``'s first ``size`` items in a new zeroed array of ``cap`` items of its dtype."""
    grown = np.zeros(cap, dtype=array.dtype)
    grown[:size] = array[:size]
    return grown


__all__ = ["K1", "POSTING", "Analyzer", "B", "DocRow", "LexicalIndex", "analyzer", "document_row", "pack"]
