"""The embedded default store: one SQLite file, WAL, a lexical index and vectors in the same file.

Tables (``schema.sql`` in prose):

- ``entries``  the ledger, one row per entry (``UNIQUE(chain, seq)``); never updated or deleted.
- ``bodies``   canonical JSON bytes of each entry's body, keyed by the entry's rowid; forgetting
  deletes a body, nothing else ever changes one.
- ``heads``    each chain's last (seq, hash), so a truncated chain is caught on open.
- ``entry_ids`` every entry's id, claimed by each append inside its transaction (its primary key
  refuses an id any entry ever had, forgotten records included).
- derived, rebuilt from the ledger by :meth:`SqliteStore.rebuild`: ``attempt_idx`` (keys only),
  ``correction_idx``, ``task_idx``, ``forgotten``, ``attempt_terms`` and ``lex_vocab`` (stem ids
  and weighted term frequencies: the lexical index, not the text) and ``vectors`` (float32
  blobs). No derived table holds a copy of content: everything a read returns is parsed from a
  body whose hash is checked as it is read.

Writes run in ``BEGIN IMMEDIATE`` transactions that include the ledger entry, so writers in
several processes serialise on SQLite's lock and a chain can never fork. Vectors are searched
through an in-process :class:`VectorIndex`, and BM25 runs on an in-process
:class:`~mentis.index.lexical.LexicalIndex`; both pick up other processes' writes by watching
``PRAGMA data_version`` (:mod:`mentis.store.sqlite.indexes`). The SQL the two backends share (every
append, derivation and read) is :class:`~mentis.store.shared.relational.RelationalStore`'s; this
module adds the schema and its migrations, verification and the hooks of
:class:`~mentis.store.shared.backend.Backend`.

Schema 2 replaced schema 1's FTS5 tables (``attempt_fts``, ``thought_fts``) with the lexical
index; opening a schema-1 file migrates it in one transaction. Schema 3 adds ``title_terms`` (each
attempt's task title alone, for the title-to-title signal); opening an older file indexes the
titles of its live attempts from their checked bodies in the same transaction. Schema 4 adds
``window_terms`` (each thought of a session with the one before it, for the causal windows of
``search_thoughts``); opening an older file indexes the windows of its live thoughts the same way.
Schema 5 adds ``entry_ids`` (every ledger entry's id with the entry that had it first: an append
claims its id there, so no id is ever written twice); opening an older file fills it from the
ledger in the same transaction. Schema 6 adds ``skill_instructions`` and
``skill_revoked_instructions`` (revocations keyed on a skill's instructions, in
:mod:`mentis.store.shared.skills`); opening an older file fills them from the checked skill bodies
and revokes the copies they catch, as a rebuild would.
Schema 7 adds ``chk`` to every vector, lexical and vocabulary row (``derived_check``: a checksum,
checked when the in-process indexes load the rows); opening an older file computes them.
Schema 8 adds ``webhooks`` and ``webhook_outbox`` (:mod:`~mentis.store.shared.webhooks`): webhook
subscriptions and the deliveries each append writes in its own transaction, outside the ledger;
opening an older file creates them empty (``SCHEMA`` runs on every open).
Schema 11 adds ``entity_types`` (:mod:`~mentis.store.shared.entity_types`: the entity-type
registry, derived from its system chain) and the recall view ``thoughts``'s ``entity_type`` and
``source_*`` columns; no older ledger holds an entity type, so opening an older file creates the
table empty, and a thought written before it has neither field.
Schema 12 adds ``entries_branching``, a partial index of the ledger's fork, branch and merge entries (branch
chains, :mod:`mentis.ledger.branches`); opening an older file creates it (``SCHEMA`` again).

Every open compares the file's tables, indexes, views and triggers with this schema
(``schema_check``) and refuses a difference, naming it.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from mentis.errors import StoreError
from mentis.ledger.chain import ChainReport
from mentis.store.protocol import SqlParams, SqlResult
from mentis.store.shared.derived_check import TERMS, VECTORS, terms_check, vector_check, vocab_check
from mentis.store.shared.dialect import SQLITE
from mentis.store.shared.entry_ids import fill_entry_ids
from mentis.store.shared.proposals import PROPOSALS_SCHEMA
from mentis.store.shared.recall_limits import RecallBounds
from mentis.store.shared.relational import RelationalStore
from mentis.store.shared.schema_check import REBUILD, schema_error, sqlite_differences
from mentis.store.shared.tokens import SQLITE_TOKEN_TABLE
from mentis.store.shared.webhooks import SQLITE_WEBHOOK_SCHEMA
from mentis.store.sqlite.connection import SqliteFile
from mentis.store.sqlite.indexes import LEXICON_SCHEMA, SqliteIndexes
from mentis.store.sqlite.recall import SqliteRecall
from mentis.store.sqlite.schema import _DERIVED_SCHEMA, _DERIVED_TABLES, _LEDGER_SCHEMA, _new_epoch
from mentis.store.sqlite.thought_schema import THOUGHT_SCHEMA
from mentis.store.sqlite.verify import one_pass, parallel_verify

log = logging.getLogger(__name__)

SCHEMA_VERSION = 12
SCHEMA = (
    _LEDGER_SCHEMA
    + _DERIVED_SCHEMA
    + THOUGHT_SCHEMA
    + LEXICON_SCHEMA
    + PROPOSALS_SCHEMA
    + SQLITE_WEBHOOK_SCHEMA
)
"""Every table and index of the file, as ``;``-separated statements (run on each open)."""
DERIVED_OBJECTS = frozenset({*_DERIVED_TABLES, "sig_streams", "entries_agent"})
"""What ``rebuild`` drops and recreates: the derived tables (with any index or trigger on them)
and the one derived index on a ledger table."""


class SqliteStore(RelationalStore[sqlite3.Connection]):
    """One SQLite file holding the ledger, bodies and derived tables: the shared relational store
    over three parts with state of their own — the file's connection and transactions
    (:class:`SqliteFile`), the in-process indexes (:class:`SqliteIndexes`) and ``recall``'s pool
    of read-only connections (:class:`SqliteRecall`)."""

    D = SQLITE

    def __init__(
        self, path: str | Path, dim: int, *, verify: bool = True, check_derived: bool = True
    ) -> None:
        """Open (creating or migrating) the file, compare its schema with this version's and,
        with ``verify``, verify every chain. ``check_derived=False``: the caller recreates the
        derived tables next (or reads only the ledger), so only the ledger's own tables must have
        the expected schema."""
        self._file = SqliteFile(path)
        self.path = self._file.path
        self.dim = dim
        self._indexes = SqliteIndexes(self._file, dim)
        self._recall_sql = SqliteRecall(self.path)
        with self._file.translate("open"), self._write() as conn:
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            found = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if found is not None and int(found[0]) > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {found[0]}, newer than this Mentis "
                    f"({SCHEMA_VERSION}); upgrade Mentis"
                )
            if found is not None and int(found[0]) < 7:
                self._add_checks(conn)
            if found is not None and int(found[0]) == 1:
                self._migrate_lexicon(conn)
            if found is not None and int(found[0]) < 3:
                self._migrate_titles(conn)
            if found is not None and int(found[0]) < 4:
                self._migrate_windows(conn)
            if found is not None and int(found[0]) < 5:
                log.info("migrating %s to schema 5 (entry ids)", self.path)
                fill_entry_ids(conn)
            if found is not None and int(found[0]) < 6:
                self._migrate_instructions(conn)
            if found is not None and int(found[0]) < 7:
                self._fill_checks(conn)
            if found is not None and int(found[0]) < 10:
                self._migrate_scopes(conn)
            conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            differences = sqlite_differences(
                conn, SCHEMA + ";" + SQLITE_TOKEN_TABLE, DERIVED_OBJECTS, {"tokens"}
            )
            if not check_derived:
                differences = [d for d in differences if not d.derived]
            if differences:
                raise schema_error(self.path, differences, REBUILD)
            if conn.execute("SELECT 1 FROM meta WHERE key='derived_epoch'").fetchone() is None:
                _new_epoch(conn)
        self.damaged = {}
        if verify:
            try:
                self.verify_chains()
            except BaseException:
                self.close()
                raise

    @staticmethod
    def _migrate_scopes(conn: sqlite3.Connection) -> None:
        """Schema 9 → 10: each attempt's and thought's scope key (private scopes, issue 26). Every
        record written before it is its repository's, so its key is the repository."""
        for table in ("attempt_idx", "thought_idx"):
            columns = {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}
            if "scope" not in columns:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN scope TEXT NOT NULL DEFAULT ''")
            conn.execute(f"UPDATE {table} SET scope = repository WHERE scope = ''")
            conn.execute(
                "INSERT OR IGNORE INTO scope_keys(scope, repository) "
                f"SELECT DISTINCT scope, repository FROM {table}"
            )

    def _migrate_lexicon(self, conn: sqlite3.Connection) -> None:
        """Schema 1 → 2: index every live attempt and thought in the lexical tables, drop FTS5."""
        log.info("migrating %s to schema 2 (lexical index)", self.path)
        self._index_all(conn)
        conn.execute("DROP TABLE IF EXISTS attempt_fts")
        conn.execute("DROP TABLE IF EXISTS thought_fts")
        _new_epoch(conn)

    def _migrate_titles(self, conn: sqlite3.Connection) -> None:
        """Schema 2 → 3: index every live attempt's task title in ``title_terms``."""
        log.info("migrating %s to schema 3 (title index)", self.path)
        self._index_titles(conn)
        _new_epoch(conn)

    def _migrate_windows(self, conn: sqlite3.Connection) -> None:
        """Schema 3 → 4: index every live thought's causal window in ``window_terms``."""
        log.info("migrating %s to schema 4 (conversational windows)", self.path)
        self._index_windows(conn)
        _new_epoch(conn)

    def _migrate_instructions(self, conn: sqlite3.Connection) -> None:
        """Schema 5 → 6: key revocations on instructions (``skill_instructions``,
        ``skill_revoked_instructions``) for the skills already stored."""
        log.info("migrating %s to schema 6 (skill revocations keyed on instructions)", self.path)
        self._index_instructions(conn)

    @staticmethod
    def _add_checks(conn: sqlite3.Connection) -> None:
        """Schema 6 → 7, first half (before the older migrations, which write these tables): the
        ``chk`` column of each vector, lexical and vocabulary row (``derived_check``)."""
        for table in (*VECTORS, *TERMS, "lex_vocab"):
            columns = {str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")}
            if "chk" not in columns:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN chk INTEGER NOT NULL DEFAULT 0")

    def _fill_checks(self, conn: sqlite3.Connection) -> None:
        """Schema 6 → 7, second half: the checksum of every row already there, a chunk at a time."""
        log.info("migrating %s to schema 7 (checksums of the derived index rows)", self.path)
        jobs: list[tuple[str, str, str, Callable[..., int]]] = [
            *((t, "rowid", "rowid, repository, vec", vector_check) for t in VECTORS),
            *((t, "rowid", "rowid, repository, len, terms", terms_check) for t in TERMS),
            ("lex_vocab", "id", "id, term", vocab_check),
        ]
        for table, key, columns, check in jobs:
            last = -(2**63)
            while rows := conn.execute(
                f"SELECT {columns} FROM {table} WHERE {key} > ? ORDER BY {key} LIMIT 8192", (last,)
            ).fetchall():
                conn.executemany(
                    f"UPDATE {table} SET chk=? WHERE {key}=?", [(check(*row), row[0]) for row in rows]
                )
                last = rows[-1][0]

    # ------------------------------------------------------------ verification

    def verify(self, signatures: bool = False) -> list[ChainReport]:
        """Verify every chain. A large store is scanned by several processes (``sqlite_verify``);
        a small one, or one where they find anything amiss, in one pass in rowid order that names
        the first failing entry (chains interleave; seqs ascend in each). ``signatures``: verify
        every signature too (in the one pass)."""
        with self._read() as conn:
            heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
            fast = None if signatures else parallel_verify(conn, self.path, heads, _LEDGER_SCHEMA)
            if fast is not None:
                return fast
            return one_pass(conn, heads, signatures=signatures)

    def _verify_skipping(self, skip: frozenset[str], signatures: bool) -> list[ChainReport]:
        """:meth:`verify`, leaving out the chains in ``skip`` (in one pass)."""
        if not skip:
            return self.verify(signatures)
        with self._read() as conn:
            heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
            return one_pass(conn, heads, signatures=signatures, skip=skip)

    # ------------------------------------------------------------ transactions

    def _read(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._file.read()

    def _write(self, *chains: str, commit: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        """One IMMEDIATE transaction: the write lock of the whole file, so of every one of ``chains``."""
        return self._file.write(commit)

    def _peek(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._file.peek()

    def _scan(self, conn: sqlite3.Connection, sql: str, name: str) -> Iterable[Sequence[Any]]:
        """The rows of a large SELECT (read whole: SQLite reads them from the local file)."""
        return conn.execute(sql).fetchall()

    def _registry_lock(self, conn: sqlite3.Connection, exclusive: bool) -> None:
        """Nothing to add: ``BEGIN IMMEDIATE`` already orders every write to the file."""

    def _lock_ledger(self, conn: sqlite3.Connection) -> None:
        """Nothing to add: ``BEGIN IMMEDIATE`` already holds the whole file."""

    # ------------------------------------------------------------ the in-process indexes

    def _index_terms(
        self,
        conn: sqlite3.Connection,
        table: str,
        rowid: int,
        repository: str,
        fields: Sequence[str],
        weights: Sequence[float],
    ) -> None:
        self._indexes.index_terms(conn, table, rowid, repository, fields, weights)

    def _unindex_terms(self, conn: sqlite3.Connection, table: str, rowid: int) -> None:
        self._indexes.unindex_terms(conn, table, rowid)

    def _lexical(
        self, table: str, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self._indexes.lexical(table, terms, repositories, limit)

    def _vector(
        self, table: str, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self._indexes.vector(table, query, repositories, limit)

    def _removing(self, conn: sqlite3.Connection, kind: str, rowid: int | None) -> None:
        self._indexes.removing(conn, kind, rowid)

    def _rekeyed(self, conn: sqlite3.Connection) -> None:
        _new_epoch(conn)

    def _after_forget(self) -> None:
        self._file.erase_on_disk()

    def _after_rebuild(self) -> None:
        self._indexes.after_rebuild()

    def warm(self) -> None:
        self._indexes.warm()

    @property
    def reloads(self) -> int:
        """Full reloads of this process's in-process indexes (a rebuild, reindex or migration)."""
        return self._indexes.reloads

    # ------------------------------------------------------------ reads, import, rebuild

    def _task_rows(
        self, conn: sqlite3.Connection, keys: Sequence[tuple[str, str]]
    ) -> Iterator[tuple[str, str, int | None, int]]:
        for repo, task in keys:
            row = conn.execute(
                "SELECT title_rowid, (SELECT count(*) FROM attempt_idx a "
                "WHERE a.repository = t.repository AND a.task_id = t.task_id) "
                "FROM task_idx t WHERE repository=? AND task_id=?",
                (repo, task),
            ).fetchone()
            if row is not None:
                yield repo, task, row[0], int(row[1])

    def _verify_within(self, conn: sqlite3.Connection) -> None:
        heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
        one_pass(conn, heads, skip=frozenset(self.damaged))

    def _reset_derived(self, conn: sqlite3.Connection) -> None:
        """Drop every derived table (and ``sig_streams``, refilled by the rebuild, and the derived
        index on ``entries``) and create it again, empty, under a new epoch: whatever was changed
        in their schema goes with them."""
        for table in (*_DERIVED_TABLES, "sig_streams"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute("DROP INDEX IF EXISTS entries_agent")
        for stmt in (_DERIVED_SCHEMA + THOUGHT_SCHEMA + LEXICON_SCHEMA).split(";"):
            if stmt.strip():
                conn.execute(stmt)
        _new_epoch(conn)

    # ------------------------------------------------------------ recall, size, close

    def _recall(self, sql: str, params: SqlParams | None, bounds: RecallBounds) -> SqlResult:
        return self._recall_sql.run(sql, params, bounds)

    def size_bytes(self) -> int:
        """Bytes on disk: the SQLite file and its write-ahead log."""
        paths = (Path(self.path), Path(self.path + "-wal"))
        return sum(p.stat().st_size for p in paths if p.exists())

    def close(self) -> None:
        self._recall_sql.close()
        self._indexes.close()
        self._file.close()
