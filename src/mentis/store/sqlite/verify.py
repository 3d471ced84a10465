"""Parallel verification of a large SQLite ledger, tried before ``SqliteStore.verify``'s one pass.

From ``PARALLEL_MIN_ENTRIES`` entries on, the ledger is cut into blocks of rowids
(:func:`block_ranges`) that this process and worker processes scan at once with
:func:`ledger_scan.scan_block`. A worker is ``python -S -P -c ledger_scan.WORKER``, started in ~20 ms
(never a fork: the caller may have threads). The blocks wait in a pipe that every process reads
one block at a time, so the work splits evenly whatever each process's start-up time or load, and
blocks shrink towards the end so all finish together; blocks a failed worker took are scanned here.

The stitch then walks the blocks in rowid order and checks what no block can check alone: each
chain starts at seq 0 with an empty prev and each block of a chain starts where the one before
ended, the chains are exactly those in ``heads`` and end at the recorded heads, every missing body
is listed by a forget tombstone of its chain, no body row lies outside the entries' rowids
(inside them, each block counts its own), no two attempts or thoughts share an id, and every record
a body targets is an earlier record of the body's own chain (:func:`mentis.ledger.links.link_error`), and
the signed entries and the agent registry pass :func:`sqlite_sigstitch.signatures_verify`.

:func:`parallel_verify` returns the reports :func:`mentis.ledger.chain.verify_rows` would return, or
``None``: for a small store, for a file whose ledger tables were not created by this schema, and
whenever anything did not verify or might not. The caller then runs the one pass, which finds and
names the first failing entry. Nothing here raises ``IntegrityError`` or words an error.

**Snapshots.** The caller holds a read transaction: ``heads``, the rowid range and this process's
blocks come from that snapshot. A worker reads its own, later snapshot, and only the rowids up to
the top one seen here. Entries are never updated or deleted and a new entry's rowid is above every
existing one, so the workers see exactly this snapshot's entries, and heads moved on since do not
matter. Only bodies can differ, deleted by a forget committed in between: a body missing in a
worker's snapshot that no tombstone up to the top rowid lists fails the parallel pass, and the one
pass then decides on this snapshot alone.
"""

from __future__ import annotations

import functools
import gc
import itertools
import logging
import marshal
import os
import selectors
import sqlite3
import subprocess
import sys
import threading
import time
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING

from mentis.errors import IntegrityError
from mentis.ledger.chain import ChainReport, erased_seqs, verify_branch_entries, verify_rows
from mentis.ledger.entry import KINDS, VERSION
from mentis.ledger.links import link_error
from mentis.store.shared.core import ENTRY_COLS, hash_lookup
from mentis.store.shared.dialect import SQLITE
from mentis.store.shared.orphans import check_orphans
from mentis.store.sqlite import ledger_scan
from mentis.store.sqlite.sigstitch import signatures_verify

if TYPE_CHECKING:
    from mentis.store.sqlite.ledger_scan import BlockScan, Signed

log = logging.getLogger(__name__)
_ID = itemgetter(0)

PARALLEL_MIN_ENTRIES = 4_000
"""Below this many rowids a worker's start-up costs about what it saves (measured on 2 cores:
3,000 entries open in 22 ms either way, 5,000 in 28 ms with a worker against 35 ms without)."""
MAX_WORKERS = 3
MIN_BLOCK = 256
MAX_BLOCK = 2048
"""Rowids per block: 2048 are ~12 ms of work for one process."""
QUEUE_BLOCKS = 4096 // ledger_scan.QUEUE_ITEM
"""Most blocks in a queue: it is written in one write of at most PIPE_BUF bytes, which is atomic
and fits in any pipe, before any process reads it."""
WORKER_TIMEOUT_S = 60.0
"""How long to wait for a worker's answer once the queue is empty (it holds one block at most
then); after that it is killed and its blocks are scanned here."""


