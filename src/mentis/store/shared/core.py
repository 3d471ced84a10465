"""The relational core both backends share: the ledger appends, the attempt tables derived from
them, and the reads over both, written once against a :class:`~mentis.store.shared.dialect.Dialect`.

A backend mixes this in (with :class:`~mentis.store.shared.thoughts.ThoughtCore`) and supplies
its own transactions (``_read``, ``_write(*chains)``, ``_peek``), schema, verification, recall
views and index hooks: ``_index_terms``/``_unindex_terms`` (the lexical rows), ``_lexical`` and
``_vector`` (candidate search), ``_removing`` (tell in-process indexes a row went),
``_after_forget``, ``_scan`` (stream a large SELECT), ``_task_rows``, ``_terms_batch`` (lexical rows
written together; a no-op by default), and the import/rebuild hooks
``_lock_ledger``, ``_verify_within``, ``_reset_derived`` and ``_after_rebuild``.

Tables (the same names and columns on both backends): ``entries`` (the ledger, never updated),
``bodies`` (canonical JSON of each entry's body; forgetting deletes one), ``heads`` (each
chain's last seq and hash) and derived tables rebuilt from the ledger: ``attempt_idx`` (keys
only), ``correction_idx``, ``task_idx``, ``forgotten``, ``attempt_label``, ``vectors`` and the
lexical rows. Everything a read returns is parsed from a body whose hash is checked as it is read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import orjson

from mentis.errors import Conflict, IntegrityError, InvalidInput, NotFound
from mentis.ledger import signing
from mentis.ledger.bodies import AttemptBody, CorrectionBody, ThoughtBody, tombstone
from mentis.ledger.chain import (
    ChainReport,
    Entry,
    canonical,
    chain_refused,
    entry_hash,
    isolate,
    sha256_hex,
)
from mentis.ledger.chain import (
    seal as seal_entry,
)
from mentis.ledger.fingerprint import fingerprint
from mentis.store.protocol import AttemptRow, Embed, SqlResult, replay
from mentis.store.seal import Seal
from mentis.store.shared.agents import AgentCore
from mentis.store.shared.derived_check import pg_vector_check, vector_check
from mentis.store.shared.dialect import Dialect, as_array
from mentis.store.shared.entry_ids import check_import_ids, claim_id, fill_entry_ids
from mentis.store.shared.recall_limits import RecallBounds

log = logging.getLogger(__name__)

ENTRY_COLS = "e.v, e.chain, e.seq, e.kind, e.id, e.at, e.agent, e.prev, e.body_hash, e.key_id, e.sig, e.hash"
"""A ledger entry's columns, in :class:`~mentis.ledger.chain.Entry` order (see :func:`entry_of`)."""
LABEL_FANOUT = 200
ATTEMPT_KEYS = ("attempt_id", "repository", "task_id", "action", "observation")
"""Body keys every stored attempt has (the derived tables and the lexical index read them)."""


def entry_of(row: Sequence[Any]) -> Entry:
    """An Entry from the 12 ENTRY_COLS values."""
    return Entry(
        v=row[0],
        chain=row[1],
        seq=row[2],
        kind=row[3],
        id=row[4],
        at=row[5],
        agent=row[6],
        prev=row[7],
        body_hash=row[8],
        key_id=row[9],
        sig=row[10],
        hash=row[11],
    )


def derived_mismatch(rowid: int) -> IntegrityError:
    return IntegrityError(
        f"a derived index row (entry rowid {rowid}) disagrees with the ledger; run "
        "`mentis verify-integrity`, then `mentis rebuild` to regenerate the indexes from the ledger"
    )


def checked_body(rowid: int, raw: bytes, body_hash: str) -> bytes:
    """``raw``, the body of ledger entry ``rowid``, if it still matches the hash its entry holds
    (what a migration or a derived row reads a body through)."""
    if sha256_hex(raw) != body_hash:
        raise IntegrityError(
            f"the body of ledger entry rowid {rowid} does not match its hash; run `mentis verify`"
        )
    return raw


def check_list(values: Sequence[str], what: str) -> None:
    """Refuse one string where a list of strings belongs (a str is a Sequence[str] of its letters)."""
    if isinstance(values, str):
        raise TypeError(f"{what} must be a list, not one string")


