"""What a backend supplies to the relational core: the hooks of :class:`Backend`.

The SQL both stores share (every append, derivation and read, :mod:`mentis.store.shared.core` and
its siblings) is written once against this class. A backend — :class:`~mentis.store.sqlite.store.SqliteStore`
or :class:`~mentis.store.postgres.store.PostgresStore` — subclasses the shared store and implements
every abstract method here: its transactions, where the lexical rows and vectors live and how they
are searched, verification, ``recall``'s read-only SQL, and what its in-process indexes must hear
of a forget or a rebuild.

``conn`` is the backend's connection type (``sqlite3.Connection`` or a psycopg connection), given
to the shared code inside one of the backend's transactions; the shared code only calls
:meth:`Connection.execute` on it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from mentis.errors import IntegrityError
from mentis.ledger.chain import ChainReport
from mentis.store.protocol import SqlParams, SqlResult
from mentis.store.shared.dialect import Dialect
from mentis.store.shared.recall_limits import RecallBounds


class Cursor(Protocol):
    """What the shared SQL reads of a statement's result."""

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the shared SQL calls on a backend's connection (``sqlite3`` and psycopg both have it)."""

    def execute(self, sql: str, params: Any = ..., /) -> Cursor: ...


ConnT = TypeVar("ConnT", bound=Connection)


