"""A ledger entry: its fields, its hash and how a new one is sealed (DESIGN §3).

An entry is ``{v, chain, seq, kind, id, at, agent, prev, body_hash, key_id?, sig?}``;
``hash = sha256(canonical(entry without sig))``, ``prev`` is the hash of entry ``seq - 1``
(``""`` for seq 0) and ``body_hash = sha256(canonical(body))``. Bodies are stored apart, so
forgetting erases a body while the entry, and with it the chain, stays verifiable.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from mentis.errors import IntegrityError
from mentis.ledger.canonical import sha256_hex

VERSION = 1
KINDS = frozenset(
    {
        "agent",
        "attempt",
        "branch",
        "checkpoint",
        "correction",
        "entity_type",
        "forget",
        "fork",
        "merge",
        "thought",
        "skill",
        "skill_status",
        "visibility",
    }
)
"""Entry kinds this version writes and reads. Unknown kinds fail verification."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger entry. ``hash`` covers every field but ``sig``."""

    chain: str
    seq: int
    kind: str
    id: str
    at: str
    agent: str
    prev: str
    body_hash: str
    hash: str
    key_id: str | None = None
    sig: str | None = None
    v: int = VERSION

    def document(self) -> dict[str, Any]:
        """The hashed document (everything except ``hash`` and ``sig``)."""
        return entry_document(
            self.v,
            self.chain,
            self.seq,
            self.kind,
            self.id,
            self.at,
            self.agent,
            self.prev,
            self.body_hash,
            self.key_id,
        )

    def to_json(self) -> dict[str, Any]:
        out = self.document()
        out["hash"] = self.hash
        if self.sig is not None:
            out["sig"] = self.sig
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Entry:
        try:
            return cls(
                v=data["v"],
                chain=data["chain"],
                seq=data["seq"],
                kind=data["kind"],
                id=data["id"],
                at=data["at"],
                agent=data["agent"],
                prev=data["prev"],
                body_hash=data["body_hash"],
                hash=data["hash"],
                key_id=data.get("key_id"),
                sig=data.get("sig"),
            )
        except (KeyError, TypeError) as exc:
            raise IntegrityError(f"malformed ledger entry: missing {exc}") from None


def entry_document(
    v: int,
    chain: str,
    seq: int,
    kind: str,
    id_: str,
    at: str,
    agent: str,
    prev: str,
    body_hash: str,
    key_id: str | None,
) -> dict[str, Any]:
    """The hashed document of an entry with these fields (``key_id`` only when signed)."""
    doc: dict[str, Any] = {
        "v": v,
        "chain": chain,
        "seq": seq,
        "kind": kind,
        "id": id_,
        "at": at,
        "agent": agent,
        "prev": prev,
        "body_hash": body_hash,
    }
    if key_id is not None:
        doc["key_id"] = key_id
    return doc


def entry_hash(doc: dict[str, Any]) -> str:
    # Entry documents hold only strings and small integers; keys are ASCII. The chain name
    # and ids are strings, which orjson and JCS encode identically (keys are what differ).
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


def seal(
    *,
    chain: str,
    seq: int,
    prev: str,
    kind: str,
    id: str,
    at: str,
    agent: str,
    body: bytes | None = None,
    body_hash: str | None = None,
    key_id: str | None = None,
    sig: str | None = None,
) -> Entry:
    """Build the entry that appends a body (``body``, or its ``body_hash``) at ``seq`` after an
    entry whose hash is ``prev``; a signed entry carries ``key_id`` (hashed) and ``sig`` (not)."""
    if kind not in KINDS:
        raise ValueError(f"unknown entry kind {kind!r}")
    if body_hash is None:
        assert body is not None, "seal needs the body or its hash"
        body_hash = sha256_hex(body)
    doc = entry_document(VERSION, chain, seq, kind, id, at, agent, prev, body_hash, key_id)
    return Entry(
        chain=chain,
        seq=seq,
        kind=kind,
        id=id,
        at=at,
        agent=agent,
        prev=prev,
        body_hash=body_hash,
        hash=entry_hash(doc),
        key_id=key_id,
        sig=sig,
    )
