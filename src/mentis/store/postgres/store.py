"""The team store: one PostgreSQL database (``MENTIS_DATABASE_URL=postgresql://…``) with the same
ledger rows, canonical bodies and derived tables as the SQLite store, so export, import and
``mentis migrate`` keep every hash.

- psycopg 3 with a connection pool; the schema is versioned (:data:`~mentis.store.postgres.schema.MIGRATIONS`)
  and brought up to date on open, under an advisory lock.
- Every append runs in one transaction that first takes
  ``pg_advisory_xact_lock(LOCK_CLASS, hashtext(chain))``: writers to one repository serialise
  on its head, writers to different repositories never wait on each other.
- The SQL both backends share (every append, derivation and read) is
  :class:`~mentis.store.shared.relational.RelationalStore`'s; this module adds the migrations,
  verification and the hooks of :class:`~mentis.store.shared.backend.Backend`.
- Lexical search: BM25 exactly as the SQLite store computes it, from the same analysed rows,
  in an in-process index that follows every process's writes (:mod:`~mentis.store.postgres.lexicon`);
  vectors: pgvector with an HNSW (cosine) index, or an exact scan of a small scope
  (:mod:`~mentis.store.postgres.vectors`).
- Reads return content only from bodies checked against their entry's ``body_hash``; open
  verifies every chain (streamed through a server-side cursor) and refuses a store that fails.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import orjson

from mentis.errors import StoreError
from mentis.ledger.chain import ChainReport, verify_rows
from mentis.store.postgres.connection import MIGRATION_LOCK, Conn, PgPool
from mentis.store.postgres.lexicon import PgLexicon, new_lex_epoch
from mentis.store.postgres.recall import PostgresRecall
from mentis.store.postgres.schema import (
    CHECKS_VERSION,
    DERIVED_TABLES,
    ENTRY_IDS_VERSION,
    INSTRUCTIONS_VERSION,
    LEXICON_VERSION,
    MIGRATIONS,
    RECALL_SCHEMA,
    SCHEMA_VERSION,
    TITLES_VERSION,
    WINDOWS_VERSION,
    fill_checks,
)
from mentis.store.postgres.vectors import hnsw_index, nearest
from mentis.store.protocol import SqlParams, SqlResult
from mentis.store.shared.core import ENTRY_COLS, hash_lookup
from mentis.store.shared.dialect import POSTGRES
from mentis.store.shared.entry_ids import fill_entry_ids
from mentis.store.shared.orphans import check_orphans
from mentis.store.shared.recall_limits import RecallBounds
from mentis.store.shared.relational import RelationalStore
from mentis.store.shared.schema_check import (
    LEDGER_TABLES,
    MIGRATE,
    PG_DESCRIBE,
    compare,
    pg_objects,
    schema_error,
)
from mentis.store.shared.webhooks import WEBHOOK_TABLES

log = logging.getLogger(__name__)

SCHEMA_OBJECTS = {
    "tables": sorted(
        {*LEDGER_TABLES, *DERIVED_TABLES, *WEBHOOK_TABLES, "sig_streams", "recall_scope", "tokens"}
    ),
    "views": RECALL_SCHEMA,
    "functions": ["mentis_checked_body", "mentis_visible"],
}
"""What :data:`~mentis.store.shared.schema_check.PG_DESCRIBE` describes."""

_VERIFY_BATCH = 5_000
REGISTRY_LOCK = 0x6D656E7469730001
"""Advisory lock key ordering agent registry writes against other appends
(:mod:`mentis.store.shared.agents`)."""


class PostgresStore(RelationalStore[Conn]):
    """One PostgreSQL database holding the ledger, bodies and derived tables: the shared
    relational store over three parts with state of their own — the connection pool and its
    transactions (:class:`PgPool`), the in-process lexical indexes (:class:`PgLexicon`) and
    ``recall`` (:class:`PostgresRecall`); vectors are searched by the server."""

    D = POSTGRES

    def __init__(self, url: str, dim: int, *, verify: bool = True, check_derived: bool = True) -> None:
        """Open the database (migrating it), compare its schema with the one recorded when it was
        last migrated and, with ``verify``, verify every chain; ``check_derived=False``: the
        caller recreates the derived tables next or reads only the ledger, so only the ledger's
        own tables must be as recorded."""
        self._pool = PgPool(url)
        self.url = url
        self.path = self._pool.path
        self.dim = dim
        self._lexicon = PgLexicon(self._pool)
        self._recall_sql = PostgresRecall(self._pool)
        self._check_derived = check_derived
        self.damaged = {}
        try:
            self._migrate()
            self._pool.open()
            if verify:
                self.verify_chains()
        except BaseException:
            self.close()
            raise

    def _migrate(self) -> None:
        with self._pool.bootstrap() as conn:
            conn.execute("BEGIN")
            try:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
                conn.execute("CREATE TABLE IF NOT EXISTS meta(key text PRIMARY KEY, value text NOT NULL)")
                row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
                found = 0 if row is None else int(row[0])
                if found > SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.path} has schema version {found}, newer than this Mentis "
                        f"({SCHEMA_VERSION}); upgrade Mentis"
                    )
                schema = conn.execute("SELECT quote_ident(current_schema())").fetchone()
                assert schema is not None
                migrated = False
                for version, sql in MIGRATIONS:
                    if version <= found:
                        continue
                    migrated = True
                    log.info("applying schema migration %d to %s", version, self.path)
                    conn.execute(sql.replace("{dim}", str(self.dim)).replace("{schema}", schema[0]))
                    if version == LEXICON_VERSION:
                        log.info("indexed %d records for lexical search", self._index_all(conn))
                        new_lex_epoch(conn)
                    if version == TITLES_VERSION:
                        log.info("indexed the titles of %d attempts", self._index_titles(conn))
                        new_lex_epoch(conn)
                    if version == WINDOWS_VERSION:
                        log.info("indexed %d conversational windows", self._index_windows(conn))
                        new_lex_epoch(conn)
                    if version == ENTRY_IDS_VERSION:
                        log.info("noted the ids of %d ledger entries", fill_entry_ids(conn))
                    if version == INSTRUCTIONS_VERSION:
                        log.info(
                            "keyed %d skill versions on their instructions", self._index_instructions(conn)
                        )
                    if version == CHECKS_VERSION:
                        log.info("computed %d checksums of derived index rows", fill_checks(conn))
                    conn.execute(
                        "INSERT INTO meta(key, value) VALUES('schema_version', %s), ('vector_dim', %s) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (str(version), str(self.dim)),
                    )
                self._check_schema(conn, record=migrated)
                ver = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
                self._iterative = ver is not None and tuple(int(x) for x in ver[0].split(".")[:2]) >= (0, 8)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _check_schema(self, conn: Conn, *, record: bool) -> None:
        """Compare the schema with the description recorded when the migrations last ran (or
        record it: ``record``, or a database migrated before descriptions were kept)."""
        found = pg_objects(conn.execute(PG_DESCRIBE, SCHEMA_OBJECTS).fetchall())
        row = conn.execute("SELECT value FROM meta WHERE key='schema_description'").fetchone()
        if record or row is None:
            self._record_schema(conn, found)
            return
        expected = {name: (str(table), str(text)) for name, (table, text) in orjson.loads(row[0]).items()}
        derived = {table for table, _ in [*found.values(), *expected.values()]} - LEDGER_TABLES
        differences = compare(found, expected, derived)
        if not self._check_derived:
            differences = [d for d in differences if not d.derived]
        if differences:
            raise schema_error(self.path, differences, MIGRATE)

    @staticmethod
    def _record_schema(conn: Conn, found: dict[str, tuple[str, str]] | None = None) -> None:
        if found is None:
            found = pg_objects(conn.execute(PG_DESCRIBE, SCHEMA_OBJECTS).fetchall())
        conn.execute(
            "INSERT INTO meta(key, value) VALUES('schema_description', %s) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (orjson.dumps(found, option=orjson.OPT_SORT_KEYS).decode(),),
        )

    # ------------------------------------------------------------ verification

    def verify(self, signatures: bool = False) -> list[ChainReport]:
        """Verify every chain in ledger (rowid) order; ``signatures``: every signature too."""
        with self._read() as conn:
            return self._verify_in(conn, signatures)

    def _verify_skipping(self, skip: frozenset[str], signatures: bool) -> list[ChainReport]:
        """:meth:`verify`, leaving out the chains in ``skip``."""
        with self._read() as conn:
            return self._verify_in(conn, signatures, skip)

    def _verify_in(
        self, conn: Conn, signatures: bool = False, skip: frozenset[str] = frozenset()
    ) -> list[ChainReport]:
        """Verify the ledger as ``conn``'s transaction sees it (a read, or an import's write),
        leaving out the chains in ``skip``."""
        heads = {c: (int(s), h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
        sql = (
            f"SELECT {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b "
            "ON b.rowid = e.rowid ORDER BY e.rowid"
        )
        rows = ((*r[:12], None if r[12] is None else bytes(r[12])) for r in self._scan(conn, sql, "verify"))
        reports = verify_rows(
            rows, heads, signatures=signatures, skip=skip, hash_at=hash_lookup(self.D, conn)
        )
        check_orphans(conn, skip)
        return reports

    # ------------------------------------------------------------ transactions

    def _read(self) -> AbstractContextManager[Conn]:
        return self._pool.read()

    def _write(self, *chains: str, commit: bool = True) -> AbstractContextManager[Conn]:
        return self._pool.write(*chains, commit=commit)

    def _peek(self) -> AbstractContextManager[Conn]:
        return self._pool.read()

    def _scan(self, conn: Conn, sql: str, name: str) -> Iterator[Sequence[Any]]:
        """The rows of a large SELECT, streamed through a server-side cursor."""
        with conn.cursor(name=f"mentis_{name}") as cur:
            cur.itersize = _VERIFY_BATCH
            cur.execute(sql)
            yield from cur

    # ------------------------------------------------------------ the lexical index, vectors

    def _index_terms(
        self,
        conn: Conn,
        table: str,
        rowid: int,
        repository: str,
        fields: Sequence[str],
        weights: Sequence[float],
    ) -> None:
        self._lexicon.index_terms(conn, table, rowid, repository, fields, weights)

    def _terms_batch(self, conn: Conn) -> AbstractContextManager[None]:
        return self._lexicon.terms_batch(conn)

    def _unindex_terms(self, conn: Conn, table: str, rowid: int) -> None:
        self._lexicon.unindex_terms(conn, table, rowid)

    def _lexical(
        self, table: str, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self._lexicon.lexical(table, terms, repositories, limit)

    def warm(self) -> None:
        self._lexicon.warm()

    @property
    def reloads(self) -> int:
        """Full loads of this process's in-process lexical indexes (the first, then after a rebuild)."""
        return self._lexicon.reloads

    def _removing(self, conn: Conn, kind: str, rowid: int | None) -> None:
        """Nothing to log: the server holds the vector index, and ``_unindex_terms`` logs the
        lexical rows it removes."""

    def _rekeyed(self, conn: Conn) -> None:
        """The server holds the vectors; the lexical epoch tells every process to reload."""
        new_lex_epoch(conn)

    def _after_forget(self) -> None:
        """Nothing to erase outside the transaction (the server's storage is its own)."""

    def _after_rebuild(self) -> None:
        """Nothing to reload here: the lexical epoch tells every process."""

    def _task_rows(
        self, conn: Conn, keys: Sequence[tuple[str, str]]
    ) -> Iterable[tuple[str, str, int | None, int]]:
        return conn.execute(
            "SELECT t.repository, t.task_id, t.title_rowid, (SELECT count(*) FROM attempt_idx a "
            "WHERE a.repository = t.repository AND a.task_id = t.task_id) "
            "FROM task_idx t JOIN unnest(%s::text[], %s::text[]) k(r, t) "
            "ON t.repository = k.r AND t.task_id = k.t",
            ([k[0] for k in keys], [k[1] for k in keys]),
        ).fetchall()

    def _registry_lock(self, conn: Conn, exclusive: bool) -> None:
        """A registry write excludes every other append for its transaction (and they share)."""
        fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
        conn.execute(f"SELECT {fn}(%s)", (REGISTRY_LOCK,))

    def _lock_ledger(self, conn: Conn) -> None:
        """Hold off other appends (to any chain) while an import checks and writes."""
        conn.execute("LOCK TABLE entries IN SHARE ROW EXCLUSIVE MODE")

    def _verify_within(self, conn: Conn) -> None:
        self._verify_in(conn, skip=frozenset(self.damaged))

    def _reset_derived(self, conn: Conn) -> None:
        """Empty every derived table under a new lexical epoch, sized for this embedder."""
        self._lock_ledger(conn)
        conn.execute(f"TRUNCATE {', '.join(DERIVED_TABLES)} RESTART IDENTITY")
        new_lex_epoch(conn)
        self._resize_vectors(conn)

    def _vector(
        self, table: str, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        with self._read() as conn:
            return nearest(conn, table, query, repositories, limit, iterative=self._iterative)

    # ------------------------------------------------------------ recall, size, close

    def _recall(self, sql: str, params: SqlParams | None, bounds: RecallBounds) -> SqlResult:
        return self._recall_sql.run(sql, params, bounds)

    def size_bytes(self) -> int:
        """Bytes the database takes on the server (``pg_database_size``)."""
        with self._read() as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._pool.close()

    def _resize_vectors(self, conn: Conn) -> None:
        """After a model change (``reindex``), give the emptied vector columns this embedder's size."""
        row = conn.execute("SELECT value FROM meta WHERE key='vector_dim'").fetchone()
        if row is not None and int(row[0]) == self.dim:
            return
        for table in ("vectors", "thought_vectors", "skill_vectors"):
            conn.execute(f"DROP INDEX IF EXISTS {table}_hnsw")
            conn.execute(f"ALTER TABLE {table} ALTER COLUMN vec TYPE vector({int(self.dim)})")
            conn.execute(hnsw_index(table, self.dim))
        conn.execute(
            "INSERT INTO meta(key, value) VALUES('vector_dim', %s) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (str(self.dim),),
        )
        self._record_schema(conn)  # the vector columns changed type