class Backend(ABC, Generic[ConnT]):
    """The hooks a backend implements for the shared relational core (see the module docstring).

    Unless a hook says otherwise it runs inside the caller's transaction on ``conn`` and must not
    commit, roll back or open another transaction; an exception it raises rolls the whole write
    back.
    """

    D: ClassVar[Dialect]
    """How this backend spells the shared SQL."""
    path: str
    """Where the store lives, for messages (a file path, or a database URL without its password)."""
    dim: int
    """The length of every vector the store holds."""
    damaged: dict[str, IntegrityError]
    """Each chain that did not verify when the store opened (or at the last ``verify_chains``),
    with its failure: its reads and writes are refused, the other chains are served."""

    # ------------------------------------------------------------ transactions

    @abstractmethod
    def _read(self) -> AbstractContextManager[ConnT]:
        """A read transaction: every statement inside sees one snapshot. Ends without writing."""

    @abstractmethod
    def _write(self, *chains: str, commit: bool = True) -> AbstractContextManager[ConnT]:
        """A write transaction holding the lock of each of ``chains`` (every append to a chain
        runs inside one naming it, so a chain never forks); commits when the block ends (rolls
        back instead with ``commit=False``: a write prepared, not made), rolls back when it
        raises. With no chain: a write that appends to none (meta, rebuild)."""

    @abstractmethod
    def _peek(self) -> AbstractContextManager[ConnT]:
        """A connection for one read statement (its own snapshot), as cheap as the backend allows."""

    @abstractmethod
    def _scan(self, conn: ConnT, sql: str, name: str) -> Iterable[Sequence[Any]]:
        """The rows of a large SELECT run on ``conn`` (the whole ledger: export, verification),
        streamed if the backend can; ``name`` labels the scan (a server-side cursor's name)."""

    # ------------------------------------------------------------ the lexical rows

    @abstractmethod
    def _index_terms(
        self,
        conn: ConnT,
        table: str,
        rowid: int,
        repository: str,
        fields: Sequence[str],
        weights: Sequence[float],
    ) -> None:
        """Write one document's lexical row in ``table`` (``attempt_terms``, ``thought_terms``,
        ``skill_terms``, ``title_terms`` or ``window_terms``): ``fields`` analysed into weighted
        stems, keyed by the record's ledger ``rowid`` (inside the record's write transaction)."""

    @abstractmethod
    def _unindex_terms(self, conn: ConnT, table: str, rowid: int) -> None:
        """Remove one document's lexical row from ``table`` (a forget, or a skill's newer version),
        and the stems no other document holds (inside the write transaction)."""

    def _terms_batch(self, conn: ConnT) -> AbstractContextManager[None]:
        """A block of ``conn``'s transaction whose lexical rows the backend may write together
        when it ends (PostgreSQL does: each stem's count moves once per batch); by default each
        row is written when :meth:`_index_terms` is called."""
        return nullcontext()

    # ------------------------------------------------------------ candidate search

    @abstractmethod
    def _lexical(
        self, table: str, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 over ``table``'s lexical rows of ``repositories`` (None: all) for the query words
        ``terms``: the best ``limit`` (rowid, score), best first. Sees every committed write, of
        this process or another; opens its own read (not called inside a transaction)."""

    @abstractmethod
    def _vector(
        self, table: str, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """The ``limit`` rows of ``table`` (``vectors``, ``thought_vectors``, ``skill_vectors``)
        of ``repositories`` (None: all) nearest to ``query`` by cosine, as (rowid, similarity),
        best first; each row's checksum (``derived_check``) checked. Opens its own read."""

    # ------------------------------------------------------------ what the indexes must hear

    @abstractmethod
    def _removing(self, conn: ConnT, kind: str, rowid: int | None) -> None:
        """A forget (or a skill's newer version) removes ``rowid``, a record of ``kind``
        (``attempt``, ``thought``, ``window`` or ``skill``), from the derived tables in this
        write transaction: tell every process's in-process indexes. ``rowid`` None: a thought
        forgotten during a replay; the indexes must reload instead."""

    @abstractmethod
    def _rekeyed(self, conn: ConnT) -> None:
        """Lexical and vector rows kept their rowids but moved to another scope key (``publish``,
        in this write transaction): every process's in-process indexes must reload them."""

    @abstractmethod
    def _after_forget(self) -> None:
        """After a forget committed (outside its transaction): erase what the backend keeps of
        the forgotten content outside the live tables (SQLite: the write-ahead log)."""

    @abstractmethod
    def _after_rebuild(self) -> None:
        """After a rebuild committed: drop this process's in-process indexes (they reload)."""

    @abstractmethod
    def warm(self) -> None:
        """Load the in-process indexes now rather than on the first search."""

    # ------------------------------------------------------------ reads the dialect cannot share

    @abstractmethod
    def _task_rows(
        self, conn: ConnT, keys: Sequence[tuple[str, str]]
    ) -> Iterable[tuple[str, str, int | None, int]]:
        """(repository, task_id, the rowid of the attempt whose title is the task's or None,
        attempt count) of each task among ``keys`` that exists (inside a read transaction)."""

    # ------------------------------------------------------------ verification, import, rebuild

    @abstractmethod
    def verify(self, signatures: bool = False) -> list[ChainReport]:
        """Verify every chain (DESIGN §3), raising IntegrityError at the first failure; with
        ``signatures``, every signature rather than each stream's last. Opens its own read."""

    @abstractmethod
    def _verify_skipping(self, skip: frozenset[str], signatures: bool) -> list[ChainReport]:
        """:meth:`verify`, leaving out the chains in ``skip`` (what
        :func:`mentis.ledger.chain.isolate` calls until only sound chains are left)."""

    @abstractmethod
    def _verify_within(self, conn: ConnT) -> None:
        """Verify the whole ledger as ``conn``'s write transaction sees it (an import, before it
        commits), leaving out the chains in ``damaged``; raise IntegrityError on a failure."""

    @abstractmethod
    def _lock_ledger(self, conn: ConnT) -> None:
        """Hold off appends to every chain until ``conn``'s write transaction ends (an import
        checks and writes the whole ledger)."""

    @abstractmethod
    def _reset_derived(self, conn: ConnT) -> None:
        """Empty every derived table in ``conn``'s write transaction, as the schema this version
        creates, and tell every process's in-process indexes to reload (a rebuild)."""

    @abstractmethod
    def _registry_lock(self, conn: ConnT, exclusive: bool) -> None:
        """Order an append against agent registry writes, in its write transaction: a registry
        write (``exclusive``) waits for every other append in flight and they for it (SQLite's
        file lock already does; PostgreSQL takes an advisory lock)."""

    # ------------------------------------------------------------ recall, size, close

    @abstractmethod
    def _recall(self, sql: str, params: SqlParams | None, bounds: RecallBounds) -> SqlResult:
        """Run one read-only ``recall`` statement over the documented views, as the caller sees
        them (``bounds.visible``), within the row, byte and time limits; QueryError when it is
        refused or fails. Opens its own read-only connection."""

    @abstractmethod
    def size_bytes(self) -> int:
        """Bytes the store takes on disk (or on the server)."""

    @abstractmethod
    def close(self) -> None:
        """Release the connections (and any worker thread); the store is not used afterwards."""


__all__ = ["Backend", "ConnT", "Connection", "Cursor"]
