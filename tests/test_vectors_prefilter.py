"""The sign-bit prefilter of a large int8 vector index (from ``PREFILTER_MIN_ROWS`` rows on): only
the rows nearest by Hamming distance go to the int8 scan, scoped searches still find the best rows
in scope, rows added and removed keep their bits, and the store's refresh and forget paths work on
top of it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mentis.api.attempts import ForgetInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.index import signbits, vectors
from mentis.index.vectors import VectorIndex
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite.store import SqliteStore
from tests.conformance.helpers import record, search

DIM = 64
REPOS = ["github.com/acme/a", "github.com/acme/b", "github.com/acme/small"]
NEVER = 1 << 62


def _clustered(n: int, seed: int, centres: int = 200) -> np.ndarray:
    """Unit vectors around ``centres`` random centres (near neighbours exist, as with real
    embeddings)."""
    rng = np.random.default_rng(1_000)  # the same centres for rows and queries
    middle = rng.standard_normal((centres, DIM)).astype(np.float32)
    rng = np.random.default_rng(seed)
    rows = middle[rng.integers(0, centres, n)] + 0.35 * rng.standard_normal((n, DIM)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


class Fixture:
    """An exact float32 index and an int8 one with the prefilter forced on, over the same rows,
    plus the float32 rows by rowid (what the store's exact re-score reads)."""

    def __init__(self, n: int, repos: list[str] | None = None) -> None:
        self.rows = _clustered(n, seed=0)
        self.rowids = [7 + 2 * i for i in range(n)]
        self.repos = repos or [REPOS[i % 2] for i in range(n)]
        self.exact = VectorIndex(DIM, quantize_min_rows=NEVER, prefilter_min_rows=NEVER)
        self.int8 = VectorIndex(DIM, quantize_min_rows=0, prefilter_min_rows=0)
        self.stored = dict(zip(self.rowids, self.rows, strict=True))
        self.add(self.rowids, self.repos, self.rows)

    def add(self, rowids: list[int], repos: list[str], rows: np.ndarray) -> None:
        for index in (self.exact, self.int8):
            index.add(rowids, repos, rows)
        self.stored.update(zip(rowids, rows, strict=True))

    def remove(self, rowids: list[int]) -> None:
        for index in (self.exact, self.int8):
            index.remove(rowids)
        for rowid in rowids:
            del self.stored[rowid]

    def rescore(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = np.array([i for i in ids.tolist() if i in self.stored], dtype=np.int64)
        return found, np.array([self.stored[int(i)] for i in found], dtype=np.float32).reshape(-1, DIM)

    def recall(self, queries: np.ndarray, scope: list[str] | None, limit: int = 10) -> float:
        hits = 0
        for q in queries:
            want = {r for r, _ in self.exact.search(q, scope, limit)}
            got = self.int8.search(q, scope, limit, self.rescore)
            assert all(r in self.stored for r, _ in got)
            hits += len(want & {r for r, _ in got})
        return hits / (limit * len(queries))


def test_the_prefiltered_search_keeps_recall_at_10_on_a_clustered_set() -> None:
    fx = Fixture(20_000)
    assert fx.recall(_clustered(100, seed=5), None) >= 0.95


def test_the_prefilter_keeps_the_rows_nearest_by_sign_bits_or_all_for_a_deep_limit() -> None:
    fx = Fixture(20_000)
    q = _clustered(1, seed=5)[0]
    bits = fx.int8._bits
    kept = signbits.nearest(bits, q, 20_000, None, 10)
    keep = signbits.keep_count(20_000, 10)
    assert keep == max(200, signbits.KEEP_PER_RESULT * 10)
    ham = signbits.distances(bits, q, 20_000)
    assert kept is not None and len(kept) == len(set(kept.tolist()))
    cut = ham[kept].max()
    assert len(kept) - (ham[kept] == cut).sum() < keep <= len(kept)  # ties at the cut all kept
    dropped = np.setdiff1d(np.arange(20_000), kept)
    assert cut < ham[dropped].min()  # the nearest by Hamming distance
    brute = (fx.int8._matrix[:20_000] > 0) != (q > 0)
    assert np.array_equal(ham, brute.sum(axis=1))
    assert signbits.nearest(bits, q, 20_000, None, -(-20_000 // signbits.KEEP_PER_RESULT)) is None


def test_a_scope_no_larger_than_the_kept_rows_is_scanned_whole_and_gives_the_exact_results() -> None:
    repos = [REPOS[2] if i % 97 == 0 else REPOS[i % 2] for i in range(20_000)]  # ~206 rows in scope
    fx = Fixture(20_000, repos)
    for q in _clustered(30, seed=6):
        want = fx.exact.search(q, [REPOS[2]], 10)
        got = fx.int8.search(q, [REPOS[2]], 10, fx.rescore)
        assert [r for r, _ in got] == [r for r, _ in want]
        assert {fx.repos[fx.rowids.index(r)] for r, _ in got} == {REPOS[2]}


def test_a_large_scope_keeps_only_rows_in_scope_and_its_best_ones() -> None:
    repos = [REPOS[1] if i % 10 == 0 else REPOS[0] for i in range(40_000)]  # 4,000 rows in scope
    fx = Fixture(40_000, repos)
    queries = _clustered(60, seed=7)
    assert fx.recall(queries, [REPOS[1]], limit=5) >= 0.95  # keeps 320 of the 4,000
    for q in queries[:10]:
        got = fx.int8.search(q, [REPOS[1]], 5, fx.rescore)
        assert {fx.repos[fx.rowids.index(r)] for r, _ in got} == {REPOS[1]}


def _bits_match_rows(index: VectorIndex) -> bool:
    n = len(index)
    return bool(np.array_equal(index._bits[:, :n], signbits.pack(index._matrix[:n])))


def test_rows_added_later_get_their_sign_bits_and_are_found() -> None:
    fx = Fixture(8_000)
    new = _clustered(2_000, seed=9)
    new_ids = [100_000 + i for i in range(2_000)]
    for lo in range(0, 2_000, 500):
        fx.add(new_ids[lo : lo + 500], [REPOS[0]] * 500, new[lo : lo + 500])
    assert _bits_match_rows(fx.int8)
    for rowid, row in zip(new_ids[::100], new[::100], strict=True):
        assert fx.int8.search(row, None, 1, fx.rescore)[0][0] == rowid
    assert fx.recall(_clustered(40, seed=8), None) >= 0.95


def test_removed_rows_leave_in_place_and_every_row_keeps_its_own_bits() -> None:
    fx = Fixture(6_000)
    q = fx.rows[123]
    assert fx.int8.search(q, None, 1, fx.rescore)[0][0] == fx.rowids[123]
    gone = fx.rowids[::3]
    fx.remove(gone)
    assert len(fx.int8) == 4_000 and _bits_match_rows(fx.int8)
    assert fx.int8.search(q, None, 10, fx.rescore)[0][0] != fx.rowids[123]
    assert not {r for r, _ in fx.int8.search(q, None, 5, fx.rescore)} & set(gone)
    assert fx.recall(_clustered(40, seed=10), None, limit=5) >= 0.95


def test_an_index_crossing_the_int8_threshold_packs_the_bits_of_the_rows_it_holds() -> None:
    index = VectorIndex(DIM, quantize_min_rows=1_000, prefilter_min_rows=1_000)
    rows = _clustered(1_500, seed=13)
    index.add(list(range(1, 901)), [REPOS[0]] * 900, rows[:900])
    assert not index.quantized and index._bits.shape[1] == 0
    index.add(list(range(901, 1_501)), [REPOS[0]] * 600, rows[900:])
    assert index.quantized and _bits_match_rows(index)


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store index opened from here on is int8 with the prefilter from 8 rows on, keeping
    half the rows whatever the limit (so these small stores do go through it)."""
    monkeypatch.setattr(vectors, "QUANTIZE_MIN_ROWS", 8)
    monkeypatch.setattr(vectors, "PREFILTER_MIN_ROWS", 8)
    monkeypatch.setattr(signbits, "KEEP_SHARE", 0.5)
    monkeypatch.setattr(signbits, "KEEP_PER_RESULT", 0)


def test_a_store_with_the_prefilter_searches_like_one_without(tmp_path: Path, caller: Caller) -> None:
    settings = Settings(home=tmp_path, db_path=tmp_path / "mentis.db", embedder="hash")
    memory = Memory.open(settings, HashEmbedder())
    for i in range(60):
        record(memory, caller, repository=REPOS[i % 2], task_id=f"T-{i}", action=f"tuned cache shard {i}")
    queries = ["tuned cache shard 7", "checkout payment queue", "shard 33 timeout"]
    want = [search(memory, caller, q) for q in queries]
    want_scoped = search(memory, caller, "shard 12", repository=REPOS[0])
    memory.close()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vectors, "QUANTIZE_MIN_ROWS", 8)
        patch.setattr(vectors, "PREFILTER_MIN_ROWS", 8)
        memory = Memory.open(settings, HashEmbedder())
        try:
            memory.store.warm()
            assert memory.store._indexes.vectors["vectors"].quantized  # type: ignore[attr-defined]
            assert [search(memory, caller, q) for q in queries] == want
            assert search(memory, caller, "shard 12", repository=REPOS[0]) == want_scoped
        finally:
            memory.close()


@pytest.mark.usefixtures("forced")
def test_another_process_writes_and_forgets_reach_the_prefiltered_index_in_place(
    tmp_path: Path, caller: Caller
) -> None:
    path = tmp_path / "mentis.db"
    settings = Settings(home=tmp_path, db_path=path, embedder="hash")
    memory = Memory.open(settings, HashEmbedder())
    try:
        ids = [
            record(
                memory, caller, repository=REPOS[i % 2], task_id=f"T-{i}", action=f"rotated key ring {i}"
            ).attempt_id
            for i in range(40)
        ]
        reader = SqliteStore(path, memory.embedder.dim)  # another process's view
        try:
            reader.warm()
            index = reader._indexes.vectors["vectors"]
            assert index.quantized
            reloads = reader.reloads
            new = record(
                memory, caller, repository=REPOS[0], task_id="T-new", action="unique zeppelin flange"
            )
            vec = memory.embedder.embed(["unique zeppelin flange"])[0]
            top = reader.vector(vec, None, 1)
            assert reader.attempt_keys([top[0][0]])[top[0][0]][2] == new.attempt_id
            for gone in ids[::4]:
                memory.forget_attempt(
                    caller, parse(ForgetInput, {"repository": REPOS[0], "attempt_id": gone})
                )
            after = reader.vector(vec, None, 100)
            assert reader.reloads == reloads  # in place: no reload
            live = reader.attempt_keys([r for r, _ in after])
            assert after and set(live) == {r for r, _ in after}, "a forgotten row was returned"
            assert not {a for _, _, a in live.values()} & set(ids[::4])
            fresh = SqliteStore(path, memory.embedder.dim)
            try:
                # both approximate (trained on different rows); the best row and its exact score agree
                assert after[0] == fresh.vector(vec, None, 1)[0]
            finally:
                fresh.close()
        finally:
            reader.close()
    finally:
        memory.close()


def test_the_byte_table_popcount_counts_like_numpys_kernel() -> None:
    words = np.random.default_rng(14).integers(
        0, np.iinfo(np.uint64).max, 5_000, dtype=np.uint64, endpoint=True
    )
    by_table = signbits._BYTE_BITS[words.view(np.uint8)].reshape(-1, 8).sum(axis=1)
    assert np.array_equal(by_table, [bin(int(w)).count("1") for w in words])
    assert np.array_equal(signbits._popcount(words), by_table)