def one_pass(
    conn: sqlite3.Connection,
    heads: dict[str, tuple[int, str]],
    *,
    signatures: bool = False,
    skip: frozenset[str] = frozenset(),
) -> list[ChainReport]:
    """The reference pass over the snapshot ``conn`` reads (or the write it is inside): every entry
    in rowid order through :func:`mentis.ledger.chain.verify_rows` (leaving out the chains in ``skip``),
    then no body outside the entries."""
    rows = conn.execute(
        f"SELECT {ENTRY_COLS}, b.body FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid ORDER BY e.rowid"
    )
    try:
        reports = verify_rows(
            rows, heads, signatures=signatures, skip=skip, hash_at=hash_lookup(SQLITE, conn)
        )
    finally:
        rows.close()  # a failure stops the walk midway: the statement must not stay open
    with_body = sum(r.entries - r.bodies_erased for r in reports)
    if skip or conn.execute("SELECT count(*) FROM bodies").fetchone()[0] != with_body:
        check_orphans(conn, skip)
    return reports


def parallel_verify(
    conn: sqlite3.Connection, path: str, heads: dict[str, tuple[int, str]], ledger_schema: str
) -> list[ChainReport] | None:
    """Reports for every chain, or None if the one pass must decide (see the module).

    ``conn`` is in a read transaction; ``ledger_schema`` is the SQL that creates the ledger tables.
    """
    workers = min(MAX_WORKERS, _cpus() - 1) if _python_runs_workers() else 0
    lo, hi = _rowid_range(conn, "entries")
    if workers < 1 or lo is None or hi is None or hi - lo + 1 < PARALLEL_MIN_ENTRIES:
        return None
    try:
        return verify_blocks(conn, path, heads, ledger_schema, workers)
    except Exception:  # a bug here must not fail an open: the one pass is always right
        log.warning("the parallel verification failed; verifying in one pass", exc_info=True)
        return None


def verify_blocks(
    conn: sqlite3.Connection, path: str, heads: dict[str, tuple[int, str]], ledger_schema: str, workers: int
) -> list[ChainReport] | None:
    """The parallel pass with ``workers`` worker processes (none: every block here), any size.

    The scans rely on ``entries`` and ``bodies`` being the tables ``ledger_schema`` creates (an
    integer primary key ``rowid`` in both), so a file whose tables were created otherwise goes to
    the one pass.
    """
    lo, hi = _rowid_range(conn, "entries")
    if lo is None or hi is None:
        return None  # no entries: the one pass is instant
    if _table_sql(conn) != _table_sql_for(ledger_schema):
        log.info("the ledger tables differ from this version's schema; verifying in one pass")
        return None
    body_lo, body_hi = _rowid_range(conn, "bodies")
    if body_lo is not None and body_hi is not None and (body_lo < lo or body_hi > hi):
        return None  # an orphan body
    reports = _stitch(_scan(conn, path, block_ranges(lo, hi, workers + 1), workers), heads)
    return reports if reports is not None and _branches_hold(conn) else None


def _branches_hold(conn: sqlite3.Connection) -> bool:
    """Every fork, branch and merge entry holds (:func:`mentis.ledger.chain.verify_branch_entries`),
    read through the partial index ``entries_branching`` once the blocks verified their hashes."""
    rows = conn.execute(
        "SELECT e.chain, e.seq, e.kind, b.body FROM entries e JOIN bodies b ON b.rowid = e.rowid "
        "WHERE e.kind IN ('fork', 'branch', 'merge') ORDER BY e.rowid"
    ).fetchall()
    if not rows:
        return True
    try:
        verify_branch_entries(((c, s, k, bytes(b)) for c, s, k, b in rows), hash_lookup(SQLITE, conn))
    except IntegrityError:
        return False  # the one pass names it
    return True