class RelationalCore(AgentCore):
    """Ledger appends, attempt derivation and attempt reads (``self`` is the store)."""

    D: ClassVar[Dialect]
    dim: int
    damaged: dict[str, IntegrityError]
    """Each chain that did not verify when the store opened (or at the last ``verify_chains``),
    with its failure: its reads and writes are refused, the other chains are served."""

    if TYPE_CHECKING:  # each backend defines these (see the module docstring)

        def _read(self) -> Any: ...
        def _write(self, *chains: str, commit: bool = True) -> Any: ...
        def _peek(self) -> Any: ...
        def _scan(self, conn: Any, sql: str, name: str) -> Iterable[Sequence[Any]]: ...
        def _index_terms(
            self,
            conn: Any,
            table: str,
            rowid: int,
            repository: str,
            fields: Sequence[str],
            weights: Sequence[float],
        ) -> None: ...
        def _unindex_terms(self, conn: Any, table: str, rowid: int) -> None: ...
        def _lexical(
            self, table: str, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
        ) -> list[tuple[int, float]]: ...
        def _vector(
            self, table: str, query: np.ndarray, repositories: Sequence[str] | None, limit: int
        ) -> list[tuple[int, float]]: ...
        def _removing(self, conn: Any, kind: str, rowid: int | None) -> None: ...
        def _after_forget(self) -> None: ...
        def _task_rows(
            self, conn: Any, keys: Sequence[tuple[str, str]]
        ) -> Iterable[tuple[str, str, int | None, int]]: ...
        def _verify_skipping(self, skip: frozenset[str], signatures: bool) -> list[ChainReport]: ...
        def _lock_ledger(self, conn: Any) -> None: ...
        def _verify_within(self, conn: Any) -> None: ...
        def _reset_derived(self, conn: Any) -> None: ...
        def _after_rebuild(self) -> None: ...
        def _recall(self, sql: str, params: dict[str, Any] | None, bounds: RecallBounds) -> SqlResult: ...
        def _derive_thought(
            self, conn: Any, rowid: int, thought: ThoughtBody, vector: np.ndarray
        ) -> None: ...
        def _derive_forget_thought(self, conn: Any, tomb_rowid: int, tomb: dict[str, Any]) -> None: ...
        def _derive_forget_skill(self, conn: Any, tomb_rowid: int, tomb: dict[str, Any]) -> None: ...
        def _derive_skill_status(self, conn: Any, rowid: int, body: dict[str, Any]) -> None: ...
        def _skill_replayer(self, conn: Any, embed: Embed) -> Callable[[int, dict[str, Any]], None]: ...
        def _add_rejection(
            self, conn: Any, by_rowid: int, by_id: str, repo: str, target: str, kind: str, at: str,
            norm_hash: str, blob: bytes,
        ) -> None: ...  # fmt: skip

    # ------------------------------------------------------------ ledger

    def verify_chains(self, signatures: bool = False) -> list[ChainReport]:
        """Verify every chain, each on its own (:func:`mentis.ledger.chain.isolate`): the reports of the
        chains that verify; each one that does not is noted in ``damaged`` (from then on its reads
        and writes are refused) and logged. Raises when the store as a whole does not verify."""
        reports, damaged = isolate(lambda skip: self._verify_skipping(skip, signatures))
        self.damaged = damaged
        for cause in damaged.values():
            log.warning("%s", chain_refused(cause))
        return reports

    def get_meta(self, key: str) -> str | None:
        with self._peek() as conn:
            row = conn.execute(self.D.q("SELECT value FROM meta WHERE key=?"), (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute(
                self.D.q(
                    "INSERT INTO meta(key, value) VALUES(?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value"
                ),
                (key, value),
            )

    def _append(
        self, conn: Any, seal: Seal, chain: str, kind: str, id_: str, at: str, agent: str, body: bytes
    ) -> tuple[int | None, Entry]:
        """Append at the chain's head; the caller's write transaction holds the chain's lock.

        The entry is signed as ``seal`` says (:meth:`Seal.signature`), refused
        (:meth:`AgentCore._enforce`) when the agent registry does not allow it, and inserted;
        returns its rowid (for the caller to derive its rows) and the entry. A seal that does not
        commit stops at the entry: nothing is inserted, the rowid is None (and the caller's
        transaction rolls back)."""
        if chain in self.damaged:
            raise chain_refused(self.damaged[chain])
        head = conn.execute(self.D.q("SELECT seq, hash FROM heads WHERE chain=?"), (chain,)).fetchone()
        seq, prev = (0, "") if head is None else (head[0] + 1, head[1])
        fields = signing.Unsigned(chain, kind, id_, at, agent, sha256_hex(body))
        key_id, sig = seal.signature(fields, body)
        entry = seal_entry(**fields._asdict(), seq=seq, prev=prev, key_id=key_id, sig=sig)
        if not seal.commit:
            return None, entry
        self._enforce(conn, fields, key_id, sig)
        return self._insert(conn, entry, body), entry

    def _insert(self, conn: Any, e: Entry, body: bytes | None) -> int:
        """Write entry ``e`` (and its body), after claiming its id in ``entry_ids``: a Conflict,
        and nothing written, when any entry of the ledger ever had that id (see ``claim_id``)."""
        claim_id(self.D, conn, e)
        ((rowid,),) = conn.execute(
            self.D.q(
                "INSERT INTO entries(v, chain, seq, kind, id, at, agent, prev, body_hash, key_id, sig, hash) "
                "VALUES(?,?,?,?,?,?,?,?,?,?,?,?) RETURNING rowid"
            ),
            (e.v, e.chain, e.seq, e.kind, e.id, e.at, e.agent, e.prev, e.body_hash, e.key_id, e.sig, e.hash),
        ).fetchall()
        if body is not None:
            conn.execute(self.D.q("INSERT INTO bodies(rowid, body) VALUES(?, ?)"), (rowid, body))
        conn.execute(
            self.D.q(
                "INSERT INTO heads(chain, seq, hash) VALUES(?,?,?) "
                "ON CONFLICT(chain) DO UPDATE SET seq = excluded.seq, hash = excluded.hash"
            ),
            (e.chain, e.seq, e.hash),
        )
        return int(rowid)

    def _load(self, conn: Any, rowids: Sequence[int], kind: str) -> dict[int, tuple[Entry, dict[str, Any]]]:
        """Entries and parsed bodies for ``rowids``, each body checked against its entry's hash."""
        out: dict[int, tuple[Entry, dict[str, Any]]] = {}
        for chunk in self.D.chunks(rowids):
            cond, args = self.D.in_("e.rowid", chunk)
            for row in conn.execute(
                self.D.q(
                    f"SELECT e.rowid, {ENTRY_COLS}, b.body FROM entries e JOIN bodies b ON b.rowid = e.rowid "
                    f"WHERE {cond}"
                ),
                args,
            ):
                raw = bytes(row[-1])
                e = entry_of(row[1:13])
                if entry_hash(e.document()) != e.hash or sha256_hex(raw) != e.body_hash or e.kind != kind:
                    raise IntegrityError(
                        f"ledger does not verify: chain {e.chain!r} seq {e.seq}: entry or body changed "
                        "while the store was open; run `mentis verify-integrity`",
                        chain=e.chain,
                        seq=e.seq,
                    )
                out[int(row[0])] = (e, orjson.loads(raw))
        return out

    def counts(self) -> dict[str, int]:
        with self._read() as conn:
            out = {}
            for key, table in (("entries", "entries"), ("attempts", "attempt_idx"), ("chains", "heads")):
                row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                out[key] = int(row[0]) if row else 0
            return out

    def ledger_summary(self) -> list[tuple[str, str, int, str]]:
        """``(chain, kind, entries, newest at)`` for every chain and entry kind: keys only, no content."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT chain, kind, count(*), max({self.D.bytewise('at')}) FROM entries "
                "GROUP BY chain, kind ORDER BY chain, kind"
            ).fetchall()
        return [
            (str(c), str(k), int(n), str(at))
            for c, k, n, at in rows
            if not str(c).startswith(signing.RESERVED_PREFIX)
        ]

    def run_sql(
        self,
        sql: str,
        params: dict[str, Any] | None,
        *,
        visible: Callable[[str], bool],
        max_rows: int,
        max_bytes: int,
        timeout_s: float,
    ) -> SqlResult:
        """Run one read-only ``recall`` statement over the documented views, as the caller sees
        them (``visible``), within the row, byte and time limits."""
        return self._recall(sql, params, RecallBounds(visible, max_rows, max_bytes, timeout_s))

    def repositories(self) -> list[str]:
        with self._peek() as conn:
            chains = [str(c) for (c,) in conn.execute("SELECT chain FROM heads ORDER BY chain")]
        return [c for c in chains if not c.startswith(signing.RESERVED_PREFIX)]

    # ------------------------------------------------------------ attempt writes

    def _check_vector(self, what: str, vector: np.ndarray) -> None:
        """A record's vector is ``dim`` finite numbers (InvalidInput naming ``what`` otherwise)."""
        vector = np.asarray(vector)
        if vector.shape != (self.dim,) or not np.isfinite(vector).all():
            raise InvalidInput(
                f"{what}: its vector must be {self.dim} finite numbers (got shape {vector.shape})"
            )

    def append_attempt(self, body: AttemptBody, vector: np.ndarray, seal: Seal) -> Entry:
        return self.append_attempts([AttemptRow(body, vector)], seal)[0]

    def append_attempts(self, rows: Sequence[AttemptRow], seal: Seal) -> list[Entry]:
        """Append attempts in order in one write transaction (each entry is its body's attempt
        id, repository, agent and time): every vector is checked first, and a failure at any row
        writes nothing."""
        for row in rows:
            self._check_vector(f"attempt {row.body.attempt_id}", row.vector)
        entries: list[Entry] = []
        if not rows:
            return entries
        with (
            self._write(*{row.body.repository for row in rows}, commit=seal.commit) as conn,
            self.D.pipelined(conn),
            self._terms_batch(conn),
        ):
            for body, vector in rows:
                raw = canonical(body.to_json())
                rowid, entry = self._append(
                    conn,
                    seal,
                    body.repository,
                    "attempt",
                    body.attempt_id,
                    body.created_at,
                    body.agent_id,
                    raw,
                )
                if rowid is not None:
                    self._derive_attempt(conn, rowid, body, vector)
                entries.append(entry)
        return entries

    def append_correction(
        self, body: CorrectionBody, conclusion: np.ndarray, seal: Seal
    ) -> tuple[Entry, int]:
        """Append a correction (its entry id is the seal's); ``conclusion`` is the vector of the
        attempt's rejected conclusion. Returns the entry and the attempt's count of corrections."""
        chain, doc = body.repository, body.to_json()
        with self._write(chain, commit=seal.commit) as conn:
            attempt_rowid = self._live_attempt_rowid(conn, chain, body.attempt_id)
            rowid, entry = self._append(
                conn, seal, chain, "correction", seal.record_id(), body.at, body.agent_id, canonical(doc)
            )
            if rowid is not None:
                self._derive_correction(conn, rowid, attempt_rowid, doc, conclusion)
            row = conn.execute(
                self.D.q("SELECT count(*) FROM correction_idx WHERE attempt_rowid=?"), (attempt_rowid,)
            ).fetchone()
        return entry, int(row[0]) if row else 0

    def forget_attempt(
        self, chain: str, attempt_id: str, reason: str | None, agent: str, seal: Seal
    ) -> Entry:
        """Erase an attempt's body and its corrections'; the chain keeps a tombstone (the seal's
        id and time) listing their seqs."""
        q = self.D.q
        at = seal.time()
        with self._write(chain, commit=seal.commit) as conn:
            rowid = self._live_attempt_rowid(conn, chain, attempt_id)
            erased = [rowid] + [
                int(r)
                for (r,) in conn.execute(
                    q("SELECT rowid FROM correction_idx WHERE attempt_rowid=?"), (rowid,)
                )
            ]
            cond, args = self.D.in_("rowid", erased)
            seqs = sorted(int(s) for (s,) in conn.execute(q(f"SELECT seq FROM entries WHERE {cond}"), args))
            found = conn.execute(q("SELECT task_id FROM attempt_idx WHERE rowid=?"), (rowid,)).fetchone()
            task_id = found[0] if found is not None else None
            body = tombstone("attempt", attempt_id, chain, seqs, reason, agent, at, task_id).to_json()
            tomb_rowid, entry = self._append(
                conn, seal, chain, "forget", seal.record_id(), at, agent, canonical(body)
            )
            if tomb_rowid is not None:
                self._derive_forget(conn, tomb_rowid, body)
        self._after_forget()
        return entry

    def _live_attempt_rowid(self, conn: Any, chain: str, attempt_id: str) -> int:
        q = self.D.q
        row = conn.execute(
            q("SELECT rowid FROM attempt_idx WHERE attempt_id=? AND repository=?"), (attempt_id, chain)
        ).fetchone()
        if row is not None:
            return int(row[0])
        gone = conn.execute(
            q("SELECT 1 FROM forgotten WHERE attempt_id=? AND repository=?"), (attempt_id, chain)
        ).fetchone()
        if gone is not None:
            raise Conflict(f"attempt {attempt_id} in {chain} was forgotten; its content is erased")
        raise NotFound(f"no attempt {attempt_id} in repository {chain}; search or recall to find its id")

    # ------------------------------------------------------------ derivation (live and rebuild)

    def _derive_attempt(self, conn: Any, rowid: int, attempt: AttemptBody, vector: np.ndarray) -> None:
        q = self.D.q
        repo, task = attempt.repository, attempt.task_id
        conn.execute(
            q("INSERT INTO attempt_idx(rowid, attempt_id, repository, task_id, status) VALUES(?,?,?,?,?)"),
            (rowid, attempt.attempt_id, repo, task, attempt.status),
        )
        self._index_record(conn, "attempt_terms", rowid, attempt)
        self._index_title(conn, rowid, attempt)
        self._insert_vector(conn, "vectors", rowid, repo, vector)
        labels = [(rowid, kind, label) for kind, label in attempt.labels]
        self.D.many(conn, "INSERT INTO attempt_label(rowid, kind, label) VALUES(?,?,?)", labels)
        conn.execute(
            q(
                "INSERT INTO task_idx(repository, task_id, title_rowid) VALUES(?,?,?) "
                "ON CONFLICT(repository, task_id) DO UPDATE SET "
                "title_rowid = coalesce(excluded.title_rowid, task_idx.title_rowid)"
            ),
            (repo, task, rowid if attempt.task_title else None),
        )

    def _insert_vector(self, conn: Any, table: str, rowid: int, repository: str, vector: np.ndarray) -> None:
        """One record's vector row, with its checksum (``derived_check``)."""
        array = as_array(vector)
        if self.D.postgres:
            chk = pg_vector_check(rowid, repository, array)
        else:
            chk = vector_check(rowid, repository, array.tobytes())
        conn.execute(
            self.D.q(f"INSERT INTO {table}(rowid, repository, vec, chk) VALUES(?,?,?,?)"),
            (rowid, repository, self.D.vector(array), chk),
        )

    def _terms_batch(self, conn: Any) -> AbstractContextManager[None]:
        """A block whose lexical rows a backend may write together when it ends (PostgreSQL:
        ``PgLexicon._terms_batch``); here, each is written when indexed."""
        return nullcontext()

    def _index_record(self, conn: Any, table: str, rowid: int, record: AttemptBody | ThoughtBody) -> None:
        """One attempt's (``attempt_terms``) or thought's (``thought_terms``) lexical row."""
        self._index_terms(conn, table, rowid, record.repository, *record.index_fields)

    def _index_title(self, conn: Any, rowid: int, attempt: AttemptBody) -> None:
        """An attempt's ``task_title`` alone, as its row in ``title_terms`` (none without a title)."""
        if attempt.task_title:
            self._index_terms(conn, "title_terms", rowid, attempt.repository, (attempt.task_title,), (1.0,))

    def _index_titles(self, conn: Any) -> int:
        """Index the title of every live attempt that has no ``title_terms`` row yet (the
        migration that adds the table), from bodies checked against their ledger entries;
        returns the number of attempts read."""
        rows = conn.execute(
            "SELECT a.rowid, b.body, e.body_hash FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
            "JOIN entries e ON e.rowid = a.rowid "
            "WHERE NOT EXISTS (SELECT 1 FROM title_terms t WHERE t.rowid = a.rowid) ORDER BY a.rowid"
        ).fetchall()
        with self._terms_batch(conn):
            for rowid, raw, body_hash in rows:
                body = checked_body(int(rowid), bytes(raw), body_hash)
                self._index_title(conn, int(rowid), AttemptBody.parse(body))
        return len(rows)

    def _index_all(self, conn: Any) -> int:
        """Index every live attempt and thought (the migration to lexical rows); returns the count."""
        done = 0
        for table, idx in (("attempt_terms", "attempt_idx"), ("thought_terms", "thought_idx")):
            rows = conn.execute(
                f"SELECT i.rowid, b.body FROM {idx} i JOIN bodies b ON b.rowid = i.rowid ORDER BY i.rowid"
            ).fetchall()
            with self._terms_batch(conn):
                for rowid, raw in rows:
                    kind = AttemptBody if table == "attempt_terms" else ThoughtBody
                    self._index_record(conn, table, int(rowid), kind.parse(raw))
            done += len(rows)
        return done

    def _derive_correction(
        self, conn: Any, rowid: int, attempt_rowid: int, body: dict[str, Any], conclusion: np.ndarray
    ) -> None:
        q = self.D.q
        conn.execute(
            q("INSERT INTO correction_idx(rowid, attempt_rowid) VALUES(?,?)"), (rowid, attempt_rowid)
        )
        row = conn.execute(q("SELECT body FROM bodies WHERE rowid=?"), (attempt_rowid,)).fetchone()
        norm = fingerprint(AttemptBody.parse(row[0]).conclusion)
        blob = np.ascontiguousarray(conclusion, dtype=np.float32).tobytes()
        aid, repo = body["attempt_id"], body["repository"]
        self._add_rejection(conn, rowid, aid, repo, aid, "attempt", body["at"], norm, blob)

    def _derive_forget(self, conn: Any, tomb_rowid: int, tomb: dict[str, Any]) -> None:
        if "skill_id" in tomb:
            self._derive_forget_skill(conn, tomb_rowid, tomb)
            return
        if "thought_id" in tomb:
            self._removing(conn, "thought", None)
            self._derive_forget_thought(conn, tomb_rowid, tomb)
            return
        q = self.D.q
        attempt_id, repo = tomb["attempt_id"], tomb["repository"]
        conn.execute(
            q(
                "INSERT INTO forgotten(attempt_id, repository, tomb_rowid) VALUES(?,?,?) "
                "ON CONFLICT(attempt_id) DO UPDATE SET repository = excluded.repository, "
                "tomb_rowid = excluded.tomb_rowid"
            ),
            (attempt_id, repo, tomb_rowid),
        )
        row = conn.execute(
            q("SELECT rowid, task_id FROM attempt_idx WHERE attempt_id=? AND repository=?"),
            (attempt_id, repo),
        ).fetchone()
        if row is None:
            return
        rowid, task_id = int(row[0]), str(row[1])
        self._removing(conn, "attempt", rowid)
        corr = [
            int(r)
            for (r,) in conn.execute(q("SELECT rowid FROM correction_idx WHERE attempt_rowid=?"), (rowid,))
        ]
        cond, args = self.D.in_("rowid", [rowid, *corr])
        conn.execute(q(f"DELETE FROM bodies WHERE {cond}"), args)
        self._unindex_terms(conn, "attempt_terms", rowid)
        self._unindex_terms(conn, "title_terms", rowid)
        conn.execute(q("DELETE FROM correction_idx WHERE attempt_rowid=?"), (rowid,))
        conn.execute(q("DELETE FROM rejections WHERE target_kind='attempt' AND target_id=?"), (attempt_id,))
        for table in ("vectors", "attempt_label", "attempt_idx"):
            conn.execute(q(f"DELETE FROM {table} WHERE rowid=?"), (rowid,))
        self._retitle(conn, repo, task_id)

    def _retitle(self, conn: Any, repo: str, task_id: str) -> None:
        """After a forget: the task's title comes from its newest titled attempt left; a task
        with no attempt left goes."""
        q = self.D.q
        titled = conn.execute(
            q(
                f"SELECT count(*), max(a.rowid) FILTER (WHERE {self.D.json_text('b.body', 'task_title')} "
                "IS NOT NULL) FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
                "WHERE a.repository=? AND a.task_id=?"
            ),
            (repo, task_id),
        ).fetchone()
        if not titled[0]:
            conn.execute(q("DELETE FROM task_idx WHERE repository=? AND task_id=?"), (repo, task_id))
            return
        conn.execute(
            q("UPDATE task_idx SET title_rowid=? WHERE repository=? AND task_id=?"),
            (titled[1], repo, task_id),
        )

    # ------------------------------------------------------------ export, import, rebuild

    def iter_ledger(self) -> Iterator[tuple[Entry, bytes | None]]:
        with self._read() as conn:
            sql = (
                f"SELECT {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid "
                "ORDER BY e.rowid"
            )
            rows = [
                (entry_of(r), None if r[12] is None else bytes(r[12]))
                for r in self._scan(conn, sql, "export")
            ]
        yield from rows

    def import_ledger(self, items: Sequence[tuple[Entry, bytes | None]], embed: Embed) -> int:
        """Append chains that this store does not hold yet, in one transaction that commits only
        once the whole ledger, old and new entries together, verifies (DESIGN §4)."""
        q = self.D.q
        chains = sorted({e.chain for e, _ in items})
        with self._write(*chains) as conn:
            self._lock_ledger(conn)
            for chunk in self.D.chunks(chains):
                cond, args = self.D.in_("chain", chunk)
                held = conn.execute(q(f"SELECT chain FROM heads WHERE {cond} LIMIT 1"), args).fetchone()
                if held is not None:
                    raise Conflict(f"this store already holds chain {held[0]!r}; import into a fresh store")
            check_import_ids(self.D, conn, items)
            placed = [(self._insert(conn, e, body), e, body) for e, body in items]
            self._replay(conn, placed, embed, None)
            self._rebuild_sig_streams(conn)
            self._verify_within(conn)
        return len(placed)

    def rebuild(self, embed: Embed, progress: Callable[[int], None] | None = None) -> int:
        """Empty every derived table and regenerate it from the ledger, in one transaction (the
        entries of a damaged chain derive nothing)."""
        with self._write() as conn:
            self._reset_derived(conn)
            fill_entry_ids(conn)
            rows = conn.execute(
                f"SELECT e.rowid, {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b "
                "ON b.rowid = e.rowid ORDER BY e.rowid"
            ).fetchall()
            placed = [
                (int(r[0]), entry_of(r[1:13]), None if r[13] is None else bytes(r[13]))
                for r in rows
                if r[2] not in self.damaged  # a damaged chain derives nothing: it is not read
            ]
            self._replay(conn, placed, embed, progress)
            self._rebuild_sig_streams(conn)
        self._after_rebuild()
        return len(placed)

    def _replay(
        self,
        conn: Any,
        placed: Sequence[tuple[int, Entry, bytes | None]],
        embed: Embed,
        progress: Callable[[int], None] | None,
    ) -> None:
        """Derive tables for entries in ledger order (see :func:`mentis.store.protocol.replay`)."""

        def correction(rowid: int, body: dict[str, Any]) -> None:
            arow = conn.execute(
                self.D.q(
                    "SELECT a.rowid, b.body FROM attempt_idx a JOIN bodies b ON b.rowid = a.rowid "
                    "WHERE a.attempt_id=? AND a.repository=?"
                ),
                (body["attempt_id"], body["repository"]),
            ).fetchone()
            if arow is not None:
                vec = embed([AttemptBody.parse(arow[1]).conclusion])[0]
                self._derive_correction(conn, rowid, int(arow[0]), body, vec)

        replay(
            placed,
            embed,
            progress,
            attempt=lambda rowid, body, vec: self._derive_attempt(conn, rowid, body, vec),
            thought=lambda rowid, body, vec: self._derive_thought(conn, rowid, body, vec),
            correction=correction,
            forget=lambda rowid, body: self._derive_forget(conn, rowid, body),
            skill=self._skill_replayer(conn, embed),
            skill_status=lambda rowid, body: self._derive_skill_status(conn, rowid, body),
        )


__all__ = ["ENTRY_COLS", "LABEL_FANOUT", "RelationalCore", "derived_mismatch", "entry_of"]
