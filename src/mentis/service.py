"""What every part of the service shares: the caller, the store, the embedder, and the checks
that come before any write (scope, embedding shape, secrets)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Self

import numpy as np

from mentis import scrub
from mentis.config import Settings
from mentis.embed import Embedder, check_vectors, load_embedder
from mentis.embed.batcher import EmbedBatcher, lock_path_for
from mentis.errors import ConfigError, Forbidden
from mentis.retrieval.rerank import Reranker, load_reranker
from mentis.store.base import Store
from mentis.store.sqlite import SqliteStore

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


def open_store(settings: Settings, dim: int) -> Store:
    """The PostgreSQL store when ``MENTIS_DATABASE_URL`` is a postgresql:// URL, else the SQLite file."""
    if settings.uses_postgres:
        from mentis.store.postgres import PostgresStore

        assert settings.database_url is not None
        return PostgresStore(settings.database_url, dim)
    return SqliteStore(settings.db_path, dim)


@dataclass(frozen=True)
class Caller:
    """Who is calling. ``repositories`` None means every repository (local, unscoped use)."""

    agent_id: str
    session_id: str | None = None
    can_write: bool = True
    repositories: tuple[str, ...] | None = None

    def sees(self, repository: str) -> bool:
        if self.repositories is None:
            return True
        return any(fnmatchcase(repository, pattern) for pattern in self.repositories)

    def search_scope(self, repository: str | None, known: Callable[[], Iterable[str]]) -> list[str] | None:
        """The repositories a search draws candidates and statistics from: the ``repository``
        filter, else every repository this caller may read (``known()`` lists the store's), or
        None for all when the caller is unscoped. Nothing outside it shapes a score or a rank."""
        if repository is not None:
            return [repository]
        if self.repositories is None:
            return None
        return [r for r in known() if self.sees(r)]


class ServiceBase:
    """The store and the embedder, opened once per process."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        reranker: Reranker | None = None,
        *,
        check_model: bool = True,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.reranker = reranker
        # lexical search runs here while the query is embedded (SQLite and onnxruntime release the GIL)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mentis-lexical")
        # every embedding goes through one model thread, batched with the texts that arrive with it
        lock = lock_path_for(Path(store.path)) if isinstance(store, SqliteStore) else None
        self._batcher = EmbedBatcher.from_env(embedder, lock)
        if check_model:
            self._check_model()

    @classmethod
    def open(cls, settings: Settings, embedder: Embedder | None = None, *, check_model: bool = True) -> Self:
        """Open and verify the store (refusing a store that does not verify), load the embedder.

        ``check_model=False`` is for ``reindex``: it opens a store embedded with another model.
        """
        embedder = embedder or load_embedder(settings.embedder)
        store = open_store(settings, embedder.dim)
        try:
            return cls(store, embedder, load_reranker(), check_model=check_model)
        except BaseException:
            store.close()
            raise

    def warm_up(self) -> None:
        """Load the store's in-process indexes in the background, so a server's first search
        does not pay for it (``close`` waits for it to finish)."""

        def warm() -> None:
            try:
                self.store.warm()
            except Exception:  # the first search loads them again and reports the error
                log.warning("preloading the search indexes failed", exc_info=True)

        self._pool.submit(warm)

    def close(self) -> None:
        """Close the store and any provider's HTTP client."""
        self._pool.shutdown(wait=True)
        self._batcher.close()
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

    # ------------------------------------------------------------ helpers

    @staticmethod
    def _may_write(caller: Caller, repository: str) -> None:
        if not caller.can_write:
            raise Forbidden("this caller may only read; use a token with write scope")
        if not caller.sees(repository):
            raise Forbidden(f"this caller may not write to repository {repository!r}")

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self._batcher.embed(texts)
        return check_vectors(vectors, len(texts), self.embedder.dim)

    @staticmethod
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
