"""The model call queue (embed/batcher.py): callers that arrive together share one model call,
the model never runs twice at once, one caller's failure stays its own, and processes sharing a
store take turns through the lock file. Logic with the deterministic embedder behind a gate (real
threads, events, bounded waits); the real model for what batching does to the vectors."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from mentis.api.attempts import RecordAttemptInput, SearchInput
from mentis.config import Settings
from mentis.errors import ConfigError, EmbeddingError
from mentis.providers.embed import Embedder, HashEmbedder
from mentis.providers.embed.batcher import EmbedBatcher, lock_path_for
from mentis.service.memory import Caller, Memory

WAIT = 10.0  # bound on every wait; a healthy run never gets near it


class GatedEmbedder:
    """HashEmbedder that records each call and can hold the first one until ``release`` is set."""

    def __init__(self, *, hold_first: bool = False, fail_on: str | None = None) -> None:
        self._inner = HashEmbedder()
        self.model_id = self._inner.model_id
        self.dim = self._inner.dim
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._hold = hold_first
        self._fail_on = fail_on
        self._running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self._running += 1
            self.most_at_once = max(self.most_at_once, self._running)
            self.calls.append(list(texts))
            first = len(self.calls) == 1
        try:
            if first and self._hold:
                self.entered.set()
                assert self.release.wait(WAIT)
            if self._fail_on is not None and self._fail_on in texts:
                raise EmbeddingError(f"cannot embed {self._fail_on!r}")
            return self._inner.embed(texts)
        finally:
            with self._lock:
                self._running -= 1


@pytest.fixture
def gated() -> GatedEmbedder:
    return GatedEmbedder(hold_first=True)


@pytest.fixture
def batcher(gated: GatedEmbedder) -> Iterator[EmbedBatcher]:
    b = EmbedBatcher(gated, window_s=0.0, max_batch=8)
    yield b
    gated.release.set()
    b.close()


def _hold_model(batcher: EmbedBatcher, gated: GatedEmbedder, pool: ThreadPoolExecutor) -> object:
    first = pool.submit(batcher.embed, ["the first caller"])
    assert gated.entered.wait(WAIT)
    return first


def test_callers_arriving_while_the_model_runs_share_one_model_call(
    batcher: EmbedBatcher, gated: GatedEmbedder
) -> None:
    texts = [f"writer {i} retries the flaky checkout test" for i in range(5)]
    with ThreadPoolExecutor(6) as pool:
        first = _hold_model(batcher, gated, pool)
        later = [pool.submit(batcher.embed, [t]) for t in texts]
        assert batcher.wait_queued(5, WAIT)
        gated.release.set()
        results = [f.result(WAIT) for f in later]
        first.result(WAIT)  # type: ignore[attr-defined]
    assert gated.calls == [["the first caller"], texts]
    expected = HashEmbedder().embed(texts)
    for i, vectors in enumerate(results):
        np.testing.assert_array_equal(vectors, expected[i : i + 1])
    assert batcher.stats().largest == 5


def test_a_batch_holds_at_most_max_batch_texts_and_keeps_each_callers_texts_together(
    gated: GatedEmbedder,
) -> None:
    batcher = EmbedBatcher(gated, window_s=0.0, max_batch=4)
    try:
        requests = [["a1", "a2"], ["b1", "b2", "b3"], ["c1"], ["d1", "d2"]]
        with ThreadPoolExecutor(5) as pool:
            first = _hold_model(batcher, gated, pool)
            futures = []
            for texts in requests:  # queued in this order
                futures.append(pool.submit(batcher.embed, texts))
                assert batcher.wait_queued(len(futures), WAIT)
            gated.release.set()
            for f, texts in zip(futures, requests, strict=True):
                np.testing.assert_array_equal(f.result(WAIT), HashEmbedder().embed(texts))
            first.result(WAIT)  # type: ignore[attr-defined]
    finally:
        batcher.close()
    assert gated.calls[1:] == [["a1", "a2"], ["b1", "b2", "b3", "c1"], ["d1", "d2"]]


def test_many_threads_never_run_the_model_twice_at_once() -> None:
    embedder = GatedEmbedder()
    batcher = EmbedBatcher(embedder, window_s=0.002, max_batch=8)
    barrier = threading.Barrier(8)

    def writer(n: int) -> list[np.ndarray]:
        barrier.wait(WAIT)
        return [batcher.embed([f"writer {n} text {i}"]) for i in range(25)]

    try:
        with ThreadPoolExecutor(8) as pool:
            results = [f.result(WAIT) for f in [pool.submit(writer, n) for n in range(8)]]
    finally:
        batcher.close()
    assert embedder.most_at_once == 1
    for n, vectors in enumerate(results):
        expected = HashEmbedder().embed([f"writer {n} text {i}" for i in range(25)])
        np.testing.assert_array_equal(np.vstack(vectors), expected)
    stats = batcher.stats()
    assert (stats.requests, stats.texts) == (200, 200)
    assert stats.calls == len(embedder.calls) <= 200


def test_a_failing_text_fails_only_its_own_caller() -> None:
    embedder = GatedEmbedder(hold_first=True, fail_on="poison")
    batcher = EmbedBatcher(embedder, window_s=0.0, max_batch=8)
    try:
        with ThreadPoolExecutor(4) as pool:
            first = _hold_model(batcher, embedder, pool)
            good = pool.submit(batcher.embed, ["a good text"])
            bad = pool.submit(batcher.embed, ["poison"])
            other = pool.submit(batcher.embed, ["another good text"])
            assert batcher.wait_queued(3, WAIT)
            embedder.release.set()
            np.testing.assert_array_equal(good.result(WAIT), HashEmbedder().embed(["a good text"]))
            np.testing.assert_array_equal(other.result(WAIT), HashEmbedder().embed(["another good text"]))
            with pytest.raises(EmbeddingError, match="poison"):
                bad.result(WAIT)
            first.result(WAIT)  # type: ignore[attr-defined]
    finally:
        batcher.close()
    # the shared batch failed, then each caller was embedded on its own
    assert embedder.calls[1] == ["a good text", "poison", "another good text"]
    assert embedder.calls[2:] == [["a good text"], ["poison"], ["another good text"]]


def test_the_model_runs_only_while_holding_the_lock_file(tmp_path: Path) -> None:
    lock = tmp_path / "mentis.db.embed-lock"
    seen: list[bool] = []

    class Probe:
        model_id = "probe"
        dim = 4

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            fd = os.open(lock, os.O_RDWR)
            try:  # another open file cannot take the lock while the model runs
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append(False)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                seen.append(True)
            finally:
                os.close(fd)
            return np.ones((len(texts), 4), dtype=np.float32) / 2

    batcher = EmbedBatcher(Probe(), lock_path=lock)
    try:
        batcher.embed(["one"])
        batcher.embed(["two", "three"])
    finally:
        batcher.close()
    assert seen == [True, True]
    assert oct(lock.stat().st_mode & 0o777) == "0o600"


def test_the_lock_file_sits_beside_the_store_and_only_a_local_model_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "mentis.db"
    assert lock_path_for(db) == tmp_path / "mentis.db.embed-lock"

    class Local(HashEmbedder):
        runs_on_local_cores = True

    assert EmbedBatcher.from_env(Local(), lock_path_for(db)).lock_path == lock_path_for(db)
    assert EmbedBatcher.from_env(HashEmbedder(), lock_path_for(db)).lock_path is None
    monkeypatch.setenv("MENTIS_EMBED_LOCK", "0")
    assert EmbedBatcher.from_env(Local(), lock_path_for(db)).lock_path is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MENTIS_EMBED_BATCH_MAX", "0"),
        ("MENTIS_EMBED_BATCH_MAX", "eight"),
        ("MENTIS_EMBED_BATCH_WINDOW_MS", "-1"),
        ("MENTIS_EMBED_BATCH_WINDOW_MS", "500"),
        ("MENTIS_EMBED_BATCH_CHARS", "-5"),
    ],
)
def test_bad_batch_settings_are_a_config_error_naming_the_variable(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        EmbedBatcher.from_env(HashEmbedder(), None)


def test_a_closed_batcher_refuses_with_an_embedding_error() -> None:
    batcher = EmbedBatcher(HashEmbedder())
    batcher.embed(["warm"])
    batcher.close()
    with pytest.raises(EmbeddingError, match="closed"):
        batcher.embed(["late"])


def test_concurrent_records_through_memory_share_model_calls_and_all_land(
    settings: Settings, caller: Caller
) -> None:
    embedder = GatedEmbedder(hold_first=True)
    memory = Memory.open(settings, embedder)
    try:
        with ThreadPoolExecutor(5) as pool:
            first = pool.submit(memory.ctx.embed, ["a query that holds the model"])
            assert embedder.entered.wait(WAIT)
            futures = [
                pool.submit(
                    memory.record_attempt,
                    caller,
                    RecordAttemptInput(
                        repository="github.com/acme/shop",
                        task_id=f"t{i}",
                        action=f"writer {i} bumps the pool size",
                        observation=f"timeouts gone for writer {i}",
                    ),
                )
                for i in range(4)
            ]
            assert memory.ctx.batcher.wait_queued(4, WAIT)
            embedder.release.set()
            recorded = [f.result(WAIT) for f in futures]
            first.result(WAIT)
        assert len(embedder.calls) == 2 and len(embedder.calls[1]) == 4
        for i, r in enumerate(recorded):
            hit = memory.search(caller, SearchInput(query=f"writer {i} bumps the pool size timeouts gone"))
            assert hit.tasks[0].task_id == f"t{i}"
            assert hit.tasks[0].attempt.attempt_id == r.attempt_id
        assert [(c.chain, c.entries) for c in memory.store.verify()] == [("github.com/acme/shop", 4)]
    finally:
        embedder.release.set()
        memory.close()


@pytest.mark.slow
def test_real_model_vectors_batched_with_other_texts_match_one_at_a_time(real_embedder: Embedder) -> None:
    texts = [
        "pool size",
        "raised the database connection pool size from 10 to 40 for the checkout service; "
        "p99 latency under load dropped from 2.1 s to 300 ms, no more timeouts in the load test",
        "flaky test_cart_total fails on rounding when VAT is 7.7 %",
        "the migration deadlocks when two workers take the orders lock in opposite order",
    ]
    alone = np.vstack([real_embedder.embed([t]) for t in texts])
    batcher = EmbedBatcher(real_embedder, window_s=0.0, max_batch=8)
    barrier = threading.Barrier(len(texts))

    def one(t: str) -> np.ndarray:
        barrier.wait(WAIT)
        return batcher.embed([t])

    try:
        with ThreadPoolExecutor(len(texts)) as pool:
            together = np.vstack([f.result(60) for f in [pool.submit(one, t) for t in texts]])
    finally:
        batcher.close()
    np.testing.assert_allclose(together, alone, atol=2e-5)


def test_a_batch_stays_within_its_padded_size_so_long_texts_go_alone(gated: GatedEmbedder) -> None:
    batcher = EmbedBatcher(gated, window_s=0.0, max_batch=8, max_padded_chars=100)
    long_a, long_b = "a" * 60, "b" * 60
    short = [f"q{i}" * 5 for i in range(4)]  # 10 characters each
    try:
        with ThreadPoolExecutor(7) as pool:
            first = _hold_model(batcher, gated, pool)
            futures = []
            for texts in ([long_a], [long_b], *[[q] for q in short]):
                futures.append(pool.submit(batcher.embed, texts))
                assert batcher.wait_queued(len(futures), WAIT)
            gated.release.set()
            for f in futures:
                f.result(WAIT)
            first.result(WAIT)  # type: ignore[attr-defined]
    finally:
        batcher.close()
    # 2 x 60 > 100: each long text goes alone (a short one beside it would pad to 60 too);
    # then the short ones share one batch (4 x 10 <= 100)
    assert gated.calls[1:] == [[long_a], [long_b], short]


def test_the_local_model_gets_a_padded_size_budget_and_remote_embedders_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Local(HashEmbedder):
        runs_on_local_cores = True

    assert EmbedBatcher.from_env(Local(), None).max_padded_chars == 1024
    assert EmbedBatcher.from_env(HashEmbedder(), None).max_padded_chars is None
    monkeypatch.setenv("MENTIS_EMBED_BATCH_CHARS", "0")
    assert EmbedBatcher.from_env(Local(), None).max_padded_chars is None


def test_a_record_waiting_for_the_model_holds_no_write_lock_on_the_store(
    settings: Settings, caller: Caller
) -> None:
    embedder = GatedEmbedder(hold_first=True)
    slow, other = Memory.open(settings, embedder), Memory.open(settings, HashEmbedder())
    try:
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(
                slow.record_attempt,
                caller,
                RecordAttemptInput(
                    repository="github.com/acme/shop", task_id="a", action="x", observation="y"
                ),
            )
            assert embedder.entered.wait(WAIT)  # the first record is inside the model call
            # another process-like writer on the same file commits meanwhile, on the same chain
            done = other.record_attempt(
                caller,
                RecordAttemptInput(
                    repository="github.com/acme/shop", task_id="b", action="x", observation="z"
                ),
            )
            assert not held.done()
            embedder.release.set()
            late = held.result(WAIT)
        assert (done.ledger.seq, late.ledger.seq) == (0, 1)
    finally:
        embedder.release.set()
        slow.close()
        other.close()