def block_ranges(lo: int, hi: int, procs: int) -> list[tuple[int, int]]:
    """``lo..hi`` cut into blocks for ``procs`` processes taking them from one queue.

    Each block is an eighth of what is left per process, within ``MIN_BLOCK..MAX_BLOCK``, so the
    blocks shrink towards the end. A store too large for ``QUEUE_BLOCKS`` blocks of ``MAX_BLOCK``
    gets larger ones (at most half the queue are full-size, the shrinking tail fits the rest).
    """
    biggest = max(MAX_BLOCK, -(-(hi - lo + 1) // (QUEUE_BLOCKS // 2)))
    smallest = max(MIN_BLOCK, biggest // 8)
    blocks = []
    start = lo
    while start <= hi:
        size = max(smallest, min(biggest, (hi - start + 1) // (8 * procs)))
        blocks.append((start, min(hi, start + size - 1)))
        start += size
    return blocks


def _python_runs_workers() -> bool:
    """Whether ``sys.executable`` is a Python that can run the worker (not an app embedding one)."""
    exe = Path(sys.executable or "")
    return os.name == "posix" and not getattr(sys, "frozen", False) and exe.name.startswith("python")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _rowid_range(conn: sqlite3.Connection, table: str) -> tuple[int | None, int | None]:
    # Two statements: SQLite looks min() or max() up in the b-tree only when it is alone.
    (lo,) = conn.execute(f"SELECT min(rowid) FROM {table}").fetchone()
    (hi,) = conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()
    return lo, hi


def _table_sql(conn: sqlite3.Connection) -> dict[str, str]:
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE name IN ('entries', 'bodies')")
    return dict(rows.fetchall())


@functools.cache
def _table_sql_for(schema: str) -> dict[str, str]:
    """The ``sqlite_master.sql`` that ``schema`` gives ``entries`` and ``bodies`` (SQLite rewrites it)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(schema)
        return _table_sql(conn)
    finally:
        conn.close()


def _scan(
    conn: sqlite3.Connection, path: str, blocks: list[tuple[int, int]], workers: int
) -> list[BlockScan | None]:
    """Every block's scan, in order: made here or by one of ``workers`` worker processes.

    A block whose records reuse an id of a block taken in before is answered ``None`` (no two
    records share an id): this process takes in its own blocks as it scans them, while the workers
    still scan, and the workers' blocks as their answers come, so little of it waits for the end.
    """
    scan_here = functools.partial(ledger_scan.scan_block, conn, kinds=KINDS, version=VERSION)
    ids: set[str] = set()  # the ids of the records of every block taken in so far

    def scan(lo: int, hi: int) -> BlockScan | None:
        return _take_in(ids, scan_here(lo, hi))

    done: dict[int, BlockScan | None] = {}  # first rowid → scan
    procs: list[subprocess.Popen[bytes]] = []
    queue_r, queue_w = os.pipe()
    try:
        try:
            os.write(queue_w, b"".join(ledger_scan.queue_item(lo, hi) for lo, hi in blocks))
        finally:
            os.close(queue_w)
        uri = Path(path).resolve().as_uri() + "?mode=ro"
        for _ in range(workers):
            if (proc := _start(ledger_scan.worker_argv(uri, queue_r, VERSION, KINDS), queue_r)) is not None:
                procs.append(proc)
        while block := ledger_scan.take_block(queue_r):
            done[block[0]] = scan(*block)
        deadline = time.monotonic() + WORKER_TIMEOUT_S
        for proc in procs:
            done.update((lo, _take_in(ids, found)) for lo, found in _answer(proc, deadline).items())
    finally:
        os.close(queue_r)
        for proc in procs:
            if proc.stdout is not None and not proc.stdout.closed:  # something here raised
                proc.kill()
                proc.stdout.close()
            # It exits once it has answered: reap it without waiting for the exit (~5 ms).
            threading.Thread(target=proc.wait, name="mentis-verify-reaper", daemon=True).start()
    return [done[lo] if lo in done else scan(lo, hi) for lo, hi in blocks]


def _take_in(ids: set[str], found: BlockScan | None) -> BlockScan | None:
    """``found``, with the ids of its records added to ``ids``; None if one was there already
    or appears twice in it (or ``found`` is None)."""
    if found is None:
        return None
    before = len(ids)
    ids.update(map(_ID, found[3]))
    return found if len(ids) == before + len(found[3]) else None


def _start(argv: list[str], queue: int) -> subprocess.Popen[bytes] | None:
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(queue,),
        )
    except OSError as exc:
        log.warning("could not start a verify worker (%s); verifying its share here", exc)
        return None


def _answer(proc: subprocess.Popen[bytes], deadline: float) -> dict[int, BlockScan | None]:
    """The scans a worker made (it closes its stdout when done), or none if it failed or hung:
    its blocks are then scanned here."""
    assert proc.stdout is not None
    chunks = []
    with proc.stdout, selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while selector.select(max(0.0, deadline - time.monotonic())):
            if not (chunk := os.read(proc.stdout.fileno(), 1 << 16)):
                break
            chunks.append(chunk)
        else:
            log.warning("a verify worker took over %.0f s; verifying its share here", WORKER_TIMEOUT_S)
            proc.kill()
            return {}
    collecting = gc.isenabled()
    gc.disable()  # the answer is hundreds of thousands of tuples and holds no cycle: half the time
    try:
        scans = marshal.loads(b"".join(chunks))
    except (EOFError, ValueError, TypeError):
        scans = None
    finally:
        if collecting:
            gc.enable()
    if not isinstance(scans, dict):
        log.warning("a verify worker failed (exit status %s); verifying its share here", proc.wait())
        return {}
    return scans


def _stitch(scans: list[BlockScan | None], heads: dict[str, tuple[int, str]]) -> list[ChainReport] | None:
    tails: dict[str, tuple[int, str]] = {}  # chain → (next seq, last hash)
    missing: dict[str, list[int]] = {}
    erased: dict[str, set[int]] = {}
    found: list[list[tuple[str, str, str, int]]] = []  # each block's (id, chain, kind, seq) records
    links: list[tuple[str, int, str, str]] = []
    signed: list[Signed] = []
    for scan in scans:
        if scan is None:
            return None
        spans, block_missing, tombstones, block_records, block_links, block_signed = scan
        signed.append(block_signed)
        found.append(block_records)
        links += block_links
        for chain, (first_seq, first_prev, next_seq, last_hash) in spans.items():
            if tails.get(chain, (0, "")) != (first_seq, first_prev):
                return None
            tails[chain] = (next_seq, last_hash)
        for chain, seqs in block_missing.items():
            missing.setdefault(chain, []).extend(seqs)
        for chain, seq, body in tombstones:
            try:
                erased.setdefault(chain, set()).update(erased_seqs(chain, seq, body))
            except IntegrityError:
                return None
    if tails.keys() != heads.keys() or not _links_hold(found, links):
        return None
    if not signatures_verify(signed):
        return None
    reports = []
    for chain, (next_seq, last_hash) in tails.items():
        gone, listed = missing.get(chain, []), erased.get(chain, set())
        if heads[chain] != (next_seq - 1, last_hash) or not listed.issuperset(gone):
            return None
        report = ChainReport(chain, next_seq, next_seq - 1, last_hash, len(gone))
        report._missing, report._erased = gone, listed
        reports.append(report)
    return sorted(reports, key=lambda r: r.chain)


def _links_hold(found: list[list[tuple[str, str, str, int]]], links: list[tuple[str, int, str, str]]) -> bool:
    """Every link targets an earlier record of its own chain (each id is one record: ``_scan``).

    The map of records that :func:`link_error` reads is built only for the ids some
    link targets: a store of attempts alone links nothing."""
    if not links:
        return True
    targets = {target for _, _, target, _ in links}
    records = itertools.chain.from_iterable(found)
    index = {id_: (chain, kind, seq) for id_, chain, kind, seq in records if id_ in targets}
    return all(link_error(index, *link) is None for link in links)
