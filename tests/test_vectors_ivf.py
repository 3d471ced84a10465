"""The inverted file of a large int8 vector index (from ``IVF_MIN_ROWS`` rows on): candidates from
the nearest lists only, scoped searches that still find the best rows in scope, rows added and
removed in place, and the store's refresh and forget paths on top of it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mentis.config import Settings
from mentis.embed import HashEmbedder
from mentis.memory import Caller, Memory
from mentis.model import ForgetInput, parse
from mentis.retrieval import ivf, vectors
from mentis.retrieval.vectors import VectorIndex
from mentis.store.sqlite import SqliteStore
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
    """An exact float32 index and an int8 one with the inverted file forced on, over the same rows,
    plus the float32 rows by rowid (what the store's exact re-score reads)."""

    def __init__(self, n: int, repos: list[str] | None = None) -> None:
        self.rows = _clustered(n, seed=0)
        self.rowids = [7 + 2 * i for i in range(n)]
        self.repos = repos or [REPOS[i % 2] for i in range(n)]
        self.exact = VectorIndex(DIM, quantize_min_rows=NEVER, ivf_min_rows=NEVER)
        self.ivf = VectorIndex(DIM, quantize_min_rows=0, ivf_min_rows=0)
        self.stored = dict(zip(self.rowids, self.rows, strict=True))
        self.add(self.rowids, self.repos, self.rows)

    def add(self, rowids: list[int], repos: list[str], rows: np.ndarray) -> None:
        for index in (self.exact, self.ivf):
            index.add(rowids, repos, rows)
        self.stored.update(zip(rowids, rows, strict=True))

    def remove(self, rowids: list[int]) -> None:
        for index in (self.exact, self.ivf):
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
            got = self.ivf.search(q, scope, limit, self.rescore)
            assert all(r in self.stored for r, _ in got)
            hits += len(want & {r for r, _ in got})
        return hits / (limit * len(queries))


def test_the_inverted_file_candidates_keep_recall_at_10_on_a_clustered_set() -> None:
    fx = Fixture(20_000)
    assert fx.recall(_clustered(100, seed=5), None) >= 0.95
    table = fx.ivf._ivf
    assert table is not None and table.lists == ivf.list_count(20_000)


def test_a_search_scans_the_nearest_lists_up_to_its_share_of_the_rows_or_all_for_a_deep_limit() -> None:
    fx = Fixture(20_000)
    q = _clustered(1, seed=5)[0]
    fx.ivf.prepare()
    table = fx.ivf._ivf
    assert table is not None
    lists, sizes = fx.ivf._lists[:20_000], fx.ivf._list_sizes
    scanned = table.candidates(q, lists, sizes, None, 10)
    budget = table.budget(20_000, 10)
    assert budget == 20_000 * ivf.PROBE_SHARE
    assert scanned is not None and budget <= len(scanned) < budget + sizes.max()
    nearest = np.argsort(-(table.centroids @ q), kind="stable")
    probed = set(np.unique(lists[scanned]).tolist())
    assert probed == set(nearest[: len(probed)].tolist())  # whole lists, nearest first
    assert table.candidates(q, lists, sizes, None, -(-20_000 // ivf.MIN_SCAN_PER_RESULT)) is None


def test_a_scope_smaller_than_a_probe_is_scanned_whole_and_gives_the_exact_results() -> None:
    repos = [REPOS[2] if i % 97 == 0 else REPOS[i % 2] for i in range(20_000)]  # ~206 rows in scope
    fx = Fixture(20_000, repos)
    for q in _clustered(30, seed=6):
        want = fx.exact.search(q, [REPOS[2]], 10)
        got = fx.ivf.search(q, [REPOS[2]], 10, fx.rescore)
        assert [r for r, _ in got] == [r for r, _ in want]
        assert {fx.repos[fx.rowids.index(r)] for r, _ in got} == {REPOS[2]}


def test_a_large_scope_probes_further_and_only_returns_rows_in_scope() -> None:
    repos = [REPOS[1] if i % 10 == 0 else REPOS[0] for i in range(20_000)]  # 2,000 rows in scope
    fx = Fixture(20_000, repos)
    queries = _clustered(60, seed=7)
    assert fx.recall(queries, [REPOS[1]]) >= 0.95
    for q in queries[:10]:
        got = fx.ivf.search(q, [REPOS[1]], 10, fx.rescore)
        assert {fx.repos[fx.rowids.index(r)] for r, _ in got} == {REPOS[1]}


def test_rows_added_after_training_are_found_in_their_nearest_list() -> None:
    fx = Fixture(8_000)
    queries = _clustered(40, seed=8)
    fx.ivf.search(queries[0], None, 10, fx.rescore)  # trains on the first 8,000 rows
    trained = fx.ivf._ivf
    new = _clustered(2_000, seed=9)
    new_ids = [100_000 + i for i in range(2_000)]
    for lo in range(0, 2_000, 500):
        fx.add(new_ids[lo : lo + 500], [REPOS[0]] * 500, new[lo : lo + 500])
    assert fx.ivf._ivf is trained  # not retrained: grown less than RETRAIN_GROWTH times
    n = len(fx.ivf)
    assert np.array_equal(fx.ivf._list_sizes, np.bincount(fx.ivf._lists[:n], minlength=trained.lists))
    for rowid, row in zip(new_ids[::100], new[::100], strict=True):
        assert fx.ivf.search(row, None, 1, fx.rescore)[0][0] == rowid
    assert fx.recall(queries, None) >= 0.95


def test_removed_rows_leave_in_place_and_every_row_keeps_its_list() -> None:
    fx = Fixture(6_000)
    q = fx.rows[123]
    assert fx.ivf.search(q, None, 1, fx.rescore)[0][0] == fx.rowids[123]
    table = fx.ivf._ivf
    assert table is not None
    gone = fx.rowids[::3]
    fx.remove(gone)
    assert fx.ivf._ivf is table and len(fx.ivf) == 4_000
    n = len(fx.ivf)
    assert np.array_equal(fx.ivf._lists[:n], table.assign_int8(fx.ivf._matrix[:n]))
    assert np.array_equal(fx.ivf._list_sizes, np.bincount(fx.ivf._lists[:n], minlength=table.lists))
    assert fx.ivf.search(q, None, 10, fx.rescore)[0][0] != fx.rowids[123]
    assert not {r for r, _ in fx.ivf.search(q, None, 200, fx.rescore)} & set(gone)
    assert fx.recall(_clustered(40, seed=10), None) >= 0.95


def test_the_lists_are_retrained_once_the_index_outgrows_them() -> None:
    fx = Fixture(1_000)
    fx.ivf.prepare()
    first = fx.ivf._ivf
    assert first is not None and first.trained_rows == 1_000
    more = _clustered(3_000, seed=11)
    fx.add([50_000 + i for i in range(3_000)], [REPOS[0]] * 3_000, more)
    fx.ivf.prepare()
    second = fx.ivf._ivf
    assert second is not first and second is not None
    assert second.trained_rows == 4_000 and second.lists == ivf.list_count(4_000) > first.lists
    assert fx.recall(_clustered(40, seed=12), None) >= 0.95


def test_an_index_below_the_threshold_has_no_inverted_file() -> None:
    index = VectorIndex(DIM, quantize_min_rows=0, ivf_min_rows=500)
    index.add(list(range(1, 400)), [REPOS[0]] * 399, _clustered(399, seed=13))
    index.prepare()
    assert index.quantized and index._ivf is None


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store index opened from here on is int8 with an inverted file from 8 rows on."""
    monkeypatch.setattr(vectors, "QUANTIZE_MIN_ROWS", 8)
    monkeypatch.setattr(vectors, "IVF_MIN_ROWS", 8)


def test_a_store_with_the_inverted_file_searches_like_one_without(tmp_path: Path, caller: Caller) -> None:
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
        patch.setattr(vectors, "IVF_MIN_ROWS", 8)
        memory = Memory.open(settings, HashEmbedder())
        try:
            memory.store.warm()
            assert memory.store._indexes["vectors"]._ivf is not None  # type: ignore[attr-defined]
            assert [search(memory, caller, q) for q in queries] == want
            assert search(memory, caller, "shard 12", repository=REPOS[0]) == want_scoped
        finally:
            memory.close()


@pytest.mark.usefixtures("forced")
def test_another_process_writes_and_forgets_reach_the_inverted_file_in_place(
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
            index = reader._indexes["vectors"]
            table = index._ivf
            assert table is not None
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
            assert reader.reloads == reloads and index._ivf is table  # in place: no reload, no retrain
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
