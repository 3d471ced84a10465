"""The ledger: canonical encoding, entry hashing and chain verification (DESIGN §3).

An entry is ``{v, chain, seq, kind, id, at, agent, prev, body_hash, key_id?, sig?}``;
``hash = sha256(canonical(entry without sig))``, ``prev`` is the hash of entry ``seq - 1``
(``""`` for seq 0) and ``body_hash = sha256(canonical(body))``. Bodies are stored apart, so
forgetting erases a body while the entry, and with it the chain, stays verifiable.

``canonical`` is RFC 8785 (JCS). Hashed documents hold no floats and no integers beyond
±(2^53 - 1); within that domain orjson with sorted keys produces the same bytes as JCS as long
as every object key lies in the Basic Multilingual Plane (JCS sorts keys by UTF-16 code units,
orjson by code points; the two orders agree there). Documents outside the fast domain go
through the reference ``rfc8785`` encoder. ``tests/conformance/test_ledger.py`` proves byte-equality on a
hypothesis-generated corpus.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import rfc8785

from mentis.errors import IntegrityError, InvalidInput
from mentis.ledger.signatures import SignatureCheck
from mentis.ledger.signing import RESERVED_PREFIX
from mentis.store.sqlite.ledger_scan import RECORD_ID, body_links, link_error, record_kind

VERSION = 1
MAX_SAFE_INT = 2**53 - 1
KINDS = frozenset({"agent", "attempt", "correction", "forget", "thought", "skill", "skill_status"})
"""Entry kinds this version writes and reads. Unknown kinds fail verification."""

_SORT = orjson.OPT_SORT_KEYS


def _fast_domain(obj: Any) -> bool:
    """True when orjson's sorted output equals JCS for ``obj``; raises on floats."""
    if isinstance(obj, str) or obj is None or isinstance(obj, bool):
        return True
    if isinstance(obj, int):
        if -MAX_SAFE_INT <= obj <= MAX_SAFE_INT:
            return True
        raise InvalidInput(f"integer {obj} is outside ±(2^53 - 1) and cannot be hashed exactly")
    if isinstance(obj, float):
        raise InvalidInput("floats are not allowed in hashed documents; use integers or strings")
    if isinstance(obj, dict):
        ok = True
        for key, value in obj.items():
            if not isinstance(key, str):
                raise InvalidInput("object keys in hashed documents must be strings")
            if ok and not key.isascii() and any(ord(ch) > 0xFFFF for ch in key):
                ok = False
            if not _fast_domain(value):
                ok = False
        return ok
    if isinstance(obj, list | tuple):
        return all([_fast_domain(item) for item in obj])
    raise InvalidInput(f"{type(obj).__name__} values cannot be hashed")


