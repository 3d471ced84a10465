"""The SQLite store's parallel verification (block scans in worker processes, then the stitch)
checks skill entries exactly as the reference verifier does: versions, statuses and a skill's
tombstone pass; a status re-pointed at another skill's version is refused by both."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import orjson
import pytest

from mentis.api.skills import DeleteSkillInput, RevokeSkillInput, UploadSkillInput
from mentis.config import Settings
from mentis.errors import IntegrityError
from mentis.ledger.canonical import canonical, sha256_hex
from mentis.ledger.chain import verify_rows
from mentis.ledger.entry import entry_hash
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite import verify as sqlite_verify
from mentis.store.sqlite.schema import _LEDGER_SCHEMA
from mentis.store.sqlite.store import SqliteStore

CALLER = Caller(agent_id="verify")
REPOS = ("github.com/acme/shop", "github.com/acme/api")


def skill(name: str, n: int) -> str:
    return f"---\nname: {name}\ndescription: {name} procedure\n---\n" + "".join(
        f"step {i}\n" for i in range(n)
    )


def build(path: Path) -> None:
    m = Memory.open(Settings(home=path.parent, db_path=path, embedder="hash"), HashEmbedder())
    try:
        for n in range(1, 5):
            for repo in REPOS:
                for name in ("run-tests", "cut-release"):
                    m.upload_skill(CALLER, UploadSkillInput(repository=repo, content=skill(name, n)))
        ref = {"repository": REPOS[0], "skill_id": "run-tests"}
        m.revoke_skill(CALLER, RevokeSkillInput(**ref, reason="unsafe"))
        m.delete_skill(CALLER, DeleteSkillInput(**ref))
        m.upload_skill(CALLER, UploadSkillInput(repository=REPOS[0], content=skill("run-tests", 9)))
    finally:
        m.close()


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(sqlite_verify, "PARALLEL_MIN_ENTRIES", 0)
    monkeypatch.setattr(sqlite_verify, "MIN_BLOCK", 4)
    monkeypatch.setattr(sqlite_verify, "MAX_BLOCK", 4)
    monkeypatch.setattr(sqlite_verify, "MAX_WORKERS", 1)
    monkeypatch.setattr(sqlite_verify, "_cpus", lambda: 2)
    path = tmp_path / "mentis.db"
    build(path)
    return path


def reports(path: Path) -> tuple[object, object]:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as con:
        con.execute("BEGIN")
        heads = {c: (s, h) for c, s, h in con.execute("SELECT chain, seq, hash FROM heads")}
        fast = sqlite_verify.parallel_verify(con, str(path), heads, _LEDGER_SCHEMA)
        rows = con.execute(
            "SELECT e.v, e.chain, e.seq, e.kind, e.id, e.at, e.agent, e.prev, e.body_hash, e.key_id, e.sig, "
            "e.hash, b.body FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid ORDER BY e.rowid"
        ).fetchall()
        con.execute("COMMIT")
    try:
        reference: object = [r.to_json() for r in verify_rows(rows, heads)]
    except IntegrityError as exc:
        reference = exc.message
    return (None if fast is None else [r.to_json() for r in fast]), reference


def test_a_store_with_skills_verifies_in_parallel_as_the_reference_does(store: Path) -> None:
    fast, reference = reports(store)
    assert fast is not None and fast == reference
    assert [r["bodies_erased"] for r in fast] == [0, 4]  # type: ignore[index]
    SqliteStore(store, 384).close()


def test_a_status_pointed_at_another_skills_version_is_refused_by_both_passes(store: Path) -> None:
    with contextlib.closing(sqlite3.connect(store, isolation_level=None)) as con:
        rowid, chain, seq, body = con.execute(
            "SELECT e.rowid, e.chain, e.seq, b.body FROM entries e JOIN bodies b ON b.rowid = e.rowid "
            "WHERE e.kind='skill_status'"
        ).fetchone()
        (target,) = con.execute(  # a version of cut-release, earlier on the same chain
            "SELECT e.id FROM entries e JOIN bodies b ON b.rowid = e.rowid WHERE e.kind='skill' "
            "AND e.chain=? AND e.seq<? AND instr(CAST(b.body AS TEXT), 'cut-release') LIMIT 1",
            (chain, seq),
        ).fetchone()
        doc = {**orjson.loads(body), "version_id": target}
        raw = canonical(doc)
        # an attacker who rewrites the body and every hash after it: only the links can tell
        con.execute("UPDATE bodies SET body=? WHERE rowid=?", (raw, rowid))
        rows = con.execute(
            "SELECT rowid, v, chain, seq, kind, id, at, agent, prev, body_hash, key_id FROM entries "
            "WHERE chain=? AND seq>=? ORDER BY seq",
            (chain, seq),
        ).fetchall()
        prev = None
        for r in rows:
            doc_e = dict(zip(("v", "chain", "seq", "kind", "id", "at", "agent"), r[1:8], strict=True))
            doc_e["prev"] = r[8] if prev is None else prev
            doc_e["body_hash"] = sha256_hex(raw) if r[0] == rowid else r[9]
            prev = entry_hash(doc_e)
            con.execute(
                "UPDATE entries SET prev=?, body_hash=?, hash=? WHERE rowid=?",
                (doc_e["prev"], doc_e["body_hash"], prev, r[0]),
            )
        con.execute("UPDATE heads SET hash=? WHERE chain=?", (prev, chain))
    fast, reference = reports(store)
    assert fast is None
    assert isinstance(reference, str) and "not version 4 of skill 'run-tests'" in reference
    opened = SqliteStore(store, 384)  # open refuses that chain, naming the entry
    try:
        assert "not version 4 of skill 'run-tests'" in str(opened.damaged[chain])
        with pytest.raises(IntegrityError):
            opened.verify()
    finally:
        opened.close()
