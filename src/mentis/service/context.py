"""What every part of the service shares: the caller, the store, the embedder, and the checks
that come before any write (scope, embedding shape, secrets)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from functools import wraps
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import numpy as np

from mentis.config import Settings
from mentis.errors import ConfigError, Forbidden, IntegrityError
from mentis.ledger.chain import chain_refused
from mentis.ledger.signing import RESERVED_PREFIX
from mentis.providers import scrub
from mentis.providers.embed import Embedder, check_vectors
from mentis.providers.embed.batcher import EmbedBatcher, lock_path_for
from mentis.providers.rerank import Reranker
from mentis.store.protocol import Store
from mentis.store.sqlite.store import SqliteStore

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")


def open_store(settings: Settings, dim: int, *, check_derived: bool = True) -> Store:
    """The PostgreSQL store when ``MENTIS_DATABASE_URL`` is a postgresql:// URL, else the SQLite file.

    ``check_derived=False``: the caller recreates the derived tables (rebuild, reindex) or reads
    only the ledger (migrate's source), so their schema and rows are not checked (the ledger is)."""
    if settings.uses_postgres:
        from mentis.store.postgres.store import PostgresStore

        assert settings.database_url is not None
        return PostgresStore(settings.database_url, dim, check_derived=check_derived)
    return SqliteStore(settings.db_path, dim, check_derived=check_derived)


@dataclass(frozen=True)
class Caller:
    """Who is calling. ``repositories`` None means every repository (local, unscoped use);
    ``admin`` may manage the agent registry (an admin token, or the local user).

    ``refused`` holds the repositories whose ledger chain does not verify (the store's
    ``damaged``, with each one's failure); the service sets it on every call
    (:meth:`ServiceContext.narrow`). A refused repository is outside what the caller sees, so
    answers across repositories leave it out, and an explicit read or write of it raises its
    refusal (:func:`mentis.ledger.chain.chain_refused`) once the caller's scope covers it."""

    agent_id: str
    session_id: str | None = None
    can_write: bool = True
    repositories: tuple[str, ...] | None = None
    admin: bool = False
    refused: Mapping[str, IntegrityError] = field(default_factory=dict, compare=False, hash=False)

    def covers(self, repository: str) -> bool:
        """Whether the caller's scope (its token's repositories) covers ``repository``."""
        if self.repositories is None:
            return True
        return any(fnmatchcase(repository, pattern) for pattern in self.repositories)

    def sees(self, repository: str) -> bool:
        """Whether the caller may read ``repository`` now: covered and not refused."""
        return repository not in self.refused and self.covers(repository)

    @property
    def limited(self) -> bool:
        """Whether the caller sees fewer than all repositories (a scoped token, or a refused chain)."""
        return self.repositories is not None or bool(self.refused)

    def left_out(self, repository: str | None = None) -> list[str]:
        """The refused repositories the caller's scope covers (``repository``: that one only), which
        an answer across them leaves out."""
        return sorted(r for r in self.refused if self.covers(r) and repository in (None, r))

    def search_scope(self, repository: str | None, known: Callable[[], Iterable[str]]) -> list[str] | None:
        """The repositories a search draws candidates and statistics from: the ``repository``
        filter, else every repository this caller may read (``known()`` lists the store's), or
        None for all when the caller sees every one. Nothing outside it shapes a score or a rank."""
        if repository is not None:
            return [repository]
        if not self.limited:
            return None
        return [r for r in known() if self.sees(r)]


def left_out_note(caller: Caller) -> str:
    """What an answer across repositories says about the refused ones it left out ("" for none)."""
    gone = caller.left_out()
    if not gone:
        return ""
    return (
        f"; left out: {', '.join(gone)} (ledger chain does not verify; its reads are refused until "
        "it is recovered: run `mentis doctor`)"
    )


def may_read(caller: Caller, repository: str | None) -> None:
    """The read-scope rule: a caller reads only the repositories its token covers (None: no
    filter), and none whose ledger chain does not verify (that refusal names it)."""
    if repository is None:
        return
    if not caller.covers(repository):
        raise Forbidden(f"this caller may not read repository {repository!r}")
    if repository in caller.refused:
        raise chain_refused(caller.refused[repository])


def may_write(caller: Caller, repository: str) -> None:
    """The write-scope rule: a token with write scope, over this repository (never a system
    chain: names starting with ``__`` are reserved), whose ledger chain verifies."""
    if repository.startswith(RESERVED_PREFIX):
        raise Forbidden(f"repository {repository!r}: names starting with {RESERVED_PREFIX} are reserved")
    if not caller.can_write:
        raise Forbidden("this caller may only read; use a token with write scope")
    if not caller.covers(repository):
        raise Forbidden(f"this caller may not write to repository {repository!r}")
    if repository in caller.refused:
        raise chain_refused(caller.refused[repository])


def may_admin(caller: Caller) -> None:
    """The admin rule (the agent registry): an admin token over HTTP; the local user on stdio and the CLI."""
    if not caller.admin:
        raise Forbidden("managing agents and keys needs admin scope; use a token created with --scope admin")


def resolve_caller(
    settings: Settings,
    *,
    authenticated: Caller | None = None,
    client_name: str | None = None,
    default: str = "unknown-agent",
) -> Caller:
    """Who is calling (DESIGN §2), never taken from a tool argument: the caller a transport
    authenticated (a token's agent and scope) when there is one; else ``MENTIS_AGENT_ID``
    (``settings.agent_id``, from the harness config); else the name the MCP client reported
    over stdio; else the transport's ``default`` name. A caller no transport authenticated is the
    local user (stdio, the CLI, HTTP with ``--no-auth`` on loopback), and so an admin."""
    if authenticated is not None:
        return authenticated
    return Caller(agent_id=settings.agent_id or client_name or default, admin=True)


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

    def narrow(self, caller: Caller) -> Caller:
        """``caller`` with the store's damaged chains refused (:attr:`Caller.refused`)."""
        damaged = self.store.damaged
        if not damaged or caller.refused is damaged:
            return caller
        return replace(caller, refused=damaged)

    def guarded(self, op: Callable[Concatenate[Caller, P], R]) -> Callable[Concatenate[Caller, P], R]:
        """``op`` (an operation taking the caller first), called with the caller narrowed
        (:meth:`narrow`): how Memory exposes every operation, so no answer reads a damaged chain."""

        @wraps(op)
        def call(caller: Caller, /, *args: P.args, **kwargs: P.kwargs) -> R:
            return op(self.narrow(caller), *args, **kwargs)

        return call

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