def canonical(obj: Any) -> bytes:
    """RFC 8785 canonical bytes of ``obj`` (no floats; integers within ±(2^53 - 1))."""
    if _fast_domain(obj):
        return orjson.dumps(obj, option=_SORT)
    return rfc8785.dumps(obj)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
        return _document(
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


def _document(
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
    return hashlib.sha256(orjson.dumps(doc, option=_SORT)).hexdigest()


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
    doc = _document(VERSION, chain, seq, kind, id, at, agent, prev, body_hash, key_id)
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


# ---------------------------------------------------------------- verification


Row = tuple[Any, ...]
"""(v, chain, seq, kind, id, at, agent, prev, body_hash, key_id, sig, hash, body | None)."""


@dataclass
class ChainReport:
    chain: str
    entries: int = 0
    head_seq: int = -1
    head_hash: str = ""
    bodies_erased: int = 0
    _missing: list[int] = field(default_factory=list, repr=False)
    _erased: set[int] = field(default_factory=set, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "chain": self.chain,
            "ok": True,
            "entries": self.entries,
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "bodies_erased": self.bodies_erased,
        }


def _fail(chain: str, seq: int, what: str) -> IntegrityError:
    return IntegrityError(
        f"ledger does not verify: chain {chain!r} seq {seq}: {what}. "
        "The store was changed outside Mentis; restore it from a backup or an export.",
        chain=chain,
        seq=seq,
        what=what,
    )


def chain_refused(cause: IntegrityError) -> IntegrityError:
    """The error every read and write of a chain that did not verify gets (``cause`` is its
    verification failure, naming the chain): it names the chain, the seq and what failed."""
    return IntegrityError(
        f"repository {cause.chain!r} is refused: ledger chain {cause.chain!r} seq {cause.seq} does not "
        f"verify ({cause.what}); the other repositories are served. Run `mentis doctor` to recover it",
        chain=cause.chain,
        seq=cause.seq,
        what=cause.what,
    )


def isolate(
    verify: Callable[[frozenset[str]], list[ChainReport]],
) -> tuple[list[ChainReport], dict[str, IntegrityError]]:
    """Verify chain by chain: the reports of the chains that verify, and each damaged chain's
    failure (its first).

    ``verify(skip)`` verifies the ledger leaving out the chains in ``skip`` and raises at the first
    failure, as :func:`verify_rows` does. A failure that names a repository's chain adds that chain
    to ``skip`` and the ledger is verified again without it, until the rest verifies. A failure of
    the whole store (no chain named: an orphan body) or of a system chain (the agent registry, which
    every signature is checked against) raises: such a store still refuses to open.
    """
    damaged: dict[str, IntegrityError] = {}
    while True:
        try:
            return verify(frozenset(damaged)), damaged
        except IntegrityError as exc:
            if exc.chain is None or exc.chain.startswith(RESERVED_PREFIX) or exc.chain in damaged:
                raise
            # a copy without the traceback, whose frames would keep the verifier's cursor open
            damaged[exc.chain] = IntegrityError(exc.message, exc.chain, exc.seq, exc.what)


def verify_rows(
    rows: Iterable[Row],
    heads: dict[str, tuple[int, str]] | None = None,
    *,
    signatures: bool = False,
    skip: frozenset[str] = frozenset(),
) -> list[ChainReport]:
    """Verify ledger rows; raise IntegrityError at the first mismatch.

    Rows come in ledger order (a store's rowid order, an export's line order): chains interleave
    and each chain's entries come in seq order. Signed entries and the agent registry are checked
    as :mod:`mentis.ledger.signatures` says (where an entry stands relative to the registry is read from
    hashed fields, never from the order of the rows): the last signature of each signing stream,
    or with ``signatures`` every signature. ``heads`` (chain → (seq, hash)), when given, is the store's
    record of each chain's head; a chain whose last entry differs from it (truncation) or a head
    with no chain fails.

    Each body must also stand in its own chain (:func:`mentis.store.sqlite.ledger_scan.body_links`): it
    names the entry's chain and, for an attempt or thought, the entry's id, and it targets only
    earlier records of that chain. No two attempts or thoughts share an id.

    The chains in ``skip`` (found damaged before: :func:`isolate`) are left out: no report, no
    check of theirs, their records not noted. Only their entries whose hash holds still go to the
    signature check, so the signing streams they share with other chains stay whole; and then
    every signature is verified, as with ``signatures``.
    """
    reports: dict[str, ChainReport] = {}
    records: dict[str, tuple[str, str, int]] = {}  # attempt or thought id → (chain, kind, seq)
    stray: dict[str, int] = {}
    sha256 = hashlib.sha256
    dumps = orjson.dumps
    # Leaving chains out, every signature is checked as it comes: a stream's last statement may lie
    # in a left-out chain, and then it cannot vouch for the stream's statements before it.
    signed = SignatureCheck(every=signatures or bool(skip))
    for v, chain, seq, kind, id_, at, agent, prev, body_hash, key_id, sig, hash_, body in rows:
        if skip and chain in skip:
            if (sig is not None or key_id is not None) and _hash_holds(
                v, chain, seq, kind, id_, at, agent, prev, body_hash, key_id, hash_
            ):
                signed.entry(chain, seq, kind, id_, at, agent, body_hash, key_id, sig, placed=False)
            continue
        report = reports.get(chain)
        if report is None:
            if heads is not None and chain not in heads:
                # reported after the pass, so a chain that lost this entry names itself first
                stray.setdefault(chain, seq)
                continue
            report = reports[chain] = ChainReport(chain)
        if seq != report.entries:
            raise _fail(chain, report.entries, f"expected seq {report.entries}, found seq {seq}")
        if prev != report.head_hash:
            raise _fail(chain, seq, "prev does not match the hash of the entry before it")
        if v != VERSION or kind not in KINDS:
            raise _fail(chain, seq, f"unknown entry version {v!r} or kind {kind!r}")
        # keys in sorted order, so orjson's insertion order is the canonical order
        if key_id is None:
            doc = {"agent": agent, "at": at, "body_hash": body_hash, "chain": chain, "id": id_, "kind": kind,
                   "prev": prev, "seq": seq, "v": v}  # fmt: skip
        else:
            doc = {"agent": agent, "at": at, "body_hash": body_hash, "chain": chain, "id": id_,
                   "key_id": key_id, "kind": kind, "prev": prev, "seq": seq, "v": v}  # fmt: skip
        try:
            hashed = sha256(dumps(doc)).hexdigest()
        except TypeError:  # orjson.JSONEncodeError: a column holds a blob
            raise _fail(chain, seq, "an entry column holds a value of the wrong type") from None
        if hashed != hash_:
            raise _fail(chain, seq, "entry hash does not match its contents")
        if failed := signed.entry(chain, seq, kind, id_, at, agent, body_hash, key_id, sig):
            raise _fail(*failed)
        if kind in RECORD_ID:
            noted = (chain, record_kind(kind, body), seq)
            first = records.setdefault(id_, noted)
            if first != noted:
                raise _fail(
                    chain, seq, f"record id {id_!r} is already used at chain {first[0]!r} seq {first[2]}"
                )
        if body is None:
            report._missing.append(seq)
        else:
            try:
                body_hashed = sha256(body).hexdigest()
            except TypeError:  # text or a number where the body's bytes should be
                raise _fail(chain, seq, "body is not a blob") from None
            if body_hashed != body_hash:
                raise _fail(chain, seq, "body does not match its body_hash")
            links = body_links(chain, kind, id_, body)
            if isinstance(links, str):
                raise _fail(chain, seq, links)
            for target, want in links:
                if (why := link_error(records, chain, seq, target, want)) is not None:
                    raise _fail(chain, seq, why)
            if kind == "forget":
                report._erased.update(erased_seqs(chain, seq, body))
        if kind == "agent" and (failed := signed.registry_event(chain, seq, body)):
            raise _fail(*failed)
        report.entries += 1
        report.head_seq = seq
        report.head_hash = hash_
    for report in reports.values():
        _close(report)
    if failed := signed.finish():
        raise _fail(*failed)
    if heads is not None:
        for chain, (seq, hash_) in heads.items():
            if chain in skip:
                continue
            r = reports.get(chain)
            if r is None:
                raise _fail(chain, seq, "the chain head is recorded but the chain has no entries")
            if (r.head_seq, r.head_hash) != (seq, hash_):
                raise _fail(
                    chain,
                    r.head_seq + 1,
                    f"chain ends at seq {r.head_seq} but its recorded head is seq {seq} "
                    "(entries were removed or the head was altered)",
                )
        for chain, seq in stray.items():
            raise _fail(chain, seq, "the entry names a chain that has no recorded head")
    return sorted(reports.values(), key=lambda r: r.chain)


def _hash_holds(*columns: Any) -> bool:
    """Whether an entry's columns (``v`` to ``key_id`` in :func:`_document` order, then ``hash``)
    hash to its ``hash``; values of a wrong type do not."""
    try:
        return bool(entry_hash(_document(*columns[:10])) == columns[10])
    except TypeError:
        return False


def erased_seqs(chain: str, seq: int, body: bytes) -> list[int]:
    """The seqs a forget tombstone at ``seq`` lists as erased; IntegrityError if it is malformed."""
    try:
        erased = orjson.loads(body)["erased"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise _fail(chain, seq, "forget tombstone body is malformed") from None
    if not isinstance(erased, list) or not all(isinstance(s, int) and s < seq for s in erased):
        raise _fail(chain, seq, "forget tombstone lists invalid seqs")
    return erased


def _close(report: ChainReport) -> None:
    for seq in report._missing:
        if seq not in report._erased:
            raise _fail(report.chain, seq, "body is missing and no forget tombstone explains it")
    report.bodies_erased = len(report._missing)


def entry_rows(pairs: Iterable[tuple[Entry, bytes | None]]) -> Iterator[Row]:
    """Rows for :func:`verify_rows` from parsed entries (used for exports)."""
    for e, body in pairs:
        yield (
            e.v,
            e.chain,
            e.seq,
            e.kind,
            e.id,
            e.at,
            e.agent,
            e.prev,
            e.body_hash,
            e.key_id,
            e.sig,
            e.hash,
            body,
        )
