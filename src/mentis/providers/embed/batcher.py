"""The model runs once at a time per process, on the embeddings that arrive together.

Concurrent writers in one process (HTTP requests, threads) used to call the model at the same
time: each onnxruntime run spread over the same two cores, so eight writers went barely faster
than one. :class:`EmbedBatcher` lets one call run at a time. Callers queue their texts; the caller
that finds the model free runs it for its own texts and everything queued behind it (up to
``max_batch`` texts) in one call, then hands the model to the oldest caller still waiting. So
writers that arrive together share one batch, and a lone writer runs the model in its own thread
with nothing added but an uncontended lock.

An optional collecting window is adaptive: a lone caller is embedded at once, and only after a
batch that held more than one caller does the next one wait up to ``window_s`` for the others to
come back. It is off by default: while the model is busy the other writers queue anyway, so the
next batch already holds whatever arrived together, and a wait would only add latency.

Several processes on one machine (stdio servers of several agents) each batch their own callers;
with ``lock_path`` every model call also holds an ``fcntl`` lock on that file, so they take turns
on the cores instead of running side by side.

For a model on this machine's cores a batch is also bounded by its padded size (texts x longest
text, in characters): onnxruntime pads a batch to its longest text, and on this CPU padding and
larger activations cost more than batching saves once texts reach attempt size (~180 tokens:
one at a time 30 ms/text of CPU, in sorted batches of 8 36 ms, in mixed batches of 8 61 ms),
while short texts gain (~15 tokens: 6.1 ms alone, 3.5 ms in batches of 4). So queries and short
thoughts are batched and attempt-sized texts go one at a time, never two model calls at once.

Settings (environment): ``MENTIS_EMBED_BATCH_MAX`` (texts per batch, default 8),
``MENTIS_EMBED_BATCH_CHARS`` (padded-size budget, default 1024 for the local model, 0 = none;
remote embedders default to none), ``MENTIS_EMBED_BATCH_WINDOW_MS`` (default 0: the batch is what
queued while the previous call ran), ``MENTIS_EMBED_LOCK`` (``1`` default, ``0`` turns the
cross-process lock off).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mentis.errors import ConfigError, EmbeddingError
from mentis.providers.embed import Embedder

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no cross-process lock
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

DEFAULT_WINDOW_MS = 0.0
DEFAULT_MAX_BATCH = 8
# For a model on this machine's cores: a batch is padded to its longest text, and padding costs
# more than batching saves for attempt-sized texts (bench/writers.py), so a batch's texts x its
# longest text stay within this many characters: short queries batch by 8, attempts go alone.
DEFAULT_LOCAL_PADDED_CHARS = 1024


@dataclass
class _Request:
    texts: list[str]
    done: threading.Event = field(default_factory=threading.Event)
    vectors: np.ndarray | None = None
    error: BaseException | None = None


@dataclass(frozen=True)
class BatchStats:
    """What the thread has done: model calls, callers served and texts embedded."""

    calls: int
    requests: int
    texts: int
    largest: int


class EmbedBatcher:
    """Wraps an :class:`~mentis.providers.embed.Embedder`; :meth:`embed` may be called from any thread."""

    def __init__(
        self,
        embedder: Embedder,
        *,
        window_s: float = DEFAULT_WINDOW_MS / 1000,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_padded_chars: int | None = None,
        lock_path: Path | None = None,
    ) -> None:
        if window_s < 0 or window_s > 0.1:
            raise ConfigError(f"the embedding batch window must be 0-100 ms, not {window_s * 1000:g} ms")
        if max_batch < 1:
            raise ConfigError(f"the embedding batch size must be at least 1, not {max_batch}")
        self.embedder = embedder
        self.window_s = window_s
        self.max_batch = max_batch
        self.max_padded_chars = max_padded_chars
        self.lock_path = lock_path
        self._cond = threading.Condition()
        self._queue: deque[_Request] = deque()
        self._busy = False  # a caller is running (or about to run) the model
        self._closed = False
        self._last_batch_callers = 0
        self._calls = self._requests = self._texts = self._largest = 0

    @classmethod
    def from_env(cls, embedder: Embedder, lock_path: Path | None) -> EmbedBatcher:
        """Settings from ``MENTIS_EMBED_BATCH_*``; the lock only for a model on this machine's cores."""
        window_ms = _number("MENTIS_EMBED_BATCH_WINDOW_MS", DEFAULT_WINDOW_MS, 0, 100)
        max_batch = int(_number("MENTIS_EMBED_BATCH_MAX", DEFAULT_MAX_BATCH, 1, 1024))
        local = bool(getattr(embedder, "runs_on_local_cores", False))
        default_chars = DEFAULT_LOCAL_PADDED_CHARS if local else 0
        padded = int(_number("MENTIS_EMBED_BATCH_CHARS", default_chars, 0, 10_000_000))
        use_lock = os.environ.get("MENTIS_EMBED_LOCK", "1") != "0"
        return cls(
            embedder,
            window_s=window_ms / 1000,
            max_batch=max_batch,
            max_padded_chars=padded or None,
            lock_path=lock_path if local and use_lock else None,
        )

    # ------------------------------------------------------------ callers

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``, batched with other callers' texts; returns what the embedder returns
        for them (the caller checks the shape).

        The caller that finds the model free runs it, for its own texts and whatever queued
        behind it; the others wait. When it is done it hands the model to the oldest waiting
        caller, which runs the next batch. So the model runs once at a time, and a lone caller
        runs it in its own thread, with no hand-off."""
        request = _Request(list(texts))
        with self._cond:
            if self._closed:
                raise EmbeddingError("the embedder is closed; reopen the memory")
            self._queue.append(request)
            self._cond.notify_all()
            if self._busy:
                lead = False
            else:
                self._busy = lead = True
        if not lead:
            request.done.wait()
            if request.vectors is None and request.error is None:
                lead = True  # woken to run the next batch, which starts with this request
        if lead:
            self._lead(request)
        if request.error is not None:
            raise request.error
        assert request.vectors is not None
        return request.vectors

    def wait_queued(self, count: int, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until ``count`` callers are queued for the model."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._queue) >= count, timeout)

    def stats(self) -> BatchStats:
        with self._cond:
            return BatchStats(self._calls, self._requests, self._texts, self._largest)

    def close(self) -> None:
        """Refuse new callers; those already queued are still served."""
        with self._cond:
            self._closed = True

    # ------------------------------------------------------------ the caller running the model

    def _lead(self, own: _Request) -> None:
        batch = self._next_batch()
        assert batch[0] is own
        try:
            self._serve(batch)
        except BaseException as exc:  # interrupted: no caller of this batch may wait forever
            for request in batch:
                if not request.done.is_set():
                    request.error = exc
                    request.done.set()
            raise
        finally:
            with self._cond:
                if self._queue:
                    self._queue[0].done.set()  # its vectors are unset: it runs the next batch
                else:
                    self._busy = False

    def _next_batch(self) -> list[_Request]:
        with self._cond:
            if self._last_batch_callers > 1 and self.window_s > 0:
                # Others were embedding together a moment ago: give them a bounded moment to
                # come back before running a smaller batch.
                deadline = time.monotonic() + self.window_s
                while self._queued_texts() < self.max_batch:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
            batch = [self._queue.popleft()]
            count, longest = len(batch[0].texts), _longest(batch[0])
            while self._queue and self._fits(count, longest, self._queue[0]):
                request = self._queue.popleft()
                count += len(request.texts)
                longest = max(longest, _longest(request))
                batch.append(request)
            self._last_batch_callers = len(batch)
            self._calls += 1
            self._requests += len(batch)
            self._texts += count
            self._largest = max(self._largest, len(batch))
            return batch

    def _fits(self, count: int, longest: int, request: _Request) -> bool:
        count += len(request.texts)
        if count > self.max_batch:
            return False
        padded = count * max(longest, _longest(request))
        return self.max_padded_chars is None or padded <= self.max_padded_chars

    def _queued_texts(self) -> int:
        return sum(len(request.texts) for request in self._queue)

    def _serve(self, batch: list[_Request]) -> None:
        texts = [text for request in batch for text in request.texts]
        try:
            with self._model_lock():
                vectors = self.embedder.embed(texts)
            if not isinstance(vectors, np.ndarray) or len(vectors) != len(texts):
                raise EmbeddingError(
                    f"embedder returned {getattr(vectors, 'shape', type(vectors).__name__)} "
                    f"for {len(texts)} texts; nothing was written"
                )
        except Exception as exc:  # handed to the callers it belongs to
            if len(batch) > 1:
                # One caller's text must not fail the others: embed each on its own.
                for request in batch:
                    self._serve([request])
                return
            batch[0].error = exc
            self._finish(batch[0])
            return
        start = 0
        for request in batch:
            request.vectors = vectors[start : start + len(request.texts)]
            start += len(request.texts)
            self._finish(request)

    @staticmethod
    def _finish(request: _Request) -> None:
        request.done.set()

    @contextlib.contextmanager
    def _model_lock(self) -> Iterator[None]:
        if self.lock_path is None or fcntl is None:
            yield
            return
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _longest(request: _Request) -> int:
    return max((len(text) for text in request.texts), default=0)


def _number(name: str, default: float, low: float, high: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise ConfigError(
            f"{name} must be a number from {low:g} to {high:g}, not {raw!r}; unset it for {default:g}"
        )
    return value


def lock_path_for(db_path: Path | None) -> Path | None:
    """The lock file beside a SQLite store (None for a store with no local file)."""
    if db_path is None:
        return None
    return db_path.with_name(db_path.name + ".embed-lock")


__all__ = ["BatchStats", "EmbedBatcher", "lock_path_for"]
