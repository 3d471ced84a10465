"""The team store: one PostgreSQL database (``MENTIS_DATABASE_URL=postgresql://…``) with the same
ledger rows, canonical bodies and derived tables as the SQLite store, so export, import and
``mentis migrate`` keep every hash.

- psycopg 3 with a connection pool; the schema is versioned (``postgres_schema.MIGRATIONS``)
  and brought up to date on open, under an advisory lock.
- Every append runs in one transaction that first takes
  ``pg_advisory_xact_lock(LOCK_CLASS, hashtext(chain))``: writers to one repository serialise
  on its head, writers to different repositories never wait on each other.
- Lexical search: BM25 exactly as the SQLite store computes it, from the same analysed rows,
  in an in-process index that follows every process's writes (``postgres_lexicon``); vectors:
  pgvector with an HNSW (cosine) index.
- Reads return content only from bodies checked against their entry's ``body_hash``; open
  verifies every chain (streamed through a server-side cursor) and refuses a store that fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import orjson

from mentis.errors import Conflict, IntegrityError, NotFound, StoreError
from mentis.ledger import ChainReport, Entry, canonical, verify_rows
from mentis.store.base import AttemptRow, Embed, StoredAttempt, forget_body, replay
from mentis.store.browse import BrowseReads
from mentis.store.ledger_scan import RECORD_ID
from mentis.store.postgres_base import ENTRY_COLS, MIGRATION_LOCK, Conn, entry_of, scope_sql, vec
from mentis.store.postgres_lexicon import new_lex_epoch
from mentis.store.postgres_schema import DERIVED_TABLES, LEXICON_VERSION, MIGRATIONS, SCHEMA_VERSION
from mentis.store.postgres_sql import RecallSql
from mentis.store.postgres_thoughts import ThoughtTables
from mentis.texts import attempt_conclusion, fingerprint

log = logging.getLogger(__name__)

LABEL_FANOUT = 200
_VERIFY_BATCH = 5_000


def _derived_mismatch(rowid: int) -> IntegrityError:
    return IntegrityError(
        f"a derived index row (entry rowid {rowid}) disagrees with the ledger; run `mentis verify`, "
        "then `mentis rebuild` to regenerate the indexes from the ledger"
    )


def _status(body: dict[str, Any]) -> str:
    check = body.get("check")
    return str(check["status"]) if check else "unverified"


class PostgresStore(ThoughtTables, RecallSql, BrowseReads):
    """One PostgreSQL database holding the ledger, bodies and derived tables."""

    _param = "%s"

    def __init__(self, url: str, dim: int, *, verify: bool = True) -> None:
        super().__init__(url, dim)
        try:
            self._migrate()
            self._open_pool()
            if verify:
                self.verify()
        except BaseException:
            self.close()
            raise

    def _migrate(self) -> None:
        with self._bootstrap() as conn:
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
                for version, sql in MIGRATIONS:
                    if version <= found:
                        continue
                    log.info("applying schema migration %d to %s", version, self.path)
                    conn.execute(sql.replace("{dim}", str(self.dim)).replace("{schema}", schema[0]))
                    if version == LEXICON_VERSION:
                        log.info("indexed %d records for lexical search", self._index_existing(conn))
                    conn.execute(
                        "INSERT INTO meta(key, value) VALUES('schema_version', %s), ('vector_dim', %s) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (str(version), str(self.dim)),
                    )
                ver = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
                self._iterative = ver is not None and tuple(int(x) for x in ver[0].split(".")[:2]) >= (0, 8)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def counts(self) -> dict[str, int]:
        with self._read() as conn:
            out = {}
            for key, table in (("entries", "entries"), ("attempts", "attempt_idx"), ("chains", "heads")):
                row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                out[key] = int(row[0]) if row else 0
            return out

    # ------------------------------------------------------------ verification

    def verify(self) -> list[ChainReport]:
        with self._read() as conn:
            return self._verify_in(conn)

    @staticmethod
    def _verify_in(conn: Conn) -> list[ChainReport]:
        """Verify the ledger as ``conn``'s transaction sees it (a read, or an import's write)."""
        heads = {c: (int(s), h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
        with conn.cursor(name="mentis_verify") as cur:
            cur.itersize = _VERIFY_BATCH
            cur.execute(
                f"SELECT {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b "
                "ON b.rowid = e.rowid ORDER BY e.chain, e.seq"
            )
            rows = ((*r[:12], None if r[12] is None else bytes(r[12])) for r in cur)
            reports = verify_rows(rows, heads)
        orphans = conn.execute(
            "SELECT b.rowid FROM bodies b LEFT JOIN entries e ON e.rowid = b.rowid "
            "WHERE e.rowid IS NULL LIMIT 1"
        ).fetchone()
        if orphans is not None:
            raise IntegrityError(
                f"ledger does not verify: body row {orphans[0]} belongs to no entry. "
                "The store was changed outside Mentis; restore it from a backup or an export."
            )
        return reports

    # ------------------------------------------------------------ writes

    def append_attempt(
        self, chain: str, attempt_id: str, at: str, agent: str, body: dict[str, Any], vector: np.ndarray
    ) -> Entry:
        raw = canonical(body)
        with self._write(chain) as conn:
            rowid, entry = self._append(conn, chain, "attempt", attempt_id, at, agent, raw)
            self._derive_attempt(conn, rowid, body, vector)
        return entry

    def append_attempts(self, rows: Sequence[AttemptRow]) -> list[Entry]:
        """Pipelined (psycopg pipeline mode): fewer round trips, the same statements."""
        entries = []
        with self._write(*(r.repository for r in rows)) as conn, conn.pipeline():
            for r in rows:
                raw = canonical(r.body)
                rowid, entry = self._append(conn, r.repository, "attempt", r.attempt_id, r.at, r.agent, raw)
                self._derive_attempt(conn, rowid, r.body, r.vector)
                entries.append(entry)
        return entries

    def append_correction(
        self,
        chain: str,
        correction_id: str,
        at: str,
        agent: str,
        body: dict[str, Any],
        conclusion: np.ndarray,
    ) -> tuple[Entry, int]:
        """Append a correction; ``conclusion`` is the vector of the attempt's rejected conclusion."""
        raw = canonical(body)
        with self._write(chain) as conn:
            attempt_rowid = self._live_attempt_rowid(conn, chain, body["attempt_id"])
            rowid, entry = self._append(conn, chain, "correction", correction_id, at, agent, raw)
            self._derive_correction(conn, rowid, attempt_rowid, body, conclusion)
            row = conn.execute(
                "SELECT count(*) FROM correction_idx WHERE attempt_rowid=%s", (attempt_rowid,)
            ).fetchone()
        return entry, int(row[0]) if row else 0

    def forget_attempt(
        self, chain: str, tombstone_id: str, at: str, agent: str, attempt_id: str, reason: str | None
    ) -> Entry:
        with self._write(chain) as conn:
            rowid = self._live_attempt_rowid(conn, chain, attempt_id)
            erased = [rowid] + [
                r
                for (r,) in conn.execute("SELECT rowid FROM correction_idx WHERE attempt_rowid=%s", (rowid,))
            ]
            seqs = sorted(
                int(s) for (s,) in conn.execute("SELECT seq FROM entries WHERE rowid = ANY(%s)", (erased,))
            )
            found = conn.execute("SELECT task_id FROM attempt_idx WHERE rowid=%s", (rowid,)).fetchone()
            task_id = found[0] if found is not None else None
            body = forget_body("attempt_id", attempt_id, chain, seqs, reason, agent, at, task_id=task_id)
            tomb_rowid, entry = self._append(conn, chain, "forget", tombstone_id, at, agent, canonical(body))
            self._derive_forget(conn, tomb_rowid, body)
        return entry

    def _live_attempt_rowid(self, conn: Conn, chain: str, attempt_id: str) -> int:
        row = conn.execute(
            "SELECT rowid FROM attempt_idx WHERE attempt_id=%s AND repository=%s", (attempt_id, chain)
        ).fetchone()
        if row is not None:
            return int(row[0])
        gone = conn.execute(
            "SELECT 1 FROM forgotten WHERE attempt_id=%s AND repository=%s", (attempt_id, chain)
        ).fetchone()
        if gone is not None:
            raise Conflict(f"attempt {attempt_id} in {chain} was forgotten; its content is erased")
        raise NotFound(f"no attempt {attempt_id} in repository {chain}; search or recall to find its id")

    # ------------------------------------------------------------ derivation (live and rebuild)

    def _derive_attempt(self, conn: Conn, rowid: int, body: dict[str, Any], vector: np.ndarray) -> None:
        repo, task = body["repository"], body["task_id"]
        conn.execute(
            "INSERT INTO attempt_idx(rowid, attempt_id, repository, task_id, status) VALUES(%s,%s,%s,%s,%s)",
            (rowid, body["attempt_id"], repo, task, _status(body)),
        )
        self._index_attempt(conn, rowid, body)
        conn.execute(
            "INSERT INTO vectors(rowid, repository, vec) VALUES(%s,%s,%s)", (rowid, repo, vec(vector))
        )
        labels = [(rowid, "file", f) for f in body.get("files", [])]
        labels += [(rowid, "tag", t) for t in body.get("tags", [])]
        if labels:
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO attempt_label(rowid, kind, label) VALUES(%s,%s,%s)", labels)
        title_rowid = rowid if body.get("task_title") else None
        conn.execute(
            "INSERT INTO task_idx(repository, task_id, title_rowid) VALUES(%s,%s,%s) "
            "ON CONFLICT(repository, task_id) DO UPDATE SET "
            "title_rowid = coalesce(excluded.title_rowid, task_idx.title_rowid)",
            (repo, task, title_rowid),
        )

    def _derive_correction(
        self, conn: Conn, rowid: int, attempt_rowid: int, body: dict[str, Any], conclusion: np.ndarray
    ) -> None:
        conn.execute("INSERT INTO correction_idx(rowid, attempt_rowid) VALUES(%s,%s)", (rowid, attempt_rowid))
        row = conn.execute("SELECT body FROM bodies WHERE rowid=%s", (attempt_rowid,)).fetchone()
        assert row is not None
        norm = fingerprint(attempt_conclusion(orjson.loads(bytes(row[0]))))
        blob = vec(conclusion).tobytes()
        self._add_rejection(
            conn,
            rowid,
            body["attempt_id"],
            body["repository"],
            body["attempt_id"],
            "attempt",
            body["at"],
            norm,
            blob,
        )

    def attempt_conclusion_text(self, repository: str, attempt_id: str) -> str | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT rowid FROM attempt_idx WHERE attempt_id=%s AND repository=%s",
                (attempt_id, repository),
            ).fetchone()
            if row is None:
                return None
            loaded = self._load(conn, [int(row[0])], "attempt")
        return attempt_conclusion(loaded[int(row[0])][1])

    def _derive_forget(self, conn: Conn, tomb_rowid: int, tomb: dict[str, Any]) -> None:
        if "thought_id" in tomb:
            self._derive_forget_thought(conn, tomb_rowid, tomb)
            return
        attempt_id, repo = tomb["attempt_id"], tomb["repository"]
        conn.execute(
            "INSERT INTO forgotten(attempt_id, repository, tomb_rowid) VALUES(%s,%s,%s) "
            "ON CONFLICT(attempt_id) DO UPDATE SET repository = excluded.repository, "
            "tomb_rowid = excluded.tomb_rowid",
            (attempt_id, repo, tomb_rowid),
        )
        row = conn.execute(
            "SELECT rowid, task_id FROM attempt_idx WHERE attempt_id=%s AND repository=%s", (attempt_id, repo)
        ).fetchone()
        if row is None:
            return
        rowid, task_id = int(row[0]), str(row[1])
        corr = [
            r for (r,) in conn.execute("SELECT rowid FROM correction_idx WHERE attempt_rowid=%s", (rowid,))
        ]
        conn.execute("DELETE FROM bodies WHERE rowid = ANY(%s)", ([rowid, *corr],))
        self._unindex_terms(conn, "attempt_terms", rowid)
        conn.execute("DELETE FROM correction_idx WHERE attempt_rowid=%s", (rowid,))
        conn.execute("DELETE FROM rejections WHERE target_kind='attempt' AND target_id=%s", (attempt_id,))
        conn.execute("DELETE FROM vectors WHERE rowid=%s", (rowid,))
        conn.execute("DELETE FROM attempt_label WHERE rowid=%s", (rowid,))
        conn.execute("DELETE FROM attempt_idx WHERE rowid=%s", (rowid,))
        self._retitle(conn, repo, task_id)

    @staticmethod
    def _retitle(conn: Conn, repo: str, task_id: str) -> None:
        titled = conn.execute(
            "SELECT count(*), max(a.rowid) FILTER (WHERE convert_from(b.body, 'UTF8')::json->>'task_title' "
            "IS NOT NULL) FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
            "WHERE a.repository=%s AND a.task_id=%s",
            (repo, task_id),
        ).fetchone()
        assert titled is not None
        if not titled[0]:
            conn.execute("DELETE FROM task_idx WHERE repository=%s AND task_id=%s", (repo, task_id))
            return
        conn.execute(
            "UPDATE task_idx SET title_rowid=%s WHERE repository=%s AND task_id=%s",
            (titled[1], repo, task_id),
        )

    # ------------------------------------------------------------ reads

    def attempt_keys(self, rowids: Sequence[int]) -> dict[int, tuple[str, str, str]]:
        """(repository, task_id, attempt_id) of live attempts among ``rowids``."""
        out: dict[int, tuple[str, str, str]] = {}
        if not rowids:
            return out
        with self._read() as conn:
            for r, repo, task, aid, e_chain, e_id, e_kind in conn.execute(
                "SELECT a.rowid, a.repository, a.task_id, a.attempt_id, e.chain, e.id, e.kind "
                "FROM attempt_idx a JOIN entries e ON e.rowid = a.rowid WHERE a.rowid = ANY(%s)",
                (list(rowids),),
            ):
                if (e_chain, e_id, e_kind) != (repo, aid, "attempt"):
                    raise _derived_mismatch(r)
                out[int(r)] = (repo, task, aid)
        return out

    def attempt_edges(
        self, seeds: Sequence[int], repositories: Sequence[str] | None, per_seed: int
    ) -> list[tuple[int, int, float]]:
        """Links from each seed to attempts of ``repositories`` (None: all): same task (1.0), each
        shared file (0.5) or tag (0.25).

        Labels held by more than ``LABEL_FANOUT`` of those attempts link nothing (as in the SQLite
        store).
        """
        edges: list[tuple[int, int, float]] = []
        repo_sql, count_join, repo_args = scope_sql(repositories, "attempt_idx")
        with self._read() as conn:
            for seed in seeds:
                for (other,) in conn.execute(
                    "SELECT b.rowid FROM attempt_idx a JOIN attempt_idx b ON b.repository = a.repository "
                    "AND b.task_id = a.task_id AND b.rowid != a.rowid WHERE a.rowid = %s "
                    "ORDER BY b.rowid LIMIT %s",
                    (seed, per_seed),
                ):
                    edges.append((seed, int(other), 1.0))
                for other, weight in conn.execute(
                    "SELECT l2.rowid, sum(CASE l1.kind WHEN 'file' THEN 0.5 ELSE 0.25 END) AS w "
                    "FROM attempt_label l1 JOIN attempt_label l2 ON l2.kind = l1.kind "
                    "AND l2.label = l1.label AND l2.rowid != l1.rowid "
                    "JOIN attempt_idx b ON b.rowid = l2.rowid "
                    f"WHERE l1.rowid = %s {repo_sql} AND (SELECT count(*) FROM "
                    f"(SELECT 1 FROM attempt_label x {count_join}"
                    "WHERE x.kind = l1.kind AND x.label = l1.label LIMIT %s + 1) capped) <= %s "
                    "GROUP BY l2.rowid ORDER BY w DESC, l2.rowid LIMIT %s",
                    (seed, *repo_args, *repo_args, LABEL_FANOUT, LABEL_FANOUT, per_seed),
                ):
                    edges.append((seed, int(other), float(weight)))
        return edges

    def lexical(self, match: str, repositories: Sequence[str] | None, limit: int) -> list[tuple[int, float]]:
        return self.lexical_search("attempt_terms", match, repositories, limit)

    def vector(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self._vector("vectors", query, repositories, limit)

    def _vector(
        self, table: str, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        q = vec(query)
        repo_sql = "WHERE repository = ANY(%s) " if repositories is not None else ""
        args: list[Any] = [q, *([list(repositories)] if repositories is not None else []), q, limit]
        with self._read() as conn:
            conn.execute(f"SET LOCAL hnsw.ef_search = {min(max(limit, 40), 1000)}")
            if self._iterative:
                conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            # ORDER BY the distance alone, so the HNSW index serves it; ties are ordered outside
            rows = conn.execute(
                f"SELECT rowid, s FROM (SELECT rowid, 1 - (vec <=> %s) AS s FROM {table} {repo_sql}"
                "ORDER BY vec <=> %s LIMIT %s) nearest ORDER BY s DESC, rowid",
                args,
            ).fetchall()
        return [(int(r), float(s)) for r, s in rows]

    def load_attempts(self, rowids: Sequence[int]) -> dict[int, StoredAttempt]:
        with self._read() as conn:
            return self._attempts(conn, rowids)

    def _attempts(self, conn: Conn, rowids: Sequence[int]) -> dict[int, StoredAttempt]:
        loaded = self._load(conn, rowids, "attempt")
        corr_of: dict[int, list[int]] = {}
        for crow, arow in conn.execute(
            "SELECT rowid, attempt_rowid FROM correction_idx WHERE attempt_rowid = ANY(%s) ORDER BY rowid",
            (list(rowids),),
        ):
            corr_of.setdefault(int(arow), []).append(int(crow))
        corr_bodies = self._load(conn, [c for cs in corr_of.values() for c in cs], "correction")
        keys: dict[int, tuple[str, str, str]] = {
            int(r): (repo, task, aid)
            for r, repo, task, aid in conn.execute(
                "SELECT rowid, repository, task_id, attempt_id FROM attempt_idx WHERE rowid = ANY(%s)",
                (list(loaded),),
            )
        }
        out: dict[int, StoredAttempt] = {}
        for rowid, (entry, body) in loaded.items():
            if body.get("attempt_id") != entry.id or body.get("repository") != entry.chain:
                raise IntegrityError(
                    f"attempt body at chain {entry.chain!r} seq {entry.seq} does not match its entry",
                    chain=entry.chain,
                    seq=entry.seq,
                )
            if keys.get(rowid) != (body["repository"], body["task_id"], body["attempt_id"]):
                raise _derived_mismatch(rowid)
            corrections = [corr_bodies[c][1] for c in corr_of.get(rowid, [])]
            if any(c["attempt_id"] != entry.id or c["repository"] != entry.chain for c in corrections):
                raise _derived_mismatch(rowid)
            out[rowid] = StoredAttempt(rowid=rowid, entry=entry, body=body, corrections=corrections)
        return out

    def find_attempt(self, attempt_id: str) -> tuple[str, bool] | None:
        """(repository, forgotten) for an attempt id, or None when unknown."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT repository FROM attempt_idx WHERE attempt_id=%s", (attempt_id,)
            ).fetchone()
            if row is not None:
                return str(row[0]), False
            row = conn.execute(
                "SELECT repository FROM forgotten WHERE attempt_id=%s", (attempt_id,)
            ).fetchone()
            return None if row is None else (str(row[0]), True)

    def task_info(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], tuple[str | None, int]]:
        """(title, attempt_count) per (repository, task_id)."""
        out: dict[tuple[str, str], tuple[str | None, int]] = {}
        if not keys:
            return out
        with self._read() as conn:
            title_rows: dict[int, tuple[str, str]] = {}
            for repo, task, title_rowid, count in conn.execute(
                "SELECT t.repository, t.task_id, t.title_rowid, (SELECT count(*) FROM attempt_idx a "
                "WHERE a.repository = t.repository AND a.task_id = t.task_id) "
                "FROM task_idx t JOIN unnest(%s::text[], %s::text[]) k(r, t) "
                "ON t.repository = k.r AND t.task_id = k.t",
                ([k[0] for k in keys], [k[1] for k in keys]),
            ):
                out[(repo, task)] = (None, int(count))
                if title_rowid is not None:
                    title_rows[int(title_rowid)] = (repo, task)
            for rowid, (_, body) in self._load(conn, list(title_rows), "attempt").items():
                key = title_rows[rowid]
                if (body["repository"], body["task_id"]) != key:
                    raise _derived_mismatch(rowid)
                out[key] = (body.get("task_title"), out[key][1])
        return out

    def task_history(self, repository: str, task_id: str) -> list[StoredAttempt]:
        with self._read() as conn:
            rowids = [
                int(r)
                for (r,) in conn.execute(
                    "SELECT rowid FROM attempt_idx WHERE repository=%s AND task_id=%s ORDER BY rowid",
                    (repository, task_id),
                )
            ]
            found = self._attempts(conn, rowids)
        return [found[r] for r in rowids]

    # ------------------------------------------------------------ export, import, rebuild

    def iter_ledger(self) -> Iterator[tuple[Entry, bytes | None]]:
        with self._read() as conn, conn.cursor(name="mentis_export") as cur:
            cur.itersize = _VERIFY_BATCH
            cur.execute(
                f"SELECT {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid "
                "ORDER BY e.rowid"
            )
            rows = [(entry_of(r), None if r[12] is None else bytes(r[12])) for r in cur]
        yield from rows

    def import_ledger(self, items: Sequence[tuple[Entry, bytes | None]], embed: Embed) -> int:
        """Append chains that this store does not hold yet, in one transaction that commits only
        once the whole ledger, old and new entries together, verifies (DESIGN §4)."""
        chains = sorted({e.chain for e, _ in items})
        with self._write(*chains) as conn:
            conn.execute("LOCK TABLE entries IN SHARE ROW EXCLUSIVE MODE")
            held = conn.execute("SELECT chain FROM heads WHERE chain = ANY(%s)", (chains,)).fetchone()
            if held is not None:
                raise Conflict(f"this store already holds chain {held[0]!r}; import into a fresh store")
            ids = [e.id for e, _ in items if e.kind in RECORD_ID]
            taken = conn.execute(
                "SELECT id, chain FROM entries WHERE id = ANY(%s) AND kind IN ('attempt', 'thought') LIMIT 1",
                (ids,),
            ).fetchone()
            if taken is not None:
                raise Conflict(
                    f"record {taken[0]} already exists in chain {taken[1]!r}; nothing was imported"
                )
            placed = [(self._insert(conn, e, body), e, body) for e, body in items]
            self._replay(conn, placed, embed, None)
            self._verify_in(conn)
        return len(placed)

    def rebuild(self, embed: Embed, progress: Callable[[int], None] | None = None) -> int:
        """Empty every derived table and regenerate it from the ledger, in one transaction."""
        with self._write() as conn:
            conn.execute("LOCK TABLE entries IN SHARE ROW EXCLUSIVE MODE")
            conn.execute(f"TRUNCATE {', '.join(DERIVED_TABLES)} RESTART IDENTITY")
            new_lex_epoch(conn)
            self._resize_vectors(conn)
            rows = conn.execute(
                f"SELECT e.rowid, {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b "
                "ON b.rowid = e.rowid ORDER BY e.rowid"
            ).fetchall()
            placed = [(int(r[0]), entry_of(r[1:13]), None if r[13] is None else bytes(r[13])) for r in rows]
            self._replay(conn, placed, embed, progress)
        return len(placed)

    def _resize_vectors(self, conn: Conn) -> None:
        """After a model change (``reindex``), give the emptied vector columns this embedder's size."""
        row = conn.execute("SELECT value FROM meta WHERE key='vector_dim'").fetchone()
        if row is not None and int(row[0]) == self.dim:
            return
        for table in ("vectors", "thought_vectors"):
            conn.execute(f"DROP INDEX IF EXISTS {table}_hnsw")
            conn.execute(f"ALTER TABLE {table} ALTER COLUMN vec TYPE vector({int(self.dim)})")
            conn.execute(f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (vec vector_cosine_ops)")
        conn.execute(
            "INSERT INTO meta(key, value) VALUES('vector_dim', %s) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (str(self.dim),),
        )

    def _replay(
        self,
        conn: Conn,
        placed: Sequence[tuple[int, Entry, bytes | None]],
        embed: Embed,
        progress: Callable[[int], None] | None,
    ) -> None:
        """Derive tables for entries in ledger order (see :func:`mentis.store.base.replay`)."""

        def correction(rowid: int, body: dict[str, Any]) -> None:
            arow = conn.execute(
                "SELECT a.rowid, b.body FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
                "WHERE a.attempt_id=%s AND a.repository=%s",
                (body["attempt_id"], body["repository"]),
            ).fetchone()
            if arow is not None:
                vec = embed([attempt_conclusion(orjson.loads(bytes(arow[1])))])[0]
                self._derive_correction(conn, rowid, int(arow[0]), body, vec)

        replay(
            placed,
            embed,
            progress,
            attempt=lambda rowid, body, vec: self._derive_attempt(conn, rowid, body, vec),
            thought=lambda rowid, body, vec: self._derive_thought(conn, rowid, body, vec),
            correction=correction,
            forget=lambda rowid, body: self._derive_forget(conn, rowid, body),
        )
