"""The ledger as tables, written once for both backends against the hooks of
:class:`~mentis.store.shared.backend.Backend`: appends, hash-checked loads, meta, counts.

Tables (the same names and columns on both backends): ``entries`` (the ledger, never updated),
``bodies`` (canonical JSON of each entry's body; forgetting deletes one), ``heads`` (each
chain's last seq and hash), ``entry_ids`` (every id an entry ever had) and ``meta``; the tables
derived from the ledger are written by the parts of the store built on this one — attempts
(:mod:`~mentis.store.shared.attempts`), thoughts, skills — and rebuilt from the ledger alone
(:mod:`~mentis.store.shared.relational`). Everything a read returns is parsed from a body whose
hash is checked as it is read (:meth:`LedgerCore._load`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from mentis.errors import IntegrityError, InvalidInput
from mentis.ledger import signing
from mentis.ledger.bodies import (
    AgentEventBody,
    AttemptBody,
    Body,
    CorrectionBody,
    EntityTypeBody,
    SkillStatusBody,
    SkillVersionBody,
    ThoughtBody,
    TombstoneBody,
    VisibilityBody,
)
from mentis.ledger.canonical import canonical, sha256_hex
from mentis.ledger.chain import ChainReport, HashAt, chain_refused, isolate
from mentis.ledger.entry import Entry, entry_hash
from mentis.ledger.entry import seal as seal_entry
from mentis.ledger.links import CHECKPOINTS_CHAIN
from mentis.ledger.registry import Registry
from mentis.store.protocol import BodyT, SqlParams, SqlResult, Stored
from mentis.store.seal import Seal
from mentis.store.shared.backend import Connection, ConnT
from mentis.store.shared.derived_check import pg_vector_check, vector_check
from mentis.store.shared.dialect import Dialect, as_array
from mentis.store.shared.entry_ids import claim_id
from mentis.store.shared.recall_limits import RecallBounds
from mentis.store.shared.webhooks import WebhookCore

log = logging.getLogger(__name__)

ENTRY_COLS = "e.v, e.chain, e.seq, e.kind, e.id, e.at, e.agent, e.prev, e.body_hash, e.key_id, e.sig, e.hash"
"""A ledger entry's columns, in :class:`~mentis.ledger.entry.Entry` order (see :func:`entry_of`)."""
ENTRY_KIND: dict[type[Body], str] = {
    AttemptBody: "attempt",
    CorrectionBody: "correction",
    ThoughtBody: "thought",
    TombstoneBody: "forget",
    VisibilityBody: "visibility",
    SkillVersionBody: "skill",
    SkillStatusBody: "skill_status",
    EntityTypeBody: "entity_type",
}
"""The kind of the entries whose bodies each body type reads."""


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


def checked_entry(row: Sequence[Any], kind: str | None = None) -> tuple[Entry, bytes]:
    """The Entry of the 12 ENTRY_COLS values and the body after them, both checked against the
    entry's hashes (and ``kind`` when given): IntegrityError naming chain and seq if either
    changed since the store was verified."""
    e, raw = entry_of(row[:12]), bytes(row[12])
    if entry_hash(e.document()) != e.hash or sha256_hex(raw) != e.body_hash or kind not in (None, e.kind):
        raise IntegrityError(
            f"ledger does not verify: chain {e.chain!r} seq {e.seq}: entry or body changed "
            "while the store was open; run `mentis verify-integrity`",
            chain=e.chain,
            seq=e.seq,
        )
    return e, raw


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


def hash_lookup(D: Dialect, conn: Connection) -> HashAt:
    """The :data:`~mentis.ledger.chain.HashAt` of the ledger as ``conn``'s transaction sees it (what
    verification checks fork points and merged heads against: the entries' hashes, each checked
    against its entry by the same pass)."""

    def hash_at(keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], str]:
        out: dict[tuple[str, int], str] = {}
        for chain, seq in keys:
            row = conn.execute(
                D.q("SELECT hash FROM entries WHERE chain=? AND seq=?"), (chain, seq)
            ).fetchone()
            if row is not None:
                out[chain, seq] = str(row[0])
        return out

    return hash_at


def check_list(values: Sequence[str], what: str) -> None:
    """Refuse one string where a list of strings belongs (a str is a Sequence[str] of its letters)."""
    if isinstance(values, str):
        raise TypeError(f"{what} must be a list, not one string")


