"""Block scans of a SQLite ledger for ``SqliteStore.verify``, and the worker process running them.

A *block* is a range of entry rowids. :func:`scan_block` checks every entry in it as
:func:`mentis.ledger.chain.verify_rows` does: the entry hash recomputed from its columns, the body's
sha256 against ``body_hash``, the version, the kind, and seq and prev continuity between the
entries of one chain inside the block; it also rules out orphan bodies in the range. What needs
the rest of the ledger goes back to the stitch (``sqlite_verify``): each chain's first (seq, prev)
and last (seq + 1, hash) in the block, its missing bodies and the bodies of its forget tombstones.

Signed entries (``key_id`` and ``sig``) are checked as far as a block can: the envelope parses,
and the statements of one signing stream inside the block link (``n + 1``, ``prev`` = the digest
of the statement before, one key and one agent). The block reports each stream's first and last
statement, the registry events it holds and each entry of the registry chain (rowid, agent, key),
and for the other entries what the time rules of :mod:`mentis.ledger.signatures` read: per agent the latest
``at`` of an unsigned entry, per key and agent the earliest and latest ``at`` of a signed one, and
per agent the last rowid of an unsigned and the first of a signed entry; ``sqlite_sigstitch``
folds the registry and checks the rest (keys, revocations, disabled agents, links across blocks,
one signature per stream).

A scan answers ``None`` when the block does not verify *or might not*; the caller then runs the
reference verifier, which finds the first failing entry and names it. So nothing here words an
error, a mismatch here is never reported as tampering by itself, and nothing here may pass what
the reference would refuse.

**Entry documents** are rendered with f-strings, not orjson: as fast, and a worker finds orjson
only once it has started (below). :func:`render_quoted` escapes every string exactly as RFC 8785 does.
The hot loop uses the plain template (:func:`render_plain`), whose bytes are RFC 8785's when no
string in the entry needs escaping, and only on chunks where that holds for every row: ``agent``,
``at``, ``chain`` and ``id`` hold no ``"``, ``\\`` or control character, and every row has a body.
The other strings are proven plain by what they must equal: ``kind`` a known kind, ``body_hash``
the body's hex digest, ``prev`` the hash before it (for a block's first entry of a chain, the stitch
ties it to the previous block's last hash or to ``""``). Any other chunk is rendered quoted.
``tests/test_verify_parallel.py`` proves both renderings byte-equal to ``ledger.canonical``.

**Attempt-only chunks**, the bulk of a large store, go through :meth:`_Scan.attempts`: the plain
loop with :func:`mentis.ledger.links.body_links`' rule for an attempt inline (the body is still
parsed whole: only a full parse tells whether it is JSON and which of two equal keys counts).

**The worker.** A worker is ``python -S -P -c`` :data:`WORKER` (no site, no script directory on
``sys.path``): it puts the directories this process imported mentis and orjson from on its path and
runs :func:`worker`. This module imports only the standard library, orjson (to parse bodies
exactly as the reference verifier does) and :mod:`mentis.ledger.links`, and nothing of ``typing``,
so a worker starts in about 20 ms, where importing ``mentis.service`` takes 400 ms. Its arguments
are the store's read-only URI, the fd of a pipe of blocks (rowid ranges) shared with the other
processes, the version and the known kinds. It takes blocks until the pipe is empty, all in one
read snapshot, and writes its scans as one marshal on stdout.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sqlite3
import sys
from itertools import chain as concat
from operator import itemgetter

from orjson import loads

from mentis.ledger.links import RECORD_ID, RESERVED_PREFIX, body_links, record_kind

TYPE_CHECKING = False  # typing is not imported at run time: it would add 6 ms to a worker's start
if TYPE_CHECKING:
    from typing import Any, NoReturn, TypeAlias

    Row: TypeAlias = tuple[Any, ...]
    ChainSpan: TypeAlias = tuple[int, str, int, str]
    """(first seq, its prev, last seq + 1, last hash) of one chain in one block."""
    StreamSpan: TypeAlias = list[Any]
    """[key_id, agent, first n, first prev, first rowid, last n, last digest, last rowid, last
    statement's canonical bytes, last signature] of one signing stream in one block."""
    Signed: TypeAlias = tuple[
        list[tuple[int, bytes]],
        dict[str, int],
        dict[str, int],
        dict[str, StreamSpan],
        list[tuple[int, str, Any]],
        dict[str, str],
        dict[tuple[str, str], list[str]],
    ]
    """((rowid, body) of each registry event, agent → last rowid of an unsigned entry, agent → first
    rowid of a signed one, stream → span, (rowid, agent, key_id or None) of each entry of the
    registry chain, and outside that chain: agent → latest ``at`` of an unsigned entry, (key_id,
    agent) → [earliest, latest ``at``] of a signed one)."""
    BlockScan: TypeAlias = tuple[
        dict[str, ChainSpan],
        dict[str, list[int]],
        list[tuple[str, int, bytes]],
        list[tuple[str, str, str, int]],
        list[tuple[str, int, str, str]],
        Signed,
    ]
    """(chain → span, chain → seqs with no body in rowid order, (chain, seq, body) of each forget
    entry that has a body, (id, chain, kind, seq) of each attempt and thought entry, (chain, seq,
    target id, kind wanted) of each link a body makes, what the signature stitch needs)."""

CHUNK = 256
"""Rows fetched at a time; the checks that look at many rows at once run once per chunk."""
QUEUE_ITEM = 16
"""Bytes per block in a queue: first and last rowid, 8 bytes each (see ``queue_item``)."""
BUSY_TIMEOUT_MS = 30_000
MMAP_BYTES = 1 << 30
"""Workers read through a memory map (3 ms less of 300 at 100k entries)."""

SELECT_BLOCK = (
    "SELECT e.agent, e.at, e.body_hash, e.chain, e.id, e.kind, e.prev, "
    "CASE WHEN typeof(e.seq) = 'integer' AND typeof(e.v) = 'integer' AND e.v = ? "
    "THEN e.seq END, e.hash, b.body, e.key_id, e.sig, e.rowid "
    "FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid "
    "WHERE e.rowid BETWEEN ? AND ? ORDER BY e.rowid"
)
"""The entry document's fields in sorted key order but ``key_id`` (``v`` is the version asked for),
then hash, body, key_id, sig and rowid. ``seq`` comes back NULL unless seq and v are integers and v
is the version; a NULL seq never links (``seq + 1`` raises, ``!=`` an int is true), so those
entries are the reference verifier's."""

_ESCAPES = {c: f"\\u{c:04x}" for c in range(0x20)} | {
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0C: "\\f",
    0x0D: "\\r",
    0x22: '\\"',
    0x5C: "\\\\",
}
_NEEDS_ESCAPE = bytes(range(0x20)) + b'"\\'
"""The characters RFC 8785 escapes, as UTF-8 bytes; none occurs inside a multi-byte sequence."""

_FREE_TEXT = itemgetter(0, 1, 3, 4)  # agent, at, chain, id
_AT = itemgetter(1)
_CHAIN, _KIND, _BODY = itemgetter(3), itemgetter(5), itemgetter(9)
_ATTEMPT = "attempt"
_ATTEMPTS = {_ATTEMPT}
_AGENT, _KEY, _SIG, _ROWID = itemgetter(0), itemgetter(10), itemgetter(11), itemgetter(12)
_UNSIGNED = {None}
_sha256 = hashlib.sha256
_HEX = "0123456789abcdef"
_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def quote(value: object) -> str:
    """``value`` as an RFC 8785 string (TypeError unless it is a str)."""
    if type(value) is not str:
        raise TypeError(f"expected a string, found {type(value).__name__}")
    return '"' + value.translate(_ESCAPES) + '"'


def needs_escape(text: str) -> bool:
    """Whether ``text`` holds a character RFC 8785 escapes (``"``, ``\\`` or U+0000 to U+001F)."""
    raw = text.encode()
    return len(raw.translate(None, _NEEDS_ESCAPE)) != len(raw)


def _reserved(chain: str) -> bool:
    return chain.startswith(RESERVED_PREFIX)


def render_plain(
    agent: str, at: str, body_hash: str, chain: str, id_: str, kind: str, prev: str, seq: int, v: int
) -> str:
    """The entry document by the template: canonical when no string needs escaping.

    The hot loop in :meth:`_Scan.plain` inlines this f-string; the tests check both are one.
    """
    return (
        f'{{"agent":"{agent}","at":"{at}","body_hash":"{body_hash}","chain":"{chain}","id":"{id_}",'
        f'"kind":"{kind}","prev":"{prev}","seq":{seq},"v":{v}}}'
    )


def render_quoted(
    agent: str, at: str, body_hash: str, chain: str, id_: str, kind: str, prev: str, seq: int, v: int
) -> str:
    """The entry document with every string escaped: canonical for any strings."""
    q = quote
    return (
        f'{{"agent":{q(agent)},"at":{q(at)},"body_hash":{q(body_hash)},"chain":{q(chain)},'
        f'"id":{q(id_)},"kind":{q(kind)},"prev":{q(prev)},"seq":{seq},"v":{v}}}'
    )


def parse_envelope(sig: str) -> tuple[str, int, str, str] | None:
    """``(stream, n, prev, signature)`` of an envelope ``mentis.ledger.signing.Envelope.parse`` accepts
    (``prev`` "" for n = 0), or None (also for some it would accept: the reference then decides)."""
    parts = sig.split(".")
    if len(parts) != 5 or parts[0] != "s1":
        return None
    _, stream, n, prev, signature = parts
    if len(stream) != 32 or stream.strip(_HEX) or len(signature) != 86 or signature.strip(_B64URL):
        return None
    if not n or len(n) > 16 or n.strip("0123456789") or (n[0] == "0" and n != "0"):
        return None
    if n == "0":
        return (stream, 0, "", signature) if prev == "-" else None
    if len(prev) != 64 or prev.strip(_HEX):
        return None
    return stream, int(n), prev, signature


def render_entry_signed(
    agent: str,
    at: str,
    body_hash: str,
    chain: str,
    id_: str,
    key_id: str,
    kind: str,
    prev: str,
    seq: int,
    v: int,
) -> str:
    """The document of a signed entry (with ``key_id``), every string escaped."""
    q = quote
    return (
        f'{{"agent":{q(agent)},"at":{q(at)},"body_hash":{q(body_hash)},"chain":{q(chain)},'
        f'"id":{q(id_)},"key_id":{q(key_id)},"kind":{q(kind)},"prev":{q(prev)},"seq":{seq},"v":{v}}}'
    )


def render_statement(
    agent: str,
    at: str,
    body_hash: str,
    chain: str,
    id_: str,
    key_id: str,
    kind: str,
    n: int,
    prev: str,
    stream: str,
) -> bytes:
    """The canonical bytes of a signed statement (``mentis.ledger.signing.Statement.canonical``)."""
    q = quote
    return (
        f'{{"agent":{q(agent)},"at":{q(at)},"body_hash":{q(body_hash)},"chain":{q(chain)},'
        f'"id":{q(id_)},"key_id":{q(key_id)},"kind":{q(kind)},"n":{n},"prev":{q(prev)},'
        f'"stream":{q(stream)},"v":1}}'
    ).encode()


def scan_block(
    conn: sqlite3.Connection, lo: int, hi: int, kinds: frozenset[str], version: int
) -> BlockScan | None:
    """Scan the entries with ``lo <= rowid <= hi``; None unless every check passes."""
    try:
        return _Scan(kinds, version).run(conn, lo, hi)
    except Exception:  # a value of an unexpected type, a text that does not decode, ...
        return None  # ... is the reference verifier's to report


class _Scan:
    def __init__(self, kinds: frozenset[str], version: int) -> None:
        self.kinds = kinds
        self.version = version
        self.tails: dict[str, list[Any]] = {}  # chain → [next seq, last hash, the chain's name]
        self.firsts: dict[str, tuple[int, str]] = {}
        self.missing: dict[str, list[int]] = {}
        self.tombstones: list[tuple[str, int, bytes]] = []
        self.records: list[tuple[str, str, str, int]] = []
        self.links: list[tuple[str, int, str, str]] = []
        self.rows = 0
        self.bodies = 0
        self.registry: list[tuple[int, bytes]] = []
        self.unsigned: dict[str, int] = {}
        self.signed: dict[str, int] = {}
        self.streams: dict[str, list[Any]] = {}
        self.registry_rows: list[tuple[int, str, Any]] = []
        self.dated: dict[str, str] = {}
        self.keyed: dict[tuple[str, str], list[str]] = {}

    def run(self, conn: sqlite3.Connection, lo: int, hi: int) -> BlockScan | None:
        cursor = conn.execute(SELECT_BLOCK, (self.version, lo, hi))
        while rows := cursor.fetchmany(CHUNK):
            self.rows += len(rows)
            kinds = set(map(_KIND, rows))
            if not kinds <= self.kinds:
                return None
            if set(map(_KEY, rows)) != _UNSIGNED or set(map(_SIG, rows)) != _UNSIGNED:
                if not self.with_signed(rows):
                    return None
            else:
                # str.join refuses anything but str, so this also type-checks the fields it joins.
                plain = not needs_escape("".join(concat.from_iterable(map(_FREE_TEXT, rows))))
                plain = plain and None not in map(_BODY, rows)
                if plain and kinds == _ATTEMPTS and not any(map(_reserved, set(map(_CHAIN, rows)))):
                    if not self.attempts(rows):
                        return None
                elif not (self.plain(rows) if plain else self.careful(rows)):
                    return None
                self.unsigned.update(zip(map(_AGENT, rows), map(_ROWID, rows), strict=True))
                self.date(rows if "agent" not in kinds else [r for r in rows if r[5] != "agent"])
            if "forget" in kinds:
                self.tombstones += [(r[3], r[7], r[9]) for r in rows if r[5] == "forget" and r[9] is not None]
            if "agent" in kinds:
                for r in rows:
                    if r[5] == "agent":
                        if r[9] is None:
                            return None  # a registry body is never erased: the reference names it
                        self.registry.append((r[12], r[9]))
                        self.registry_rows.append((r[12], r[0], r[10]))
        if self.rows != hi - lo + 1 or self.bodies != self.rows:
            # Rowids with no entry or entries with no body: count the body rows to rule out orphans.
            count = conn.execute("SELECT count(*) FROM bodies WHERE rowid BETWEEN ? AND ?", (lo, hi))
            if count.fetchone()[0] != self.bodies:
                return None
        spans = {chain: (*self.firsts[chain], tail[0], tail[1]) for chain, tail in self.tails.items()}
        signed: Signed = (self.registry, self.unsigned, self.signed, self.streams, *self.by_time())
        return spans, self.missing, self.tombstones, self.records, self.links, signed

    def by_time(self) -> tuple[list[tuple[int, str, Any]], dict[str, str], dict[tuple[str, str], list[str]]]:
        """What the stitch judges exactly (the registry chain's rows) and by time (the others)."""
        return self.registry_rows, self.dated, self.keyed

    def date(self, rows: list[Row]) -> None:
        """Keep each agent's latest ``at`` of the unsigned ``rows`` (none in the registry chain);
        a value that is not a str raises (the block is then the reference's)."""
        dated = self.dated
        agents = set(map(_AGENT, rows))
        if len(agents) == 1:
            (agent,) = agents
            at = max(map(_AT, rows))
            if at > dated.get(agent, ""):
                dated[agent] = at
            return
        for agent, at in zip(map(_AGENT, rows), map(_AT, rows), strict=True):
            if at > dated.get(agent, ""):
                dated[agent] = at

    def note(self, chain: str, seq: int, kind: str, id_: str, body: bytes | None) -> bool:
        """Note the record an entry creates and the links its body makes; False if it may not. (A
        fork, branch or merge entry links nothing; the stitch checks the point of another chain it
        names: ``sqlite_verify._branches_hold``.)"""
        if kind in RECORD_ID:
            self.records.append((id_, chain, record_kind(kind, body), seq))
        if body is None:
            return True
        links = body_links(chain, kind, id_, body)
        if isinstance(links, str):
            return False
        self.links += [(chain, seq, target, want) for target, want in links]
        return True

    def plain(self, rows: list[Row]) -> bool:
        """Rows with a body each and no string that needs escaping: the hot loop."""
        sha256, tails, firsts = _sha256, self.tails, self.firsts
        end = f',"v":{self.version}}}'
        for agent, at, body_hash, chain, id_, kind, prev, seq, hash_, body, _key, _sig, _rowid in rows:
            doc = (
                f'{{"agent":"{agent}","at":"{at}","body_hash":"{body_hash}","chain":"{chain}","id":"{id_}",'
                f'"kind":"{kind}","prev":"{prev}","seq":{seq}{end}'
            )
            if sha256(doc.encode()).hexdigest() != hash_ or sha256(body).hexdigest() != body_hash:
                return False
            if not self.note(chain, seq, kind, id_, body):
                return False
            tail = tails.get(chain)
            if tail is None:
                firsts[chain] = (seq, prev)
                tail = tails[chain] = [seq, prev, chain]
            elif tail[0] != seq or tail[1] != prev:
                return False
            tail[0] = seq + 1
            tail[1] = hash_
        self.bodies += len(rows)
        return True

    def attempts(self, rows: list[Row]) -> bool:
        """:meth:`plain` for attempts of chains not starting with ``__``, with :func:`body_links`
        inline: the body must parse to an object naming the chain and the entry's id; it links
        nothing. ``tests/test_verify_fastpath.py`` proves it agrees with :meth:`plain`."""
        sha256, tails, firsts = _sha256, self.tails, self.firsts
        note = self.records.append
        end = f',"v":{self.version}}}'
        for agent, at, body_hash, chain, id_, kind, prev, seq, hash_, body, _key, _sig, _rowid in rows:
            doc = (
                f'{{"agent":"{agent}","at":"{at}","body_hash":"{body_hash}","chain":"{chain}","id":"{id_}",'
                f'"kind":"{kind}","prev":"{prev}","seq":{seq}{end}'
            )
            if sha256(doc.encode()).hexdigest() != hash_ or sha256(body).hexdigest() != body_hash:
                return False
            try:
                fields = loads(body)
            except ValueError:  # orjson.JSONDecodeError: body_links says "body is not JSON"
                return False
            if (
                type(fields) is not dict
                or fields.get("repository") != chain
                or fields.get("attempt_id") != id_
            ):
                return False
            tail = tails.get(chain)
            if tail is None:
                firsts[chain] = (seq, prev)
                tail = tails[chain] = [seq, prev, chain]
            elif tail[0] != seq or tail[1] != prev:
                return False
            tail[0] = seq + 1
            tail[1] = hash_
            # One chain and one kind object for all the block's records: marshal sends them once.
            note((id_, tail[2], _ATTEMPT, seq))
        self.bodies += len(rows)
        return True

    def with_signed(self, rows: list[Row]) -> bool:
        """Rows some of which are signed: each checked as in :meth:`careful`, plus its signature's
        envelope and the links of its stream within the block. When no free text of the chunk
        (agent, at, chain, id, key_id) needs escaping, a row with a body is rendered by the plain
        templates: its other strings are a known kind, the body's digest, hashes and hex the
        envelope parser checked."""
        free = [t for r in rows for t in (r[0], r[1], r[3], r[4], r[10]) if t is not None]
        plain = not needs_escape("".join(free))  # TypeError (then None) unless each is a str
        end = f',"v":{self.version}}}'
        sha256, streams = _sha256, self.streams
        for row in rows:
            agent, at, body_hash, chain, id_, kind, prev, seq, hash_, body, key_id, sig, rowid = row
            if key_id is None and sig is None:
                if not self.careful([row]):
                    return False
                self.unsigned[agent] = rowid
                if kind != "agent":
                    self.date([row])
                continue
            if type(key_id) is not str or type(sig) is not str or (env := parse_envelope(sig)) is None:
                return False
            stream, n, env_prev, signature = env
            if plain and body is not None and type(body) is bytes:
                doc = (
                    f'{{"agent":"{agent}","at":"{at}","body_hash":"{body_hash}","chain":"{chain}","id":"{id_}",'
                    f'"key_id":"{key_id}","kind":"{kind}","prev":"{prev}","seq":{seq}{end}'
                )
                stmt = (
                    f'{{"agent":"{agent}","at":"{at}","body_hash":"{body_hash}","chain":"{chain}","id":"{id_}",'
                    f'"key_id":"{key_id}","kind":"{kind}","n":{n},"prev":"{env_prev}","stream":"{stream}","v":1}}'
                ).encode()
            else:
                doc = render_entry_signed(
                    agent, at, body_hash, chain, id_, key_id, kind, prev, seq, self.version
                )
                stmt = render_statement(agent, at, body_hash, chain, id_, key_id, kind, n, env_prev, stream)
            if sha256(doc.encode()).hexdigest() != hash_ or not self.link(chain, seq, prev, hash_):
                return False
            if body is None:
                self.missing.setdefault(chain, []).append(seq)
            elif type(body) is not bytes or sha256(body).hexdigest() != body_hash:
                return False
            else:
                self.bodies += 1
            if not self.note(chain, seq, kind, id_, body):
                return False
            span = streams.get(stream)
            if span is None:
                span = streams[stream] = [key_id, agent, n, env_prev, rowid, n, "", rowid, b"", ""]
            elif span[0] != key_id or span[1] != agent or span[5] + 1 != n or span[6] != env_prev:
                return False
            span[5], span[6], span[7], span[8], span[9] = n, sha256(stmt).hexdigest(), rowid, stmt, signature
            self.signed.setdefault(agent, rowid)
            if kind != "agent":
                times = self.keyed.get((key_id, agent))
                if times is None:
                    self.keyed[key_id, agent] = [at, at]
                elif at < times[0]:
                    times[0] = at
                elif at > times[1]:
                    times[1] = at
        return True

    def link(self, chain: str, seq: int, prev: str, hash_: str) -> bool:
        """Continue the chain's tail in this block with the entry (seq, prev) → hash_."""
        tail = self.tails.get(chain)
        if tail is None:
            self.firsts[chain] = (seq, prev)
            tail = self.tails[chain] = [seq, prev, chain]
        elif tail[0] != seq or tail[1] != prev:
            return False
        tail[0] = seq + 1
        tail[1] = hash_
        return True

    def careful(self, rows: list[Row]) -> bool:
        """Any unsigned rows: strings escaped where needed, missing bodies noted."""
        for agent, at, body_hash, chain, id_, kind, prev, seq, hash_, body, _key, _sig, _rowid in rows:
            doc = render_quoted(agent, at, body_hash, chain, id_, kind, prev, seq, self.version)
            if _sha256(doc.encode()).hexdigest() != hash_:
                return False
            if body is None:
                self.missing.setdefault(chain, []).append(seq)
            elif type(body) is not bytes or _sha256(body).hexdigest() != body_hash:
                return False
            else:
                self.bodies += 1
            if not self.note(chain, seq, kind, id_, body) or not self.link(chain, seq, prev, hash_):
                return False
        return True


# ---------------------------------------------------------------- the worker process


def queue_item(lo: int, hi: int) -> bytes:
    """One block in a queue: its first and last rowid."""
    return lo.to_bytes(8, "little", signed=True) + hi.to_bytes(8, "little", signed=True)


def take_block(queue: int) -> tuple[int, int] | None:
    """The next block from a queue (a pipe's fd), or None once it is empty.

    The queue was written whole before anyone read it and every reader takes one item per read,
    so a read never returns part of an item.
    """
    item = os.read(queue, QUEUE_ITEM)
    if len(item) != QUEUE_ITEM:
        return None
    return int.from_bytes(item[:8], "little", signed=True), int.from_bytes(item[8:], "little", signed=True)


WORKER = (
    "import os, sys; sys.path += sys.argv[1].split(os.pathsep); "
    "from mentis.store.sqlite.ledger_scan import worker; worker(sys.argv[2:])"
)
"""The program a worker runs: ``-c WORKER <paths> <uri> <queue> <version> <kinds>...``."""


def worker_argv(uri: str, queue: int, version: int, kinds: frozenset[str]) -> list[str]:
    """The command line of a worker: ``uri`` opens the store read-only, ``queue`` is a pipe's fd;
    it imports mentis and orjson from the directories this process imported them from."""
    import orjson

    package = os.path.dirname(os.path.abspath(__file__))  # .../mentis/store/sqlite
    roots = [os.path.dirname(os.path.dirname(os.path.dirname(package)))]
    roots.append(os.path.dirname(os.path.dirname(os.path.abspath(orjson.__file__))))
    paths = os.pathsep.join(dict.fromkeys(roots))
    return [sys.executable, "-S", "-P", "-c", WORKER, paths, uri, str(queue), str(version), *sorted(kinds)]


def worker(args: list[str]) -> NoReturn:
    """A worker's life (:data:`WORKER`): scan blocks from the queue until it is empty, write the
    scans on stdout and exit at once (no interpreter shutdown: nothing here needs cleaning up)."""
    uri, queue, version, kinds = args[0], int(args[1]), int(args[2]), frozenset(args[3:])
    conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
    conn.execute("BEGIN")
    scans: dict[int, BlockScan | None] = {}  # first rowid → scan
    while block := take_block(queue):
        scans[block[0]] = scan_block(conn, *block, kinds, version)
    out = marshal.dumps(scans)
    while out:
        out = out[os.write(1, out) :]
    os.close(1)  # the parent reads to the end of stdout, so it need not wait for the exit
    os._exit(0)
