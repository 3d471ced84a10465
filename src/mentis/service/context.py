"""What every operation group of the service shares: the store, the embedder, the reranker and
the settings (:class:`ServiceContext`), and the checks that come before any write (embedding
shape, secrets); who may do what is :mod:`mentis.service.access`'s."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from mentis.config import Settings
from mentis.errors import ConfigError
from mentis.providers import scrub
from mentis.providers.embed import Embedder, check_vectors
from mentis.providers.embed.batcher import EmbedBatcher, lock_path_for
from mentis.providers.rerank import Reranker
from mentis.store.protocol import Store
from mentis.store.sqlite.store import SqliteStore

log = logging.getLogger(__name__)


def open_store(settings: Settings, dim: int, *, check_derived: bool = True) -> Store:
    """The PostgreSQL store when ``MENTIS_DATABASE_URL`` is a postgresql:// URL, else the SQLite file.

    ``check_derived=False``: the caller recreates the derived tables (rebuild, reindex) or reads
    only the ledger (migrate's source), so their schema and rows are not checked (the ledger is)."""
    if settings.uses_postgres:
        from mentis.store.postgres.store import PostgresStore

        assert settings.database_url is not None
        return PostgresStore(settings.database_url, dim, check_derived=check_derived)
    return SqliteStore(settings.db_path, dim, check_derived=check_derived)


def secret_warnings(*texts: str, forget: str = "forget_attempt") -> list[str]:
    """Warn (never block) when stored text looks like it holds a secret; ``forget`` (the tool
    that erases the record: forget_attempt or forget_thought) is named."""
    kinds = sorted({f.kind for text in texts if text for f in scrub.find_secrets(text)})
    if not kinds:
        return []
    return [
        f"the stored text looks like it holds a secret ({', '.join(kinds)}); it is kept on this machine "
        f"only; if it is real, rotate it and call {forget}"
    ]


class ServiceContext:
    """The store, the embedder, the reranker and the settings, opened once per process and
    shared by the attempt, thought and browsing operations (:class:`mentis.service.memory.Memory`)."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        reranker: Reranker | None = None,
        *,
        settings: Settings | None = None,
        check_model: bool = True,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        self.settings = settings or Settings.from_env()
        # lexical search runs here while the query is embedded (SQLite and onnxruntime release the GIL)
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mentis-lexical")
        # every embedding goes through one model thread, batched with the texts that arrive with it
        lock = lock_path_for(Path(store.path)) if isinstance(store, SqliteStore) else None
        self.batcher = EmbedBatcher.from_env(embedder, lock)
        if check_model:
            self._check_model()

    def warm_up(self) -> None:
        """Load the store's in-process indexes in the background, so a server's first search
        does not pay for it (``close`` waits for it to finish)."""

        def warm() -> None:
            try:
                self.store.warm()
            except Exception:  # the first search loads them again and reports the error
                log.warning("preloading the search indexes failed", exc_info=True)

        self.pool.submit(warm)

    def close(self) -> None:
        """Close the store and any provider's HTTP client."""
        self.pool.shutdown(wait=True)
        self.batcher.close()
        self.store.close()
        for provider in (self.embedder, self.reranker):
            close = getattr(provider, "close", None)
            if callable(close):
                close()

    def _check_model(self) -> None:
        model = self.store.get_meta("embed_model")
        if model is None:
            self.store.set_meta("embed_model", self.embedder.model_id)
            self.store.set_meta("embed_dim", str(self.embedder.dim))
        elif model != self.embedder.model_id:
            raise ConfigError(
                f"{self.store.path} was embedded with {model!r} but the configured embedder is "
                f"{self.embedder.model_id!r}; set MENTIS_EMBEDDER to match the store, or run "
                "`mentis reindex` to re-embed it with the configured model"
            )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.batcher.embed(texts)
        return check_vectors(vectors, len(texts), self.embedder.dim)

    def embed_one(self, text: str) -> np.ndarray:
        vector: np.ndarray = self.embed([text])[0]
        return vector