class LedgerCore(WebhookCore[ConnT]):
    """Ledger appends and hash-checked loads, and what every part of the store shares (``self``
    is the store): a record's vector row, its lexical row, a rejection fingerprint."""

    def verify_chains(self, signatures: bool = False) -> list[ChainReport]:
        """Verify every chain, each on its own (:func:`mentis.ledger.chain.isolate`): the reports of the
        chains that verify; each one that does not is noted in ``damaged`` (from then on its reads
        and writes are refused) and logged. Raises when the store as a whole does not verify."""
        reports, damaged = isolate(lambda skip: self._verify_skipping(skip, signatures))
        self.damaged = damaged
        for cause in damaged.values():
            log.warning("%s", chain_refused(cause))
        if damaged:
            self.announce_damage(damaged)
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

    def _check_vector(self, what: str, vector: np.ndarray) -> None:
        """A record's vector is ``dim`` finite numbers (InvalidInput naming ``what`` otherwise)."""
        vector = np.asarray(vector)
        if vector.shape != (self.dim,) or not np.isfinite(vector).all():
            raise InvalidInput(
                f"{what}: its vector must be {self.dim} finite numbers (got shape {vector.shape})"
            )

    def _append(
        self, conn: ConnT, seal: Seal, chain: str, kind: str, id_: str, at: str, agent: str, body: bytes
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
        rowid = self._insert(conn, entry, body)
        self._announce(conn, entry, rowid, body)
        return rowid, entry

    def _insert(self, conn: ConnT, e: Entry, body: bytes | None) -> int:
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

    def _load(self, conn: ConnT, rowids: Sequence[int], body: type[BodyT]) -> dict[int, Stored[BodyT]]:
        """The entries among ``rowids`` that have a body (a forgotten record's has none) with the
        body parsed as ``body``, each entry and body checked against the hashes the entry holds
        and the entry of the kind ``body`` is (IntegrityError otherwise)."""
        kind = ENTRY_KIND[body]
        out: dict[int, Stored[BodyT]] = {}
        for chunk in self.D.chunks(rowids):
            cond, args = self.D.in_("e.rowid", chunk)
            for row in conn.execute(
                self.D.q(
                    f"SELECT e.rowid, {ENTRY_COLS}, b.body FROM entries e JOIN bodies b ON b.rowid = e.rowid "
                    f"WHERE {cond}"
                ),
                args,
            ):
                e, raw = checked_entry(row[1:], kind)
                out[int(row[0])] = Stored(e, body.parse(raw))
        return out

    def counts(self) -> dict[str, int]:
        with self._read() as conn:
            out = {}
            for key, table in (("entries", "entries"), ("attempts", "attempt_idx"), ("chains", "heads")):
                row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                out[key] = int(row[0]) if row else 0
            return out

    def ledger_summary(self, scopes: Sequence[str] | None = None) -> list[tuple[str, str, int, str]]:
        """``(chain, kind, entries, newest at)`` for every chain and entry kind: keys only, no
        content. With ``scopes`` (scope keys, repositories among them), only the entries of
        attempts and thoughts of those keys, of corrections of such attempts, and of no record
        (a forget, a skill, a publish) in a chain among them count."""
        where, args = "", list[Any]()
        if scopes is not None:
            check_list(scopes, "scopes")
            cond, args = self.D.in_("coalesce(a.scope, t.scope, ca.scope, e.chain)", list(scopes) or [""])
            where = (
                "LEFT JOIN attempt_idx a ON a.rowid = e.rowid LEFT JOIN thought_idx t ON t.rowid = e.rowid "
                "LEFT JOIN correction_idx c ON c.rowid = e.rowid "
                f"LEFT JOIN attempt_idx ca ON ca.rowid = c.attempt_rowid WHERE {cond} "
            )
        with self._read() as conn:
            rows = conn.execute(
                self.D.q(
                    f"SELECT e.chain, e.kind, count(*), max({self.D.bytewise('e.at')}) FROM entries e "
                    f"{where}GROUP BY e.chain, e.kind ORDER BY e.chain, e.kind"
                ),
                args,
            ).fetchall()
        return [
            (str(c), str(k), int(n), str(at))
            for c, k, n, at in rows
            if not str(c).startswith(signing.RESERVED_PREFIX)
        ]

    def run_sql(
        self,
        sql: str,
        params: SqlParams | None,
        *,
        visible: Callable[[str], bool],
        max_rows: int,
        max_bytes: int,
        timeout_s: float,
    ) -> SqlResult:
        """Run one read-only ``recall`` statement over the documented views, as the caller sees
        them (``visible``), within the row, byte and time limits."""
        return self._recall(sql, params, RecallBounds(visible, max_rows, max_bytes, timeout_s))

    def scopes(self, repository: str | None = None) -> list[str]:
        """The scope keys (``mentis.ledger.bodies.scope_key``) attempts and thoughts of
        ``repository`` (None: every repository) were written or published under, from
        ``scope_keys`` (a key whose records were all forgotten or published since stays: it holds
        no rows, so it changes no answer)."""
        where, args = ("WHERE repository = ?", (repository,)) if repository else ("", ())
        sql = f"SELECT scope FROM scope_keys {where}"  # may hold a key no live record has any more
        with self._peek() as conn:
            return sorted(str(k) for (k,) in conn.execute(self.D.q(sql), args))

    def repositories(self) -> list[str]:
        with self._peek() as conn:
            chains = [str(c) for (c,) in conn.execute("SELECT chain FROM heads ORDER BY chain")]
        return [c for c in chains if not c.startswith(signing.RESERVED_PREFIX)]

    def append_agent_event(self, body: AgentEventBody, seal: Seal) -> tuple[Entry, Registry]:
        """Append one registry event (``mentis.ledger.registry``) by ``body.by``; InvalidInput,
        NotFound or Conflict when it may not follow the registry as it stands, and nothing is
        written. The event is dated with the seal's planned time, else once the registry's lock is
        held (``_admit_agent_event``). Returns the entry and the registry with the event applied."""
        with self._write(signing.AGENTS_CHAIN, commit=seal.commit) as conn:
            body, after = self._admit_agent_event(conn, seal.at, body)
            _, entry = self._append(
                conn,
                seal,
                signing.AGENTS_CHAIN,
                "agent",
                seal.record_id(),
                body.at,
                body.by,
                canonical(body.to_json()),
            )
        return entry, after

    def append_checkpoint(self, body: bytes, at: str, agent: str, seal: Seal) -> Entry:
        """Append a signed checkpoint (``mentis.ledger.checkpoint``, its canonical ``body``) to the
        system chain :data:`mentis.ledger.links.CHECKPOINTS_CHAIN`, by ``agent`` at ``at``."""
        with self._write(CHECKPOINTS_CHAIN, commit=seal.commit) as conn:
            _, entry = self._append(
                conn, seal, CHECKPOINTS_CHAIN, "checkpoint", seal.record_id(), at, agent, body
            )
        return entry

    def chain_heads(self) -> dict[str, tuple[int, str]]:
        """Every chain's recorded head: chain → (seq, hash), system chains included."""
        with self._read() as conn:
            rows = conn.execute("SELECT chain, seq, hash FROM heads ORDER BY chain").fetchall()
        return {str(c): (int(s), str(h)) for c, s, h in rows}

    def entry_hashes(self, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """The hash of the entry at each (chain, seq) of ``keys`` that exists, in one read snapshot:
        per chain, its seqs looked up in the ``(chain, seq)`` index a chunk at a time."""
        by_chain: dict[str, list[int]] = {}
        for chain, seq in keys:
            by_chain.setdefault(chain, []).append(seq)
        out: dict[tuple[str, int], str] = {}
        with self._read() as conn:
            for chain, seqs in by_chain.items():
                for chunk in self.D.chunks(sorted(set(seqs))):
                    cond, args = self.D.in_("seq", chunk)
                    sql = self.D.q(f"SELECT seq, hash FROM entries WHERE chain=? AND {cond}")
                    for seq, hash_ in conn.execute(sql, [chain, *args]):
                        out[chain, int(seq)] = str(hash_)
        return out

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

    # ------------------------------------------------------------ rows every record kind writes

    def _insert_vector(
        self, conn: ConnT, table: str, rowid: int, repository: str, vector: np.ndarray
    ) -> None:
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

    def _note_scope(self, conn: ConnT, record: AttemptBody | ThoughtBody, scope: str) -> None:
        """Keep ``scope``, a key ``record`` is written or published under, in ``scope_keys``."""
        conn.execute(
            self.D.q("INSERT INTO scope_keys(scope, repository) VALUES(?,?) ON CONFLICT(scope) DO NOTHING"),
            (scope, record.repository),
        )

    def _index_record(self, conn: ConnT, table: str, rowid: int, record: AttemptBody | ThoughtBody) -> None:
        """One attempt's (``attempt_terms``) or thought's (``thought_terms``) lexical row."""
        self._index_terms(conn, table, rowid, record.scope, *record.index_fields)

    def _add_rejection(
        self,
        conn: ConnT,
        by_rowid: int,
        by_id: str,
        repo: str,
        target: str,
        kind: str,
        at: str,
        norm_hash: str,
        blob: bytes,
    ) -> None:
        """The fingerprint of a rejected conclusion (an attempt marked outdated, a thought
        Corrected or Invalidated): who rejected what, when, its text's hash and its vector."""
        conn.execute(
            self.D.q(
                "INSERT INTO rejections(by_rowid, by_id, repository, target_id, target_kind, at, "
                "norm_hash, vec) VALUES(?,?,?,?,?,?,?,?)"
            ),
            (by_rowid, by_id, repo, target, kind, at, norm_hash, blob),
        )


__all__ = [
    "ENTRY_COLS",
    "LedgerCore",
    "check_list",
    "checked_body",
    "derived_mismatch",
    "entry_of",
    "hash_lookup",
]
