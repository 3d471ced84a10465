"""The attacker who can write the SQLite file and knows the format: rewrite one entry's body and
recompute every hash after it (its body hash, its entry hash, each later entry's ``prev`` and hash,
and the chain's recorded head), so that plain hash-chain verification passes.

Usable as a script: ``python -m tests.checkpoints.attacker DB CHAIN SEQ FIELD VALUE``.
"""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import orjson
import rfc8785


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def rewrite_and_rehash(db: Path, chain: str, seq: int, field: str, value: str) -> None:
    """Set ``field`` of the body at ``chain``/``seq`` to ``value`` and reseal the chain from there."""
    with closing(sqlite3.connect(db, isolation_level=None)) as con:
        con.execute("BEGIN IMMEDIATE")
        rows = con.execute(
            "SELECT e.rowid, e.v, e.seq, e.kind, e.id, e.at, e.agent, e.prev, e.body_hash, e.key_id, b.body "
            "FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid "
            "WHERE e.chain=? AND e.seq>=? ORDER BY e.seq",
            (chain, seq),
        ).fetchall()
        prev: str | None = None
        for rowid, v, s, kind, id_, at, agent, old_prev, body_hash, key_id, body in rows:
            assert key_id is None, "this attacker has no key: it rewrites unsigned entries only"
            if s == seq:
                doc = orjson.loads(body)
                doc[field] = value
                raw = rfc8785.dumps(doc)
                body_hash = _sha(raw)
                con.execute("UPDATE bodies SET body=? WHERE rowid=?", (raw, rowid))
            entry = {
                "v": v,
                "chain": chain,
                "seq": s,
                "kind": kind,
                "id": id_,
                "at": at,
                "agent": agent,
                "prev": old_prev if prev is None else prev,
                "body_hash": body_hash,
            }
            prev = _sha(rfc8785.dumps(entry))
            con.execute(
                "UPDATE entries SET prev=?, body_hash=?, hash=? WHERE rowid=?",
                (entry["prev"], body_hash, prev, rowid),
            )
        con.execute("UPDATE heads SET hash=? WHERE chain=?", (prev, chain))
        con.execute("COMMIT")


if __name__ == "__main__":
    db, chain, seq, field, value = sys.argv[1:6]
    rewrite_and_rehash(Path(db), chain, int(seq), field, value)
