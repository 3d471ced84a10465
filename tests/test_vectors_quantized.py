"""The int8 vector index (from ``QUANTIZE_MIN_ROWS`` rows on): a quarter of the memory, and with
the exact float32 re-score the same results as the float32 index."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mentis.config import Settings
from mentis.index import vectors
from mentis.index.vectors import VectorIndex
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from tests.conformance.helpers import record, search

DIM = 64
REPOS = ["github.com/acme/a", "github.com/acme/b", "github.com/acme/c"]


def _unit_rows(n: int, seed: int) -> np.ndarray:
    """Clustered unit vectors (near neighbours exist, as with real embeddings)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, DIM)).astype(np.float32)
    rows = centres[rng.integers(0, 20, n)] + 0.4 * rng.standard_normal((n, DIM)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def _pair(n: int, seed: int = 0) -> tuple[VectorIndex, VectorIndex, dict[int, np.ndarray]]:
    rows = _unit_rows(n, seed)
    rowids = [10 + 3 * i for i in range(n)]
    repos = [REPOS[i % 3] for i in range(n)]
    exact, small = VectorIndex(DIM, quantize_min_rows=10**9), VectorIndex(DIM, quantize_min_rows=100)
    for lo in range(0, n, 250):  # in batches, so the int8 one converts once it crosses 100 rows
        for index in (exact, small):
            index.add(rowids[lo : lo + 250], repos[lo : lo + 250], rows[lo : lo + 250])
    return exact, small, dict(zip(rowids, rows, strict=True))


def _from(stored: dict[int, np.ndarray]) -> vectors.Exact:
    def exact(rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = np.array([r for r in rowids.tolist() if r in stored], dtype=np.int64)
        return found, np.array([stored[int(r)] for r in found], dtype=np.float32).reshape(-1, DIM)

    return exact


def test_an_index_past_the_threshold_holds_int8_rows_a_quarter_the_size() -> None:
    exact, small, _ = _pair(2_000)
    assert not exact.quantized and small.quantized
    assert small._matrix.nbytes * 4 == exact._matrix.nbytes
    assert len(small) == len(exact) == 2_000


@pytest.mark.parametrize("repositories", [None, [REPOS[1]], [REPOS[0], REPOS[2]]])
def test_int8_scan_with_exact_rescore_returns_the_float32_results(repositories: list[str] | None) -> None:
    exact, small, stored = _pair(3_000)
    for q in _unit_rows(25, seed=7):
        want = exact.search(q, repositories, 50)
        got = small.search(q, repositories, 50, _from(stored))
        assert [r for r, _ in got] == [r for r, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-6)


def test_int8_scores_without_rescore_stay_close_to_the_exact_ones() -> None:
    exact, small, _ = _pair(1_000)
    q = _unit_rows(1, seed=3)[0]
    approx = dict(small.search(q, None, 1_000))
    for rowid, score in exact.search(q, None, 1_000):
        assert abs(approx[rowid] - score) < 0.02


def test_a_removed_row_never_comes_back_from_the_int8_index() -> None:
    _, small, stored = _pair(600)
    q = stored[10 + 3 * 5]
    assert small.search(q, None, 1, _from(stored))[0][0] == 10 + 3 * 5
    small.remove([10 + 3 * 5])
    del stored[10 + 3 * 5]
    assert all(r != 10 + 3 * 5 for r, _ in small.search(q, None, 600, _from(stored)))
    assert len(small) == 599


def test_a_row_forgotten_between_scan_and_rescore_is_left_out() -> None:
    _, small, stored = _pair(400)
    q = stored[10]
    gone = dict(stored)
    del gone[10]  # the store no longer has it when the candidates are re-scored
    assert all(r != 10 for r, _ in small.search(q, None, 20, _from(gone)))


def test_a_store_past_the_threshold_searches_like_one_below_it(
    tmp_path: Path, caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mentis.db"
    settings = Settings(home=tmp_path, db_path=path, embedder="hash")
    memory = Memory.open(settings, HashEmbedder())
    for i in range(40):
        record(memory, caller, repository=REPOS[i % 2], task_id=f"T-{i}", action=f"tuned cache shard {i}")
    queries = ["tuned cache shard 7", "checkout payment queue", "shard 33 timeout"]
    want = [search(memory, caller, q) for q in queries]
    memory.close()

    monkeypatch.setattr(vectors, "QUANTIZE_MIN_ROWS", 8)
    memory = Memory.open(settings, HashEmbedder())
    try:
        assert [search(memory, caller, q) for q in queries] == want
        assert memory.store._indexes.vectors["vectors"].quantized  # type: ignore[attr-defined]
        record(memory, caller, repository=REPOS[0], task_id="T-new", action="unique zeppelin flange")
        assert search(memory, caller, "unique zeppelin flange")[0] == (REPOS[0], "T-new")
    finally:
        memory.close()
