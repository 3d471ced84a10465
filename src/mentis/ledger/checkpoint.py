"""Signed checkpoints: a small document naming each chain's head, signed by an operator key.

A checkpoint is JSON (``schema`` :data:`SCHEMA`)::

    {"schema": "mentis.checkpoint/1", "at": "2026-…Z", "agent": "ops", "key_id": "ed25519:…",
     "chains": [{"chain": "github.com/acme/shop", "seq": 41, "hash": "<64 hex>"}, …],
     "sig": "<base64url Ed25519 signature, 86 characters>"}

``sig`` is Ed25519 over :func:`mentis.ledger.canonical.canonical` of the document without ``sig``
(RFC 8785, so any JCS library reproduces the signed bytes). ``chains`` is sorted by chain id and
names each chain once. A checkpoint holds heads only, never content, so it may be kept anywhere:
committed into the repository, posted to a witness, printed for a person.

A store *holds* a checkpoint when every chain it names still has an entry at that seq whose hash is
that hash (:func:`mismatch`): a store that is ahead holds it, one rewritten at or before that seq
(even with every hash recomputed), cut short or rolled back to an older copy does not. The
signature must verify with a key of the registry that belongs to ``agent`` and was active at
``at`` (:func:`signature_error`). Nothing here touches a store.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mentis.errors import InvalidInput
from mentis.ledger import signing
from mentis.ledger.canonical import MAX_SAFE_INT, canonical
from mentis.ledger.links import CHECKPOINT_SCHEMA as SCHEMA
from mentis.ledger.links import CHECKPOINTS_CHAIN as CHECKPOINTS_CHAIN
from mentis.ledger.registry import Registry

MAX_CHAINS = 100_000
MAX_BYTES = 16 << 20
"""The largest checkpoint file read (a chain's line is about 130 bytes)."""
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_FIELDS = {"schema", "at", "agent", "key_id", "chains", "sig"}


@dataclass(frozen=True, slots=True)
class Head:
    chain: str
    seq: int
    hash: str

    def to_json(self) -> dict[str, Any]:
        return {"chain": self.chain, "seq": self.seq, "hash": self.hash}


@dataclass(frozen=True, slots=True)
class Checkpoint:
    at: str
    agent: str
    key_id: str
    chains: tuple[Head, ...]
    sig: str

    def unsigned(self) -> dict[str, Any]:
        """The signed document: everything but ``sig``."""
        return {
            "schema": SCHEMA,
            "at": self.at,
            "agent": self.agent,
            "key_id": self.key_id,
            "chains": [h.to_json() for h in self.chains],
        }

    def to_json(self) -> dict[str, Any]:
        return self.unsigned() | {"sig": self.sig}

    def text(self) -> bytes:
        """The file's bytes: indented JSON, keys in a stable order, a final newline."""
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2) + b"\n"

    def head(self, chain: str) -> Head | None:
        return next((h for h in self.chains if h.chain == chain), None)


def sign(key: Ed25519PrivateKey, agent: str, at: str, heads: list[Head]) -> Checkpoint:
    """The checkpoint of ``heads`` at ``at``, signed with ``key`` for ``agent``."""
    chains = tuple(sorted(heads, key=lambda h: h.chain))
    draft = Checkpoint(at, agent, signing.key_id_of(key.public_key()), chains, "")
    signature = base64.urlsafe_b64encode(key.sign(canonical(draft.unsigned()))).rstrip(b"=").decode()
    return Checkpoint(draft.at, draft.agent, draft.key_id, chains, signature)


def _bad(field: str, why: str) -> InvalidInput:
    return InvalidInput(f"checkpoint field {field!r}: {why}", field=field)


