"""Chain verification (DESIGN §3): :func:`verify_rows` checks ledger rows entry by entry.

Each chain's seqs run from 0 without a gap, each ``prev`` is the hash of the entry before, each
entry hashes to its ``hash`` (:mod:`mentis.ledger.entry`) and each body to its ``body_hash``; a
missing body is explained by a forget tombstone, each body stands in its own chain and points only
at earlier records of it (:mod:`mentis.ledger.links`), and signatures and the agent registry hold
(:mod:`mentis.ledger.signatures`). :func:`isolate` verifies chain by chain, so one damaged
repository is refused on its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from mentis.errors import IntegrityError
from mentis.ledger.branches import GENESIS, BranchGraph, Fork, Merge
from mentis.ledger.entry import KINDS, VERSION, Entry, entry_document, entry_hash
from mentis.ledger.links import (
    BRANCH_POINTS,
    RECORD_ID,
    RESERVED_PREFIX,
    Records,
    body_links,
    link_error,
    record_kind,
)
from mentis.ledger.signatures import SignatureCheck

Row = tuple[Any, ...]
"""(v, chain, seq, kind, id, at, agent, prev, body_hash, key_id, sig, hash, body | None)."""
HashAt = Callable[[Iterable[tuple[str, int]]], dict[tuple[str, int], str]]
"""The hash of the entry at each (chain, seq) that exists (``LedgerCore.entry_hashes``)."""


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
    hash_at: HashAt | None = None,
) -> list[ChainReport]:
    """Verify ledger rows; raise IntegrityError at the first mismatch.

    Rows come in ledger order (a store's rowid order, an export's line order): chains interleave
    and each chain's entries come in seq order. Signed entries and the agent registry are checked
    as :mod:`mentis.ledger.signatures` says (where an entry stands relative to the registry is read from
    hashed fields, never from the order of the rows): the last signature of each signing stream,
    or with ``signatures`` every signature. ``heads`` (chain → (seq, hash)), when given, is the store's
    record of each chain's head; a chain whose last entry differs from it (truncation) or a head
    with no chain fails.

    Each body must also stand in its own chain (:func:`mentis.ledger.links.body_links`): it
    names the entry's chain and, for an attempt or thought, the entry's id, and it targets only
    earlier records of that chain. No two attempts or thoughts share an id.

    The chains in ``skip`` (found damaged before: :func:`isolate`) are left out: no report, no
    check of theirs, their records not noted. Only their entries whose hash holds still go to the
    signature check, so the signing streams they share with other chains stay whole; and then
    every signature is verified, as with ``signatures``.

    Branches (:mod:`mentis.ledger.branches`): a ``fork`` stands only at seq 0 of its chain, a
    ``branch`` entry names a chain that forked from its own, and every fork point and merged head
    must be an entry of the chain it names with the hash it names (looked up after the pass with
    ``hash_at``, the store's index of entries; without it, from the hashes of the rows). A body of
    a branch may link to records of the chains it reads (:meth:`BranchGraph.reach`).
    """
    reports: dict[str, ChainReport] = {}
    graph = BranchGraph()
    points: list[tuple[str, int, str, int, str]] = []  # (chain, seq, names chain, its seq, its hash)
    seen: dict[tuple[str, int], str] | None = {} if hash_at is None else None
    records: Records = {}
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
        doc = {"agent": agent, "at": at, "body_hash": body_hash, "chain": chain, "id": id_}
        if key_id is not None:
            doc["key_id"] = key_id
        doc |= {"kind": kind, "prev": prev, "seq": seq, "v": v}
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
            reach = graph.reach(chain) if links and (graph.forks or graph.merges) else None
            for target, want in links:
                if (why := link_error(records, chain, seq, target, want, reach)) is not None:
                    raise _fail(chain, seq, why)
            if kind in BRANCH_POINTS:
                points.append(_branch_point(graph, chain, seq, kind, body, skip))
            if kind == "forget":
                report._erased.update(erased_seqs(chain, seq, body))
        if kind == "agent" and (failed := signed.registry_event(chain, seq, body)):
            raise _fail(*failed)
        report.entries += 1
        report.head_seq = seq
        report.head_hash = hash_
        if seen is not None:
            seen[chain, seq] = hash_
    for report in reports.values():
        _close(report)
    _check_points(points, seen, hash_at)
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


def _branch_point(
    graph: BranchGraph, chain: str, seq: int, kind: str, body: bytes, skip: frozenset[str]
) -> tuple[str, int, str, int, str]:
    """Note a fork, branch or merge entry in ``graph``; the point of another chain it names."""
    named, seq_key, hash_key = BRANCH_POINTS[kind]
    doc = orjson.loads(body)  # body_links has checked the three fields' types
    other, other_seq, other_hash = doc[named], doc[seq_key], doc[hash_key]
    if kind == "fork":
        if seq != 0:
            raise _fail(chain, seq, "a fork entry stands only at seq 0 of its branch's chain")
        root, branch = doc.get("root"), doc.get("branch")
        if type(root) is not str or type(branch) is not str or chain != f"{root}:{branch}":
            raise _fail(
                chain, seq, "a fork entry names its repository and branch, root:branch being its chain"
            )
        graph.add_fork(Fork(chain, root, branch, other, other_seq, other_hash))
    elif kind == "branch":
        fork = graph.forks.get(other)
        if other not in skip and (fork is None or fork.parent != chain):
            raise _fail(chain, seq, f"names branch chain {other!r}, which did not fork from this chain")
        if other_seq >= seq:
            raise _fail(chain, seq, "names a fork point at or after itself")
        return chain, seq, chain, other_seq, other_hash  # the fork point is this chain's own entry
    else:
        if other == chain or other in graph.ancestors(chain):
            raise _fail(chain, seq, f"merges chain {other!r}, which is this chain or one it forked from")
        graph.add_merge(Merge(chain, seq, other, other_seq, other_hash))
    return chain, seq, other, other_seq, other_hash


def verify_branch_entries(rows: Iterable[tuple[str, int, str, bytes]], hash_at: HashAt) -> None:
    """The checks :func:`verify_rows` makes of the fork, branch and merge entries among the rows
    (``(chain, seq, kind, body)`` in ledger order, each entry's and body's hash already checked):
    for a verifier that checked the rest of the ledger (SQLite's block scans). Raises as it would."""
    graph = BranchGraph()
    points = [_branch_point(graph, chain, seq, kind, body, frozenset()) for chain, seq, kind, body in rows]
    _check_points(points, None, hash_at)


def _check_points(
    points: list[tuple[str, int, str, int, str]],
    seen: dict[tuple[str, int], str] | None,
    hash_at: HashAt | None,
) -> None:
    """Every fork point and merged head names an entry of its chain with its hash."""
    if not points:
        return
    keys = {(other, other_seq) for _, _, other, other_seq, _ in points}
    found = hash_at(keys) if hash_at is not None else {k: seen[k] for k in keys if seen and k in seen}
    for chain, seq, other, other_seq, other_hash in points:
        if (other_seq, other_hash) == GENESIS and (chain == other or chain.startswith(f"{other}:")):
            continue  # a fork of a repository that had no entries yet, before its first one
        if found.get((other, other_seq)) != other_hash:
            raise _fail(
                chain,
                seq,
                f"names chain {other!r} seq {other_seq} with hash {other_hash[:16]}…, which is not "
                "that chain's entry there (the chain it names was rewritten, or this entry was)",
            )


def _hash_holds(*columns: Any) -> bool:
    """Whether an entry's columns (``v`` to ``key_id`` in :func:`entry_document` order, then ``hash``)
    hash to its ``hash``; values of a wrong type do not."""
    try:
        return bool(entry_hash(entry_document(*columns[:10])) == columns[10])
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
