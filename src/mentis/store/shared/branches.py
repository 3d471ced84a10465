"""Branch and merge chains in the store (issue 26, :mod:`mentis.ledger.branches`): the fork of a
branch (two entries, one transaction holding both chains' locks), a merge, and the graph of them,
read from the ledger's fork, branch and merge entries through the partial index ``entries_branching``
(each entry and body checked against its hashes as it is read). Nothing is derived: a merge
copies nothing, and which chains a read covers is computed from the graph.
"""

from __future__ import annotations

import uuid

from mentis.errors import Conflict, InvalidInput, NotFound
from mentis.ledger.branches import GENESIS, BranchBody, BranchGraph, ConflictBody, ForkBody, MergeBody
from mentis.ledger.canonical import canonical, sha256_hex
from mentis.ledger.entry import Entry, entry_hash
from mentis.store.seal import Seal
from mentis.store.shared.backend import ConnT
from mentis.store.shared.core import ENTRY_COLS, LedgerCore, checked_entry, entry_of


class BranchCore(LedgerCore[ConnT]):
    """Forks, merges and the branch graph (``self`` is the store)."""

    def branch_graph(self) -> BranchGraph:
        """Every fork and merge of the ledger, in ledger order (IntegrityError if one changed
        since the store was verified)."""
        with self._read() as conn:
            return self._graph(conn)

    def _graph(self, conn: ConnT) -> BranchGraph:
        rows = conn.execute(
            f"SELECT {ENTRY_COLS}, b.body FROM entries e JOIN bodies b ON b.rowid = e.rowid "
            "WHERE e.kind IN ('fork', 'branch', 'merge') ORDER BY e.rowid"  # the index's own terms
        ).fetchall()
        found = []
        for row in rows:
            if str(row[1]) in self.damaged:  # ENTRY_COLS' chain
                continue
            e, raw = checked_entry(row)
            found.append((e.chain, e.seq, e.kind, raw))
        return BranchGraph.of(found)

    def chain_entries(self, chain: str, after_seq: int, kinds: tuple[str, ...]) -> list[tuple[Entry, bytes]]:
        """The entries of ``chain`` after ``after_seq`` of ``kinds`` that still have a body, in
        order, each checked against its hashes (what a merge compares the two sides by)."""
        cond, args = self.D.in_("e.kind", list(kinds))
        with self._read() as conn:
            rows = conn.execute(
                self.D.q(
                    f"SELECT {ENTRY_COLS}, b.body FROM entries e JOIN bodies b ON b.rowid = e.rowid "
                    f"WHERE e.chain = ? AND e.seq > ? AND {cond} ORDER BY e.seq"
                ),
                [chain, after_seq, *args],
            ).fetchall()
        out = []
        for row in rows:
            out.append(checked_entry(row))
        return out

    def record_bodies(self, ids: list[str]) -> dict[str, tuple[Entry, bytes]]:
        """The entry and body of each attempt or thought among ``ids`` that still has one."""
        out: dict[str, tuple[Entry, bytes]] = {}
        if not ids:
            return out
        cond, args = self.D.in_("e.id", ids)
        with self._read() as conn:
            rows = conn.execute(
                self.D.q(
                    f"SELECT {ENTRY_COLS}, b.body FROM entries e JOIN bodies b ON b.rowid = e.rowid "
                    f"WHERE {cond} AND e.kind IN ('attempt', 'thought')"
                ),
                args,
            ).fetchall()
        for row in rows:
            e, raw = entry_of(row[:12]), bytes(row[12])
            if entry_hash(e.document()) == e.hash and sha256_hex(raw) == e.body_hash:
                out[e.id] = (e, raw)
        return out

    def entry_positions(self, rowids: list[int]) -> dict[int, tuple[str, int]]:
        """(chain, seq) of the entry at each of ``rowids`` (a read of a merged chain stops at a seq)."""
        out: dict[int, tuple[str, int]] = {}
        with self._read() as conn:
            for chunk in self.D.chunks(rowids):
                cond, args = self.D.in_("rowid", chunk)
                for rowid, chain, seq in conn.execute(
                    self.D.q(f"SELECT rowid, chain, seq FROM entries WHERE {cond}"), args
                ):
                    out[int(rowid)] = (str(chain), int(seq))
        return out

    def _head(self, conn: ConnT, chain: str) -> tuple[int, str] | None:
        row = conn.execute(self.D.q("SELECT seq, hash FROM heads WHERE chain=?"), (chain,)).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def append_branch(
        self,
        root: str,
        branch: str,
        parent: str,
        fork: tuple[int, str | None] | None,
        agent: str,
        seal: Seal,
    ) -> tuple[Entry, Entry]:
        """Fork ``root:branch`` from chain ``parent`` at ``fork`` (seq and, when given, the hash
        it must have; None: the parent's head now): the branch's ``fork`` entry and the parent's
        ``branch`` entry, in one transaction. InvalidInput naming ``fork_seq``/``fork_hash`` when
        the fork point is not an entry of the parent; Conflict when the chain exists."""
        chain = f"{root}:{branch}"
        at = seal.time()
        with self._write(chain, parent, commit=seal.commit) as conn:
            if self._head(conn, chain) is not None:
                raise Conflict(f"branch {branch!r} of {root!r} exists (chain {chain!r})")
            head = self._head(conn, parent)
            if head is None and parent != root:
                raise NotFound(f"parent: branch chain {parent!r} has no entries to fork from")
            if fork is None:
                seq, hash_ = head or GENESIS  # an empty repository: before its first entry
            else:
                seq = fork[0]
                row = conn.execute(
                    self.D.q("SELECT hash FROM entries WHERE chain=? AND seq=?"), (parent, seq)
                ).fetchone()
                if row is None:
                    at = "it has no entries" if head is None else f"its head is seq {head[0]}"
                    raise InvalidInput(
                        f"fork_seq: chain {parent!r} has no entry at seq {seq} ({at})", field="fork_seq"
                    )
                hash_ = str(row[0])
                if fork[1] is not None and fork[1] != hash_:
                    raise InvalidInput(
                        f"fork_hash: the entry at seq {seq} of chain {parent!r} has hash {hash_}, "
                        f"not {fork[1]}",
                        field="fork_hash",
                    )
            fork_id = seal.record_id()
            body = ForkBody(
                repository=chain,
                root=root,
                branch=branch,
                parent=parent,
                fork_seq=seq,
                fork_hash=hash_,
                agent_id=agent,
                at=at,
            )
            _, forked = self._append(conn, seal, chain, "fork", fork_id, at, agent, canonical(body.to_json()))
            note = BranchBody(
                repository=parent,
                branch=branch,
                chain=chain,
                fork_seq=seq,
                fork_hash=hash_,
                agent_id=agent,
                at=at,
            )
            note_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"mentis:branch:{fork_id}"))
            _, noted = self._append(
                conn, seal, parent, "branch", note_id, at, agent, canonical(note.to_json())
            )
        return forked, noted

    def append_merge(
        self,
        source: str,
        target: str,
        source_head: tuple[int, str],
        conflicts: list[ConflictBody],
        agent: str,
        seal: Seal,
    ) -> Entry:
        """The ``merge`` entry on ``target`` naming ``source`` at ``source_head``; Conflict when
        the source's head moved since the conflicts were computed (merge again)."""
        at = seal.time()
        with self._write(target, source, commit=seal.commit) as conn:
            if self._head(conn, source) != source_head:
                raise Conflict(f"branch chain {source!r} moved while it was being merged; merge again")
            body = MergeBody(
                repository=target,
                source=source,
                source_seq=source_head[0],
                source_hash=source_head[1],
                agent_id=agent,
                at=at,
                conflicts=conflicts,
            )
            _, entry = self._append(
                conn, seal, target, "merge", seal.record_id(), at, agent, canonical(body.to_json())
            )
        return entry


__all__ = ["BranchCore"]