def parse(data: bytes) -> Checkpoint:
    """The checkpoint in ``data``; InvalidInput naming the field that is wrong (the signature is
    only checked for its form here: :func:`signature_error` verifies it)."""
    if len(data) > MAX_BYTES:
        raise InvalidInput(
            f"a checkpoint is at most {MAX_BYTES} bytes, found {len(data)}", field="checkpoint"
        )
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"a checkpoint is JSON; this is not ({exc})", field="checkpoint") from None
    if type(doc) is not dict:
        raise InvalidInput("a checkpoint is a JSON object", field="checkpoint")
    schema = doc.get("schema")
    if schema != SCHEMA:
        raise _bad("schema", f"expected {SCHEMA!r}, found {schema!r} (a checkpoint of another version?)")
    for name in sorted(_FIELDS - set(doc)):
        raise _bad(name, "missing")
    for name in sorted(set(doc) - _FIELDS):
        raise _bad(name, "unknown field")
    for name in ("at", "agent", "key_id", "sig"):
        if type(doc[name]) is not str:
            raise _bad(name, "must be a string")
    try:
        signing.parse_at(doc["at"])
    except InvalidInput as exc:
        raise _bad("at", exc.message) from None
    if not re.fullmatch(r"ed25519:[0-9a-f]{32}", doc["key_id"]):
        raise _bad("key_id", "must be ed25519: and 32 hex digits")
    if not re.fullmatch(r"[A-Za-z0-9_-]{86}", doc["sig"]):
        raise _bad("sig", "must be 86 base64url characters (an Ed25519 signature)")
    chains = doc["chains"]
    if type(chains) is not list or not chains or len(chains) > MAX_CHAINS:
        raise _bad("chains", f"must be a list of 1 to {MAX_CHAINS} chain heads")
    heads: list[Head] = []
    for i, item in enumerate(chains):
        where = f"chains[{i}]"
        if type(item) is not dict or set(item) != {"chain", "seq", "hash"}:
            raise _bad(where, "must be an object with exactly chain, seq and hash")
        if type(item["chain"]) is not str or not item["chain"]:
            raise _bad(f"{where}.chain", "must be a non-empty string")
        if type(item["seq"]) is not int or not 0 <= item["seq"] <= MAX_SAFE_INT:
            raise _bad(f"{where}.seq", "must be an integer from 0")
        if type(item["hash"]) is not str or not _HEX64.match(item["hash"]):
            raise _bad(f"{where}.hash", "must be 64 lowercase hex digits (a SHA-256)")
        heads.append(Head(item["chain"], item["seq"], item["hash"]))
    names = [h.chain for h in heads]
    if names != sorted(set(names)):
        raise _bad("chains", "must name each chain once, sorted by chain")
    return Checkpoint(doc["at"], doc["agent"], doc["key_id"], tuple(heads), doc["sig"])


def signature_error(cp: Checkpoint, registry: Registry) -> str | None:
    """Why ``cp``'s signature does not vouch for it (None when it does): the key must be in the
    registry, be ``agent``'s, have been added at or before ``at`` and not revoked by then, and
    its signature must verify over the document."""
    key = registry.keys.get(cp.key_id)
    if key is None:
        return f"its key {cp.key_id} is not in the agent registry"
    agent = registry.resolve(cp.agent)
    if agent is None or agent.agent_id != key.agent_id:
        return f"its key {cp.key_id} belongs to agent {key.agent_id!r}, not {cp.agent!r}"
    if cp.at < key.added_at:
        return f"it is dated {cp.at}, before its key {cp.key_id} was added ({key.added_at})"
    if key.revoked_at is not None and cp.at >= key.revoked_at:
        return f"it is dated {cp.at}, after its key {cp.key_id} was revoked ({key.revoked_at})"
    public = signing.parse_public(key.public_key)
    try:
        public.verify(base64.urlsafe_b64decode(cp.sig + "=="), canonical(cp.unsigned()))
    except (binascii.Error, ValueError, InvalidSignature):
        return "its signature does not verify (the file was changed after it was signed, or forged)"
    return None


def mismatch(head: Head, found: tuple[int, str] | None, stored: str | None) -> str | None:
    """Why the store does not hold ``head`` (None when it does): ``found`` is the chain's
    recorded head (seq, hash) or None, ``stored`` the hash of its entry at ``head.seq``."""
    if found is None:
        return "the store has no such chain (a rollback to a copy from before it, or it was removed)"
    if stored is None:
        return (
            f"the chain ends at seq {found[0]}, before the checkpoint's seq {head.seq} "
            "(its tail was removed or the store was rolled back to an older copy)"
        )
    if stored != head.hash:
        return (
            f"its entry at seq {head.seq} has hash {stored[:16]}…, the checkpoint says {head.hash[:16]}… "
            "(history up to that seq was rewritten)"
        )
    return None


__all__ = [
    "CHECKPOINTS_CHAIN",
    "SCHEMA",
    "Checkpoint",
    "Head",
    "mismatch",
    "parse",
    "sign",
    "signature_error",
]
