"""Private scopes (issue 26): each attempt's and thought's scope key, and ``publish``.

A record's scope key (:func:`mentis.ledger.bodies.scope_key`) is held in ``attempt_idx.scope`` /
``thought_idx.scope`` and is the partition its lexical, title, window and vector rows are kept in
(their ``repository`` column), so a reader's search takes candidates and every statistic from the
keys it may read and nothing else. A ``visibility`` entry (:class:`VisibilityBody`) widens a
record's scope: the record's rows move to the wider key, and every process reloads its in-process
indexes (:meth:`Backend._rekeyed`). An entry that would narrow a scope changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from mentis.errors import NotFound
from mentis.ledger.bodies import AttemptBody, ThoughtBody, VisibilityBody, visibility_of, widens
from mentis.ledger.canonical import canonical
from mentis.ledger.entry import Entry
from mentis.store.seal import Seal
from mentis.store.shared.attempts import AttemptCore
from mentis.store.shared.backend import ConnT
from mentis.store.shared.thoughts import ThoughtCore

RecordBody = AttemptBody | ThoughtBody

_TABLES = {
    "attempt": ("attempt_idx", "attempt_id", "attempt_terms", "vectors"),
    "thought": ("thought_idx", "thought_id", "thought_terms", "thought_vectors"),
}


class ScopeCore(AttemptCore[ConnT], ThoughtCore[ConnT]):
    """Scope reads and ``publish``, over the attempt and thought tables (``self`` is the store)."""

    def record_scope(self, repository: str, record_id: str) -> tuple[str, RecordBody, str] | None:
        """(kind, body, current scope key) of the live attempt or thought ``record_id`` of
        ``repository``, or None when there is none (never written, or forgotten)."""
        with self._read() as conn:
            found = self._scoped_record(conn, repository, record_id)
        return None if found is None else (found[0], found[2], found[3])

    def record_scopes(self, record_ids: Sequence[str]) -> dict[str, str]:
        """The current scope key of each live attempt or thought among ``record_ids``."""
        out: dict[str, str] = {}
        if not record_ids:
            return out
        with self._read() as conn:
            for idx, column, _, _ in _TABLES.values():
                for chunk in self.D.chunks(list(record_ids)):
                    cond, args = self.D.in_(column, chunk)
                    sql = self.D.q(f"SELECT {column}, scope FROM {idx} WHERE {cond}")
                    out.update({str(i): str(s) for i, s in conn.execute(sql, args)})
        return out

    def append_visibility(self, body: VisibilityBody, vector: np.ndarray, seal: Seal) -> Entry:
        """Append a ``visibility`` entry (its id is the seal's) widening a live record's scope;
        ``vector`` is the record's vector again (its row moves to the new key). NotFound when
        the record is not a live attempt or thought of the chain."""
        self._check_vector(f"record {body.record_id}", vector)
        chain = body.repository
        with self._write(chain, commit=seal.commit) as conn:
            if self._scoped_record(conn, chain, body.record_id) is None:
                raise NotFound(f"no attempt or thought {body.record_id} in repository {chain}")
            raw = canonical(body.to_json())
            rowid, entry = self._append(
                conn, seal, chain, "visibility", seal.record_id(), body.at, body.agent_id, raw
            )
            if rowid is not None:
                self._derive_visibility(conn, body, vector)
        return entry

    def _scoped_record(
        self, conn: ConnT, repository: str, record_id: str
    ) -> tuple[str, int, RecordBody, str] | None:
        for kind, (idx, column, _, _) in _TABLES.items():
            row = conn.execute(
                self.D.q(f"SELECT rowid, scope FROM {idx} WHERE {column}=? AND repository=?"),
                (record_id, repository),
            ).fetchone()
            if row is not None:
                rowid = int(row[0])
                body: RecordBody | None = None
                if kind == "attempt":
                    found = self._load(conn, [rowid], AttemptBody).get(rowid)
                    body = None if found is None else found.body
                else:
                    thought = self._load(conn, [rowid], ThoughtBody).get(rowid)
                    body = None if thought is None else thought.body
                if body is not None:
                    return kind, rowid, body, str(row[1])
        return None

    def _derive_visibility(self, conn: ConnT, body: VisibilityBody, vector: np.ndarray) -> None:
        """Move a record's rows to the wider scope ``body`` names (nothing for a forgotten record,
        or a visibility no wider than its scope now)."""
        found = self._scoped_record(conn, body.repository, body.record_id)
        if found is None:
            return
        kind, rowid, record, scope = found
        if not widens(body.visibility, visibility_of(record.repository, scope)):
            return
        published = replace(record, visibility=body.visibility)
        idx, _, terms, vectors = _TABLES[kind]
        conn.execute(self.D.q(f"UPDATE {idx} SET scope=? WHERE rowid=?"), (published.scope, rowid))
        self._note_scope(conn, published, published.scope)
        self._unindex_terms(conn, terms, rowid)
        self._index_record(conn, terms, rowid, published)
        if isinstance(published, AttemptBody):
            if published.task_title:
                self._unindex_terms(conn, "title_terms", rowid)
                self._index_title(conn, rowid, published)
        else:
            if self._has_terms(conn, "window_terms", rowid):
                self._unindex_terms(conn, "window_terms", rowid)
            self._index_window(conn, rowid, published)
        conn.execute(self.D.q(f"DELETE FROM {vectors} WHERE rowid=?"), (rowid,))
        self._insert_vector(conn, vectors, rowid, published.scope, vector)
        self._rekeyed(conn)

    def _has_terms(self, conn: ConnT, table: str, rowid: int) -> bool:
        return conn.execute(self.D.q(f"SELECT 1 FROM {table} WHERE rowid=?"), (rowid,)).fetchone() is not None


__all__ = ["ScopeCore"]
