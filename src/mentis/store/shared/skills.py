"""Skill tables of the relational core, written once for both backends (see :mod:`mentis.store.shared.core`).

A skill lives on its repository's chain: each version is a ``skill`` entry (the first whole, later
ones as a diff against the one before), each deprecation or revocation a ``skill_status`` entry,
and a deletion a ``forget`` tombstone that erases every version's body. Derived tables, rebuilt
from the ledger like every other:

- ``skill_idx``: one row per live skill: its newest version's rowid, version, content hash and
  status (active, deprecated, revoked), with name, description, tags and triggers for filtering;
- ``skill_version_idx``: every live version's rowid, version and content hash;
- ``skill_revoked``: the content hash of every revoked version, with the revoking entry's rowid.
  Status entries are never erased, so a revocation outlives re-uploads and deletion;
- ``skill_instructions``: every live version's instructions hash (``skill_text.instructions_hash``:
  the body without front matter, whitespace-normalised; none for a blank body);
- ``skill_revoked_instructions``: the instructions hashes each revocation revoked (listed in the
  revocation's body, or, for one written before bodies listed them, read from its versions still
  in the store). A skill whose newest version has those instructions in the same repository is
  revoked too: a copy made before the revocation with it, one uploaded after when it is derived;
- ``skill_terms`` and ``skill_vectors``: one lexical row and one vector per live skill (its
  newest version), searched like attempts and thoughts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import orjson

from mentis.api.skill_text import apply_diff, instructions_hash, skill_body
from mentis.errors import Conflict, IntegrityError, NotFound, SkillTextError
from mentis.ledger.bodies import SkillStatusBody, SkillVersionBody, tombstone
from mentis.ledger.canonical import canonical
from mentis.ledger.entry import Entry
from mentis.store.protocol import Embed, SkillRow, SkillVersionRow, StoredSkillStatus, StoredSkillVersion
from mentis.store.seal import Seal
from mentis.store.shared.backend import ConnT
from mentis.store.shared.core import LedgerCore, check_list, checked_body, derived_mismatch

SKILL_COLS = "s.repository, s.skill_id, s.rowid, s.status, s.version, s.content_hash"


def _row(r: Sequence[Any]) -> SkillRow:
    return SkillRow(str(r[0]), str(r[1]), int(r[2]), str(r[3]), int(r[4]), str(r[5]))


def _version_text(version: SkillVersionBody, before: str | None) -> str:
    """A version's whole text: its ``content``, or its ``diff`` applied to the text of the version
    before it (``before``; SkillTextError when there is none, or no diff)."""
    if version.content is not None:
        return version.content
    if before is None or version.diff is None:
        raise SkillTextError("its diff has no version before it to apply to")
    return apply_diff(before, version.diff)


class SkillCore(LedgerCore[ConnT]):
    """Skill writes, derivation and reads (``self`` is the store)."""

    # ------------------------------------------------------------ writes

    def append_skill_versions(self, rows: Sequence[SkillVersionRow], seal: Seal) -> list[Entry]:
        """Append skill versions in order in one write transaction (each entry is its body's
        version id, repository, agent and time); each must be its skill's next version (after the
        newest one, whose entry its diff names), else Conflict and nothing is written."""
        for row in rows:
            self._check_vector(f"skill version {row.body.version_id}", row.vector)
        entries: list[Entry] = []
        if not rows:
            return entries
        with self._write(*{row.body.repository for row in rows}, commit=seal.commit) as conn:
            for body, content, vector in rows:
                chain = body.repository
                newest = self._newest_version(conn, chain, body.skill_id)
                expected = 1 if newest is None else newest[1] + 1
                base = None if newest is None else newest[2]
                if body.version != expected or body.base_id != base:
                    raise Conflict(
                        f"skill {body.skill_id} in {chain} is at version {expected - 1} now; "
                        "read it and upload again"
                    )
                raw = canonical(body.to_json())
                rowid, entry = self._append(
                    conn, seal, chain, "skill", body.version_id, body.created_at, body.agent_id, raw
                )
                if rowid is not None:
                    self._derive_skill(conn, rowid, body, content, vector)
                entries.append(entry)
        return entries

    def append_skill_status(self, body: SkillStatusBody, seal: Seal) -> Entry:
        """Deprecate or revoke a live skill at its newest version (Conflict if it moved on); the
        entry's id is the seal's."""
        chain = body.repository
        with self._write(chain, commit=seal.commit) as conn:
            newest = self._newest_version(conn, chain, body.skill_id)
            if newest is None:
                raise NotFound(f"no skill {body.skill_id} in repository {chain}; list_skills shows them")
            if newest[2] != body.version_id:
                raise Conflict(f"skill {body.skill_id} in {chain} has a newer version; read it again")
            raw = canonical(body.to_json())
            rowid, entry = self._append(
                conn, seal, chain, "skill_status", seal.record_id(), body.at, body.agent_id, raw
            )
            if rowid is not None:
                self._derive_skill_status(conn, rowid, body)
        return entry

    def delete_skill(self, chain: str, skill_id: str, reason: str | None, agent: str, seal: Seal) -> Entry:
        """Erase every version's body and derived rows; the chain keeps a tombstone (the seal's id
        and time) listing their seqs."""
        q = self.D.q
        at = seal.time()
        with self._write(chain, commit=seal.commit) as conn:
            versions = conn.execute(
                q(
                    "SELECT e.seq, v.version, e.id FROM skill_version_idx v "
                    "JOIN entries e ON e.rowid = v.rowid "
                    "WHERE v.repository=? AND v.skill_id=? ORDER BY v.version"
                ),
                (chain, skill_id),
            ).fetchall()
            if not versions:
                raise NotFound(f"no skill {skill_id} in repository {chain}; list_skills shows them")
            seqs = sorted(int(v[0]) for v in versions)
            newest_id, newest = str(versions[-1][2]), int(versions[-1][1])
            tomb = tombstone(
                "skill", skill_id, chain, seqs, reason, agent, at, version_id=newest_id, version=newest
            )
            tomb_rowid, entry = self._append(
                conn, seal, chain, "forget", seal.record_id(), at, agent, canonical(tomb.to_json())
            )
            if tomb_rowid is not None:
                self._derive_forget_skill(conn, chain, skill_id)
        self._after_forget()
        return entry

    def _newest_version(self, conn: ConnT, repository: str, skill_id: str) -> tuple[int, int, str] | None:
        """(rowid, version, entry id) of a live skill's newest version."""
        row = conn.execute(
            self.D.q(
                "SELECT v.rowid, v.version, e.id FROM skill_version_idx v "
                "JOIN entries e ON e.rowid = v.rowid "
                "WHERE v.repository=? AND v.skill_id=? ORDER BY v.version DESC LIMIT 1"
            ),
            (repository, skill_id),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), str(row[2]))

    # ------------------------------------------------------------ derivation (live and rebuild)

    def _derive_skill(
        self, conn: ConnT, rowid: int, version: SkillVersionBody, content: str, vector: np.ndarray
    ) -> None:
        """A skill version's rows: it becomes the skill's newest (revoked when its skill or its
        instructions were); ``content`` is its whole text."""
        q = self.D.q
        repo, skill_id = version.repository, version.skill_id
        instructions = instructions_hash(skill_body(content))
        revoked = conn.execute(
            q("SELECT 1 FROM skill_revoked WHERE repository=? AND skill_id=? LIMIT 1"), (repo, skill_id)
        ).fetchone() or (
            instructions is not None
            and conn.execute(
                q(
                    "SELECT 1 FROM skill_revoked_instructions "
                    "WHERE instructions_hash=? AND repository=? LIMIT 1"
                ),
                (instructions, repo),
            ).fetchone()
        )
        self._drop_skill_rows(conn, repo, skill_id)
        conn.execute(
            q(
                "INSERT INTO skill_idx(repository, skill_id, rowid, status, version, content_hash, name, "
                "description, tags, triggers) VALUES(?,?,?,?,?,?,?,?,?,?)"
            ),
            (
                repo,
                skill_id,
                rowid,
                "revoked" if revoked else "active",
                version.version,
                version.content_hash,
                version.name,
                version.description,
                orjson.dumps(version.tags).decode(),
                orjson.dumps(version.triggers).decode(),
            ),
        )
        conn.execute(
            q(
                "INSERT INTO skill_version_idx(rowid, repository, skill_id, version, content_hash) "
                "VALUES(?,?,?,?,?)"
            ),
            (rowid, repo, skill_id, version.version, version.content_hash),
        )
        self._index_instruction(conn, rowid, repo, skill_id, instructions)
        self._index_terms(conn, "skill_terms", rowid, repo, *version.index_fields(content))
        self._insert_vector(conn, "skill_vectors", rowid, repo, vector)

    def _drop_skill_rows(self, conn: ConnT, repo: str, skill_id: str) -> None:
        """Remove a skill's index row, lexical row and vector (its newest version is replaced or erased)."""
        q = self.D.q
        old = conn.execute(
            q("SELECT rowid FROM skill_idx WHERE repository=? AND skill_id=?"), (repo, skill_id)
        ).fetchone()
        if old is None:
            return
        rowid = int(old[0])
        self._removing(conn, "skill", rowid)
        self._unindex_terms(conn, "skill_terms", rowid)
        conn.execute(q("DELETE FROM skill_vectors WHERE rowid=?"), (rowid,))
        conn.execute(q("DELETE FROM skill_idx WHERE rowid=?"), (rowid,))

    def _derive_skill_status(self, conn: ConnT, rowid: int, status: SkillStatusBody) -> None:
        q = self.D.q
        repo, skill_id = status.repository, status.skill_id
        if status.op == "revoke":
            rows = [(rowid, repo, skill_id, h) for h in status.content_hashes]
            self.D.many(
                conn,
                "INSERT INTO skill_revoked(status_rowid, repository, skill_id, content_hash) VALUES(?,?,?,?)",
                rows,
            )
            conn.execute(
                q("UPDATE skill_idx SET status='revoked' WHERE repository=? AND skill_id=?"), (repo, skill_id)
            )
            self._revoke_instructions(conn, rowid, status)
        else:
            conn.execute(
                q(
                    "UPDATE skill_idx SET status='deprecated' "
                    "WHERE repository=? AND skill_id=? AND status='active'"
                ),
                (repo, skill_id),
            )

    def _index_instruction(
        self, conn: ConnT, rowid: int, repo: str, skill_id: str, instructions: str | None
    ) -> None:
        if instructions is not None:
            conn.execute(
                self.D.q(
                    "INSERT INTO skill_instructions(rowid, repository, skill_id, instructions_hash) "
                    "VALUES(?,?,?,?)"
                ),
                (rowid, repo, skill_id, instructions),
            )

    def _revoke_instructions(self, conn: ConnT, status_rowid: int, status: SkillStatusBody) -> None:
        """Key a revocation on its versions' instructions and revoke the skills of its repository
        whose newest version has them."""
        q = self.D.q
        repo, skill_id = status.repository, status.skill_id
        hashes = status.instructions_hashes
        if hashes is None:  # written before revocations listed them: from its versions still stored
            cond, args = self.D.in_("v.content_hash", list(status.content_hashes) or [""])
            hashes = [
                str(h)
                for (h,) in conn.execute(
                    q(
                        "SELECT DISTINCT i.instructions_hash FROM skill_instructions i "
                        "JOIN skill_version_idx v ON v.rowid = i.rowid "
                        f"WHERE v.repository=? AND v.skill_id=? AND {cond} ORDER BY 1"
                    ),
                    [repo, skill_id, *args],
                )
            ]
        self.D.many(
            conn,
            "INSERT INTO skill_revoked_instructions(status_rowid, repository, skill_id, instructions_hash) "
            "VALUES(?,?,?,?)",
            [(status_rowid, repo, skill_id, h) for h in hashes],
        )
        for chunk in self.D.chunks(list(hashes)):
            cond, args = self.D.in_("instructions_hash", chunk)
            conn.execute(
                q(
                    "UPDATE skill_idx SET status='revoked' WHERE repository=? AND rowid IN "
                    f"(SELECT rowid FROM skill_instructions WHERE repository=? AND {cond})"
                ),
                [repo, repo, *args],
            )

    def _index_instructions(self, conn: ConnT) -> int:
        """Fill the instruction tables for a store written before they existed (its migration):
        every live version's instructions, then every revocation's, in ledger order, as a rebuild
        derives them. Returns the number of versions read."""
        q = self.D.q
        skills = conn.execute(
            "SELECT DISTINCT repository, skill_id FROM skill_version_idx ORDER BY repository, skill_id"
        ).fetchall()
        done = 0
        for repo, skill_id in skills:
            rowids = [
                int(r)
                for (r,) in conn.execute(
                    q(
                        "SELECT rowid FROM skill_version_idx WHERE repository=? AND skill_id=? "
                        "ORDER BY version"
                    ),
                    (repo, skill_id),
                )
            ]
            loaded = self._load(conn, rowids, SkillVersionBody)
            text = ""
            for rowid in rowids:
                if rowid not in loaded:  # a live version without its body
                    raise derived_mismatch(rowid)
                version = loaded[rowid].body
                try:
                    text = _version_text(version, text)
                except SkillTextError as exc:
                    raise IntegrityError(
                        f"skill {skill_id} version {version.version} in {repo} cannot be rebuilt: {exc}"
                    ) from None
                self._index_instruction(
                    conn, rowid, str(repo), str(skill_id), instructions_hash(skill_body(text))
                )
                done += 1
        statuses = conn.execute(
            "SELECT e.rowid, b.body, e.body_hash FROM entries e JOIN bodies b ON b.rowid = e.rowid "
            "WHERE e.kind = 'skill_status' ORDER BY e.rowid"
        ).fetchall()
        for rowid, raw, body_hash in statuses:
            status = SkillStatusBody.parse(checked_body(int(rowid), bytes(raw), body_hash))
            if status.op == "revoke":
                self._revoke_instructions(conn, int(rowid), status)
        return done

    def _derive_forget_skill(self, conn: ConnT, repo: str, skill_id: str) -> None:
        """Erase every live version's body and drop the skill's derived rows (its revocations stay)."""
        q = self.D.q
        rowids = [
            int(r)
            for (r,) in conn.execute(
                q("SELECT rowid FROM skill_version_idx WHERE repository=? AND skill_id=?"), (repo, skill_id)
            )
        ]
        if rowids:
            cond, args = self.D.in_("rowid", rowids)
            conn.execute(q(f"DELETE FROM bodies WHERE {cond}"), args)
        self._drop_skill_rows(conn, repo, skill_id)
        conn.execute(q("DELETE FROM skill_version_idx WHERE repository=? AND skill_id=?"), (repo, skill_id))
        conn.execute(q("DELETE FROM skill_instructions WHERE repository=? AND skill_id=?"), (repo, skill_id))

    def _skill_replayer(self, conn: ConnT, embed: Embed) -> Callable[[int, SkillVersionBody], None]:
        """The replay callback for skill versions: rebuilds each version's text from the one before."""
        texts: dict[tuple[str, str], str] = {}

        def skill(rowid: int, version: SkillVersionBody) -> None:
            key = (version.repository, version.skill_id)
            try:
                text = _version_text(version, texts.get(key))
            except SkillTextError as exc:
                raise IntegrityError(
                    f"skill {key[1]} version {version.version} in {key[0]} cannot be rebuilt: {exc}"
                ) from None
            texts[key] = text
            vector = embed([version.embed_text])[0]
            self._derive_skill(conn, rowid, version, text, vector)

        return skill

    # ------------------------------------------------------------ reads

    def skill_row(self, repository: str, skill_id: str) -> SkillRow | None:
        with self._read() as conn:
            row = conn.execute(
                self.D.q(f"SELECT {SKILL_COLS} FROM skill_idx s WHERE s.repository=? AND s.skill_id=?"),
                (repository, skill_id),
            ).fetchone()
        return None if row is None else _row(row)

    def skill_rows(self, repositories: Sequence[str] | None, statuses: Sequence[str]) -> list[SkillRow]:
        """Live skills of ``repositories`` (None: all) with one of ``statuses``, by repository and id."""
        check_list(statuses, "statuses")
        cond, args = self.D.in_("s.status", list(statuses) or [""])
        if repositories is not None:
            check_list(repositories, "repositories")
            repo_cond, repo_args = self.D.in_("s.repository", list(repositories) or [""])
            cond, args = f"{cond} AND {repo_cond}", [*args, *repo_args]
        with self._read() as conn:
            rows = conn.execute(
                self.D.q(
                    f"SELECT {SKILL_COLS} FROM skill_idx s WHERE {cond} ORDER BY s.repository, s.skill_id"
                ),
                args,
            ).fetchall()
        return [_row(r) for r in rows]

    def skill_rows_at(self, rowids: Sequence[int]) -> dict[int, SkillRow]:
        out: dict[int, SkillRow] = {}
        with self._read() as conn:
            for chunk in self.D.chunks(list(rowids)):
                cond, args = self.D.in_("s.rowid", chunk)
                for r in conn.execute(self.D.q(f"SELECT {SKILL_COLS} FROM skill_idx s WHERE {cond}"), args):
                    out[int(r[2])] = _row(r)
        return out

    def skill_history(self, repository: str, skill_id: str) -> list[StoredSkillVersion]:
        """Every live version's entry and body (checked against its hash), oldest first."""
        with self._read() as conn:
            rowids = [
                int(r)
                for (r,) in conn.execute(
                    self.D.q(
                        "SELECT rowid FROM skill_version_idx WHERE repository=? AND skill_id=? "
                        "ORDER BY version"
                    ),
                    (repository, skill_id),
                )
            ]
            loaded = self._load(conn, rowids, SkillVersionBody)
        return [loaded[r] for r in rowids if r in loaded]

    def load_skill_versions(self, rowids: Sequence[int]) -> dict[int, StoredSkillVersion]:
        with self._read() as conn:
            return self._load(conn, rowids, SkillVersionBody)

    def skill_revocation(
        self, repository: str, skill_id: str, instructions: str | None = None
    ) -> StoredSkillStatus | None:
        """The revocation that applies to ``skill_id``: its own first one (it outlives re-uploads
        and deletion), else the first one in ``repository`` that revoked a version with the
        instructions hash ``instructions``; None when neither exists."""
        q = self.D.q
        with self._read() as conn:
            row = conn.execute(
                q("SELECT min(status_rowid) FROM skill_revoked WHERE repository=? AND skill_id=?"),
                (repository, skill_id),
            ).fetchone()
            if (row is None or row[0] is None) and instructions is not None:
                row = conn.execute(
                    q(
                        "SELECT min(status_rowid) FROM skill_revoked_instructions "
                        "WHERE instructions_hash=? AND repository=?"
                    ),
                    (instructions, repository),
                ).fetchone()
            if row is None or row[0] is None:
                return None
            loaded = self._load(conn, [int(row[0])], SkillStatusBody)
        return loaded.get(int(row[0]))

    def revoked_copies(self, content_hash: str, instructions: str | None) -> list[tuple[str, str]]:
        """(repository, skill_id) of every skill that had a version revoked with this whole text
        or, given, these instructions."""
        with self._read() as conn:
            rows = conn.execute(
                self.D.q(
                    "SELECT repository, skill_id FROM skill_revoked WHERE content_hash=? UNION "
                    "SELECT repository, skill_id FROM skill_revoked_instructions WHERE instructions_hash=? "
                    "ORDER BY 1, 2"
                ),
                (content_hash, instructions or ""),
            ).fetchall()
        return [(str(r), str(s)) for r, s in rows]

    def skill_lexical(
        self, terms: Sequence[str], repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        """BM25 candidates among the live skills of ``repositories`` (None: all) for ``terms``."""
        check_list(terms, "query terms")
        return self._lexical("skill_terms", terms, repositories, limit)

    def skill_vector(
        self, query: np.ndarray, repositories: Sequence[str] | None, limit: int
    ) -> list[tuple[int, float]]:
        return self._vector("skill_vectors", query, repositories, limit)


__all__ = ["SkillCore"]
