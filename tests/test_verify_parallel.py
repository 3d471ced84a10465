"""The parallel verification of a large SQLite store (``store/sqlite_verify``, ``store/ledger_scan``).

It must pass exactly what the one-pass reference verifier passes, with the same reports, and hand
everything else to the reference, so the error names the same first failing entry. The store here
is small; the tests shrink the blocks to four rowids and drop the size threshold, so every block
boundary falls between entries of the chains. Where it matters that a worker process scanned a
block, this process takes the first block before the worker starts and no other until the worker
has claimed all the others (the ``split`` fixture), however late the worker starts on a loaded
machine, and the test checks that the worker scanned them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import shutil
import sqlite3
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import mentis.store.sqlite.store as sqlite_store
from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput
from mentis.config import Settings
from mentis.errors import IntegrityError, StoreError
from mentis.ledger.canonical import MAX_SAFE_INT, canonical
from mentis.ledger.chain import ChainReport
from mentis.ledger.entry import KINDS, VERSION
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.seal import Seal
from mentis.store.sqlite import ledger_scan
from mentis.store.sqlite import verify as sqlite_verify
from mentis.store.sqlite.store import SqliteStore

DIM = HashEmbedder().dim
CALLER = Caller(agent_id="test-agent")
A, B, C = "github.com/acme/shop", "github.com/acme/api", "github.com/acme/late"
BLOCK = 4


# ---------------------------------------------------------------- the store

# Rowid order, chain:seq, chains interleaved. With blocks of four rowids, the upper half (rowid
# 17 on) holds all of chain C and A's forget, which erases the bodies of A:1 and of A:3 (the
# correction of A:1), both in the lower half.
#
#   1 A:0   2 B:0   3 A:1*  4 B:1  |  5 A:2   6 B:2   7 A:3*  8 B:3  |  9 A:4  10 B:4  11 A:5  12 B:5
#  13 A:6  14 B:6  15 A:7  16 B:7  | 17 C:0  18 A:8  19 C:1  20 B:8  | 21 A:9 (forget)  22 C:2
#  23 B:9  24 C:3  | 25 A:10 26 B:10 27 C:4  28 A:11                              (* body erased)


def _record(m: Memory, repo: str, n: int, ids: dict[str, str], key: str) -> None:
    req = RecordAttemptInput(
        repository=repo,
        task_id=f"task-{n % 3}",
        action=f"try fix number {n} for {repo}",
        observation=f"observation {n}: it did {'not ' if n % 2 else ''}work",
        task_title="A title" if n % 4 == 0 else None,
    )
    ids[key] = m.record_attempt(CALLER, req).attempt_id


def build(path: Path) -> None:
    m = Memory.open(Settings(home=path.parent, db_path=path, embedder="hash"), HashEmbedder())
    ids: dict[str, str] = {}
    try:
        _record(m, A, 0, ids, "a0")
        _record(m, B, 0, ids, "b0")
        _record(m, A, 1, ids, "a1")
        _record(m, B, 1, ids, "b1")
        _record(m, A, 2, ids, "a2")
        _record(m, B, 2, ids, "b2")
        m.mark_conclusion_outdated(
            CALLER, MarkOutdatedInput(repository=A, attempt_id=ids["a1"], reason="stale")
        )
        _record(m, B, 3, ids, "b3")
        for n in range(4, 8):
            _record(m, A, n, ids, f"a{n}")
            _record(m, B, n, ids, f"b{n}")
        _record(m, C, 0, ids, "c0")
        _record(m, A, 8, ids, "a8")
        _record(m, C, 1, ids, "c1")
        _record(m, B, 8, ids, "b8")
        m.forget_attempt(CALLER, ForgetInput(repository=A, attempt_id=ids["a1"], reason="holds a token"))
        _record(m, C, 2, ids, "c2")
        _record(m, B, 9, ids, "b9")
        _record(m, C, 3, ids, "c3")
        _record(m, A, 10, ids, "a10")
        _record(m, B, 10, ids, "b10")
        _record(m, C, 4, ids, "c4")
        _record(m, A, 11, ids, "a11")
    finally:
        m.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parallel") / "mentis.db"
    build(path)
    with contextlib.closing(sqlite3.connect(path)) as con:
        assert con.execute("SELECT max(rowid) FROM entries").fetchone()[0] == 28
        kinds = [k for (k,) in con.execute("SELECT kind FROM entries ORDER BY rowid")]
        assert (kinds[6], kinds[20]) == ("correction", "forget")
        erased = "SELECT e.rowid FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid WHERE b.rowid IS NULL"
        assert [r for (r,) in con.execute(erased)] == [3, 7]
    return path


@pytest.fixture
def store(template: Path, tmp_path: Path) -> Path:
    path = tmp_path / "mentis.db"
    shutil.copyfile(template, path)
    return path


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of four rowids, from the first entry on, with a worker even on one CPU."""
    monkeypatch.setattr(sqlite_verify, "PARALLEL_MIN_ENTRIES", 0)
    monkeypatch.setattr(sqlite_verify, "MIN_BLOCK", BLOCK)
    monkeypatch.setattr(sqlite_verify, "MAX_BLOCK", BLOCK)
    monkeypatch.setattr(sqlite_verify, "MAX_WORKERS", 1)
    monkeypatch.setattr(sqlite_verify, "_cpus", lambda: 2)


WAIT_FOR_WORKER_S = 60.0
"""How long this process waits for the worker to claim the blocks it leaves to it (a started worker
takes them in milliseconds; the wait only runs out when the worker failed)."""


@dataclass
class Spy:
    """The blocks this process scanned; the rest were scanned by the worker."""

    here: list[tuple[int, int]]
    blocks: list[tuple[int, int]]
    first: list[tuple[int, int]]
    """This pass's first block, taken before the worker started, until this process asks for one."""
    worker: list[subprocess.Popen[bytes] | None]
    """This pass's worker."""

    @property
    def by_worker(self) -> set[tuple[int, int]]:
        return set(self.blocks) - set(self.here)


def _queued(queue: int) -> int:
    """Bytes still in a queue (a pipe): the blocks no process has claimed yet."""
    return int(struct.unpack("i", fcntl.ioctl(queue, termios.FIONREAD, b"\0\0\0\0"))[0])


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch) -> Spy:
    """In each parallel pass, this process takes the first block from the queue before the worker
    starts, and asks for the next only once the worker has claimed every other block (or has
    exited, or ``WAIT_FOR_WORKER_S`` passed): the worker scans all blocks but the first however
    late it starts. A worker that fails leaves its blocks to this process, which the test sees."""
    spy = Spy([], [], [], [])
    scan, ranges = ledger_scan.scan_block, sqlite_verify.block_ranges
    start, take = sqlite_verify._start, ledger_scan.take_block

    def spied_ranges(lo: int, hi: int, procs: int) -> list[tuple[int, int]]:
        spy.blocks = ranges(lo, hi, procs)
        spy.first.clear()
        spy.worker.clear()
        return spy.blocks

    def started(argv: list[str], queue: int) -> subprocess.Popen[bytes] | None:
        assert not spy.worker, "one worker per pass (MAX_WORKERS is 1)"
        if (block := take(queue)) is not None:
            spy.first.append(block)
        proc = start(argv, queue)
        spy.worker.append(proc)
        return proc

    def taken(queue: int) -> tuple[int, int] | None:
        if spy.first:
            return spy.first.pop()
        deadline = time.monotonic() + WAIT_FOR_WORKER_S
        worker = spy.worker[0] if spy.worker else None
        while _queued(queue) and worker is not None and worker.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.001)
        return take(queue)

    def scanned(conn: sqlite3.Connection, lo: int, hi: int, **kw: Any) -> Any:
        spy.here.append((lo, hi))
        return scan(conn, lo, hi, **kw)

    monkeypatch.setattr(sqlite_verify, "block_ranges", spied_ranges)
    monkeypatch.setattr(sqlite_verify, "_start", started)
    monkeypatch.setattr(ledger_scan, "take_block", taken)
    monkeypatch.setattr(ledger_scan, "scan_block", scanned)
    return spy


# ---------------------------------------------------------------- the two verifiers


def one_pass(path: Path) -> list[ChainReport] | str:
    """The reference: ``SqliteStore.verify`` with the parallel pass switched off."""
    store = SqliteStore(path, DIM, verify=False)
    original = sqlite_store.parallel_verify
    sqlite_store.parallel_verify = lambda *args: None  # type: ignore[assignment]
    try:
        return store.verify()
    except IntegrityError as exc:
        return str(exc)
    finally:
        sqlite_store.parallel_verify = original
        store.close()


def parallel(path: Path) -> list[ChainReport] | None:
    """The parallel pass alone, on a read snapshot of its own."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
        return sqlite_verify.parallel_verify(conn, str(path), heads, sqlite_store._LEDGER_SCHEMA)
    finally:
        conn.close()


def opened(path: Path) -> list[ChainReport] | str:
    """What opening and verifying the store says (both passes as they run in production): open
    refuses the store, or the failing chain alone (``damaged``), which ``verify`` then names."""
    try:
        store = SqliteStore(path, DIM)
    except IntegrityError as exc:
        return str(exc)
    try:
        return store.verify()
    except IntegrityError as exc:
        assert exc.chain in store.damaged, (str(exc), store.damaged)
        return str(exc)
    finally:
        store.close()


def assert_agrees(path: Path, *, passes: bool) -> list[ChainReport] | str:
    """The parallel pass passes exactly when the reference does, with its reports; when it does
    not, opening and verifying the store raises the reference's error."""
    reference = one_pass(path)
    assert isinstance(reference, list) == passes, reference
    fast = parallel(path)
    if passes:
        assert fast == reference
    else:
        assert fast is None
    assert opened(path) == reference
    return reference


def rowid(path: Path, chain: str, seq: int) -> int:
    with contextlib.closing(sqlite3.connect(path)) as con:
        return int(
            con.execute("SELECT rowid FROM entries WHERE chain=? AND seq=?", (chain, seq)).fetchone()[0]
        )


def sql(path: Path, statement: str, *args: object) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute(statement, args)
    finally:
        con.close()


def flip_body(path: Path, row: int) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        (body,) = con.execute("SELECT body FROM bodies WHERE rowid=?", (row,)).fetchone()
        i = body.index(b"observation") + 20
        changed = body[:i] + bytes([body[i] ^ 0x20]) + body[i + 1 :]
        con.execute("UPDATE bodies SET body=? WHERE rowid=?", (changed, row))
    finally:
        con.close()


# ---------------------------------------------------------------- untouched stores


def test_the_untouched_store_verifies_with_the_reference_reports(store: Path, split: Spy) -> None:
    reports = assert_agrees(store, passes=True)
    assert isinstance(reports, list)
    assert [(r.chain, r.entries, r.head_seq, r.bodies_erased) for r in reports] == [
        (B, 11, 10, 0),
        (C, 5, 4, 0),
        (A, 12, 11, 2),
    ]
    assert split.by_worker == set(split.blocks[1:]), "the worker scanned not every block but the first"


def test_a_chain_whose_entries_are_all_in_the_upper_half_verifies(store: Path, split: Spy) -> None:
    reports = parallel(store)
    assert reports is not None
    (c,) = [r for r in reports if r.chain == C]
    assert (c.entries, c.head_seq) == (5, 4)
    assert any(lo >= 17 for lo, _ in split.by_worker)


def test_a_tombstone_in_the_upper_half_explains_bodies_erased_in_the_lower_half(
    store: Path, split: Spy
) -> None:
    reports = parallel(store)
    assert reports is not None
    (a,) = [r for r in reports if r.chain == A]
    assert a.bodies_erased == 2 and a._missing == [1, 3] and a._erased == {1, 3}
    assert split.by_worker


def test_a_large_store_with_the_real_block_sizes_verifies_in_parallel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No shrunk blocks here: 9,000 entries in three chains, filled through the store's append."""
    monkeypatch.undo()
    monkeypatch.setattr(sqlite_verify, "_cpus", lambda: 2)
    path = tmp_path / "big.db"
    s = SqliteStore(path, DIM, verify=False)
    with s._write() as conn:
        for n in range(9_000):
            chain = f"chain-{n % 3}"
            body = canonical({"repository": chain, "attempt_id": f"id-{n}", "n": n, "text": "x" * (n % 50)})
            s._append(conn, Seal(), chain, "attempt", f"id-{n}", "2026-01-01T00:00:00Z", "agent", body)
    s.close()
    assert sqlite_verify.PARALLEL_MIN_ENTRIES <= 9_000
    workers = []
    original = sqlite_verify._start

    def start(argv: list[str], queue: int) -> subprocess.Popen[bytes] | None:
        proc = original(argv, queue)
        workers.append(proc)
        return proc

    monkeypatch.setattr(sqlite_verify, "_start", start)
    assert_agrees(path, passes=True)
    assert workers and all(w is not None for w in workers)
    flip = rowid(path, "chain-2", 2_900)
    sql(path, "UPDATE bodies SET body = CAST(body || ' ' AS BLOB) WHERE rowid=?", flip)
    message = assert_agrees(path, passes=False)
    assert "chain 'chain-2' seq 2900: body does not match" in str(message)


def test_a_store_path_with_odd_characters_reaches_the_worker(
    template: Path, tmp_path: Path, split: Spy
) -> None:
    path = tmp_path / "a b?c#d%20e é" / "mentis.db"
    path.parent.mkdir()
    shutil.copyfile(template, path)
    assert_agrees(path, passes=True)
    assert split.by_worker


@pytest.mark.parametrize("procs", [2, 3, 4])
def test_blocks_cover_the_rowids_shrink_and_fit_the_queue(
    monkeypatch: pytest.MonkeyPatch, procs: int
) -> None:
    monkeypatch.undo()
    for lo, hi in [(1, 1), (1, 4_000), (-5, 100_323), (1, 10**6), (1, 10**8), (7, 2**40)]:
        blocks = sqlite_verify.block_ranges(lo, hi, procs)
        assert blocks[0][0] == lo and blocks[-1][1] == hi
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(blocks))
        sizes = [b - a + 1 for a, b in blocks]
        assert sizes[:-1] == sorted(sizes[:-1], reverse=True)
        assert len(blocks) <= sqlite_verify.QUEUE_BLOCKS
        assert len(b"".join(ledger_scan.queue_item(a, b) for a, b in blocks)) <= 4096


# ---------------------------------------------------------------- tampering


@pytest.mark.parametrize("row", [22, 17, 16, 28], ids=["upper-half", "block-start", "block-end", "last"])
def test_a_changed_body_is_refused_wherever_it_lies(store: Path, split: Spy, row: int) -> None:
    flip_body(store, row)
    message = assert_agrees(store, passes=False)
    assert "body does not match its body_hash" in str(message)


@pytest.mark.parametrize("row", [21, 17, 16])
@pytest.mark.parametrize("column", ["agent", "at", "id", "prev", "hash", "body_hash", "kind", "seq", "v"])
def test_a_changed_entry_column_is_refused(store: Path, column: str, row: int) -> None:
    value = {"seq": "seq + 100", "v": "v + 1", "kind": "'attempt' || 'x'"}.get(column, f"{column} || 'x'")
    sql(store, f"UPDATE entries SET {column} = {value} WHERE rowid=?", row)
    assert_agrees(store, passes=False)


@pytest.mark.parametrize(
    ("statement", "what"),
    [
        ("UPDATE entries SET agent = CAST(agent AS BLOB) WHERE rowid=19", "an entry column holds a value"),
        ("UPDATE entries SET prev = CAST(prev AS BLOB) WHERE rowid=19", "prev does not match"),
        ("UPDATE bodies SET body = CAST(body AS TEXT) WHERE rowid=19", "body is not a blob"),
    ],
    ids=["agent", "prev", "body"],
)
def test_a_value_of_the_wrong_type_is_refused(store: Path, statement: str, what: str) -> None:
    sql(store, statement)
    assert f"chain {C!r} seq 1: {what}" in str(assert_agrees(store, passes=False))


def test_a_missing_body_in_the_upper_half_with_no_tombstone_is_refused(store: Path, split: Spy) -> None:
    sql(store, "DELETE FROM bodies WHERE rowid=22")
    message = assert_agrees(store, passes=False)
    assert f"chain {C!r} seq 2: body is missing" in str(message)
    assert any(lo <= 22 <= hi for lo, hi in split.by_worker)


def test_a_missing_body_that_a_later_tombstone_does_not_list_is_refused(store: Path) -> None:
    sql(store, "DELETE FROM bodies WHERE rowid=?", rowid(store, A, 0))
    assert "seq 0: body is missing" in str(assert_agrees(store, passes=False))


def test_a_body_put_back_for_an_erased_entry_is_refused(store: Path) -> None:
    sql(store, "INSERT INTO bodies(rowid, body) SELECT 3, body FROM bodies WHERE rowid=5")
    assert_agrees(store, passes=False)


def test_a_changed_tombstone_is_refused(store: Path) -> None:
    sql(
        store,
        "UPDATE bodies SET body = CAST(replace(CAST(body AS TEXT), '[1,3]', '[1]') AS BLOB) WHERE rowid=21",
    )
    assert_agrees(store, passes=False)


@pytest.mark.parametrize("row", [17, 28, 16])
def test_a_deleted_entry_is_refused(store: Path, row: int) -> None:
    sql(store, "DELETE FROM entries WHERE rowid=?", row)
    sql(store, "DELETE FROM bodies WHERE rowid=?", row)
    assert_agrees(store, passes=False)


def test_a_truncated_chain_is_refused_by_its_recorded_head(store: Path) -> None:
    sql(store, "DELETE FROM entries WHERE rowid=28")
    sql(store, "DELETE FROM bodies WHERE rowid=28")
    assert "recorded head is seq 11" in str(assert_agrees(store, passes=False))


@pytest.mark.parametrize(
    "statement",
    [
        f"UPDATE heads SET seq = seq - 1 WHERE chain = '{C}'",
        f"UPDATE heads SET hash = 'ab' || substr(hash, 3) WHERE chain = '{B}'",
        f"DELETE FROM heads WHERE chain = '{C}'",
        "INSERT INTO heads VALUES('github.com/acme/ghost', 0, '')",
    ],
    ids=["seq", "hash", "deleted", "invented"],
)
def test_edited_heads_are_refused(store: Path, statement: str) -> None:
    sql(store, statement)
    assert_agrees(store, passes=False)


@pytest.mark.parametrize("row", [100, 0, 12])
def test_an_orphan_body_is_refused(store: Path, row: int) -> None:
    if row == 12:  # a hole in the entries' rowids that still holds a body
        sql(store, "DELETE FROM entries WHERE rowid=12")
    else:
        sql(store, "INSERT INTO bodies(rowid, body) VALUES(?, x'7b7d')", row)
    assert_agrees(store, passes=False)


def test_swapped_rowids_are_refused(store: Path) -> None:
    """Two entries of a chain trade rowids and bodies: every hash holds, the order does not."""
    a, b = rowid(store, A, 8), rowid(store, A, 9)
    for stmt in (
        f"UPDATE entries SET rowid = -1 WHERE rowid = {a}",
        f"UPDATE entries SET rowid = {a} WHERE rowid = {b}",
        f"UPDATE entries SET rowid = {b} WHERE rowid = -1",
        f"UPDATE bodies SET rowid = -1 WHERE rowid = {a}",
        f"UPDATE bodies SET rowid = {a} WHERE rowid = {b}",
        f"UPDATE bodies SET rowid = {b} WHERE rowid = -1",
    ):
        sql(store, stmt)
    assert "expected seq 8, found seq 9" in str(assert_agrees(store, passes=False))


def test_a_ledger_table_created_otherwise_goes_to_the_one_pass(store: Path) -> None:
    con = sqlite3.connect(store, isolation_level=None)
    try:
        con.executescript(
            "CREATE TABLE e2 AS SELECT * FROM entries; DROP TABLE entries; ALTER TABLE e2 RENAME TO entries;"
        )
    finally:
        con.close()
    assert parallel(store) is None
    with pytest.raises(StoreError, match="entries is table"):  # and open refuses the schema (issue 24)
        SqliteStore(store, DIM)


def test_a_key_id_goes_to_the_one_pass(store: Path) -> None:
    sql(store, "UPDATE entries SET key_id = 'k1' WHERE rowid = 9")
    assert parallel(store) is None
    assert opened(store) == one_pass(store)


def reseal(path: Path, chain: str, seq: int, render: Callable[[dict[str, Any]], bytes]) -> None:
    """Hash ``chain`` again from ``seq`` on with ``render``, relinking prevs and the head, as a
    tamperer who knows the format would."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        cols = "rowid, agent, at, body_hash, chain, id, kind, prev, seq, v"
        rows = con.execute(f"SELECT {cols} FROM entries WHERE chain=? AND seq>=? ORDER BY seq", (chain, seq))
        prev = None
        for rowid_, *values in rows.fetchall():
            doc = dict(
                zip(
                    ("agent", "at", "body_hash", "chain", "id", "kind", "prev", "seq", "v"),
                    values,
                    strict=True,
                )
            )
            if prev is not None:
                doc["prev"] = prev
            prev = hashlib.sha256(render(doc)).hexdigest()
            con.execute("UPDATE entries SET prev=?, hash=? WHERE rowid=?", (doc["prev"], prev, rowid_))
        con.execute("UPDATE heads SET hash=? WHERE chain=?", (prev, chain))
    finally:
        con.close()


def plain_bytes(doc: dict[str, Any]) -> bytes:
    """The template's rendering whatever the strings hold: not canonical when one needs escaping."""
    return ledger_scan.render_plain(**{("id_" if k == "id" else k): v for k, v in doc.items()}).encode()


ODD = ['x"y', "back\\slash", "tab\tz", "nul\x00", "line\u2028sep", "emoji\U0001f600", "nbsp\u00a0"]


@pytest.mark.parametrize("value", ODD)
@pytest.mark.parametrize(("column", "row"), [("agent", 18), ("id", 22), ("at", 5), ("body_hash", 3)])
def test_an_entry_resealed_with_the_canonical_form_verifies(
    store: Path, column: str, row: int, value: str
) -> None:
    """Odd strings, hashed as the ledger hashes them: both passes accept (the careful loop renders)."""
    chain, seq = _column(store, "SELECT chain FROM entries WHERE rowid=?", row)[0], _seq(store, row)
    set_column(store, column, row, value)
    reseal(store, str(chain), seq, canonical)
    assert_agrees(store, passes=True)  # row 3's body is erased: its body_hash is only hashed


@pytest.mark.parametrize("value", ODD)
@pytest.mark.parametrize(("column", "row"), [("agent", 18), ("id", 22), ("body_hash", 3)])
def test_an_entry_resealed_with_the_template_is_refused_when_that_is_not_canonical(
    store: Path, column: str, row: int, value: str
) -> None:
    chain, seq = _column(store, "SELECT chain FROM entries WHERE rowid=?", row)[0], _seq(store, row)
    set_column(store, column, row, value)
    reseal(store, str(chain), seq, plain_bytes)
    assert_agrees(store, passes=not ledger_scan.needs_escape(value))


def set_column(path: Path, column: str, row: int, value: str) -> None:
    """Change one entry column; an attempt's new id goes into its body too (its body names it)."""
    sql(path, f"UPDATE entries SET {column} = ? WHERE rowid=?", value, row)
    if column == "id":
        (raw,) = _column(path, "SELECT body FROM bodies WHERE rowid=?", row)
        body = canonical({**orjson.loads(raw), "attempt_id": value})  # type: ignore[arg-type]
        sql(path, "UPDATE bodies SET body=? WHERE rowid=?", body, row)
        sql(path, "UPDATE entries SET body_hash=? WHERE rowid=?", hashlib.sha256(body).hexdigest(), row)


def _seq(path: Path, row: int) -> int:
    return int(str(_column(path, "SELECT seq FROM entries WHERE rowid=?", row)[0]))


# ---------------------------------------------------------------- random tampering, in-process


def scan_here(path: Path) -> list[ChainReport] | None:
    """The parallel pass with every block scanned in this process (no worker: fast enough for
    hypothesis)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
        return sqlite_verify.verify_blocks(conn, str(path), heads, sqlite_store._LEDGER_SCHEMA, 0)
    finally:
        conn.close()


COLUMNS = ["v", "chain", "seq", "kind", "id", "at", "agent", "prev", "body_hash", "key_id", "sig", "hash"]
VALUES = st.one_of(
    st.none(),
    st.integers(-2, 30),
    st.sampled_from(["", "attempt", "forget", A, B, C, "x\u2028y", 'q"', "b\\s"]),
    st.binary(max_size=4),
    st.floats(allow_nan=False),
)


@st.composite
def tampering(draw: st.DrawFn) -> list[tuple[str, tuple[object, ...]]]:
    edits: list[tuple[str, tuple[object, ...]]] = []
    for _ in range(draw(st.integers(1, 3))):
        row = draw(st.integers(0, 30))
        what = draw(st.sampled_from(["column", "copy", "body", "drop-body", "drop-entry", "head", "orphan"]))
        if what == "column":
            col = draw(st.sampled_from(COLUMNS))
            edits.append((f"UPDATE entries SET {col} = ? WHERE rowid = ?", (draw(VALUES), row)))
        elif what == "copy":
            col = draw(st.sampled_from(COLUMNS))
            other = draw(st.integers(1, 28))
            copy = f"UPDATE entries SET {col} = (SELECT {col} FROM entries WHERE rowid = ?) WHERE rowid = ?"
            edits.append((copy, (other, row)))
        elif what == "body":
            edits.append(("UPDATE bodies SET body = ? WHERE rowid = ?", (draw(st.binary(max_size=8)), row)))
        elif what == "drop-body":
            edits.append(("DELETE FROM bodies WHERE rowid = ?", (row,)))
        elif what == "drop-entry":
            edits.append(("DELETE FROM entries WHERE rowid = ?", (row,)))
        elif what == "head":
            col = draw(st.sampled_from(["seq", "hash", "chain"]))
            edits.append(
                (
                    f"UPDATE heads SET {col} = ? WHERE chain = ?",
                    (draw(VALUES), draw(st.sampled_from([A, B, C]))),
                )
            )
        else:
            edits.append(("INSERT OR IGNORE INTO bodies(rowid, body) VALUES(?, x'7b7d')", (row,)))
    return edits


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tampering())
def test_random_tampering_never_passes_the_parallel_pass_when_the_reference_refuses(
    template: Path, tmp_path: Path, edits: list[tuple[str, tuple[object, ...]]]
) -> None:
    path = tmp_path / f"t{threading.get_ident()}-{time.monotonic_ns()}.db"
    shutil.copyfile(template, path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for statement, args in edits:
            with contextlib.suppress(sqlite3.IntegrityError):  # NOT NULL or UNIQUE: not possible
                con.execute(statement, args)
    finally:
        con.close()
    try:
        reference: list[ChainReport] | str = one_pass(path)
    except Exception as exc:  # the reference can fail otherwise too (a blob body: TypeError)
        reference = f"{type(exc).__name__}"
    fast = scan_here(path)
    if fast is not None:
        assert fast == reference
    path.unlink()


# ---------------------------------------------------------------- the canonical form


text = st.text(alphabet=st.characters(exclude_categories=("Cs",)))
special = st.text(
    alphabet=st.sampled_from('"\\\x00\x01\x08\t\n\x0b\x0c\r\x1f\x7f\u2028\u2029\ufeff\U0001f600é')
)
fields = st.one_of(text, special, st.text(alphabet="abcdef0123456789", min_size=64, max_size=64))


def document(values: tuple[str, ...], seq: int) -> dict[str, Any]:
    keys = ("agent", "at", "body_hash", "chain", "id", "kind", "prev")
    return dict(zip(keys, values, strict=True)) | {"seq": seq, "v": VERSION}


@settings(max_examples=2000, deadline=None)
@given(st.tuples(*[fields] * 7), st.integers(0, MAX_SAFE_INT))
def test_both_renderings_are_the_canonical_bytes(values: tuple[str, ...], seq: int) -> None:
    doc = document(values, seq)
    expected = canonical(doc)
    assert expected == rfc8785.dumps(doc) == orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)
    assert ledger_scan.render_quoted(*values, seq, VERSION).encode() == expected
    plain = ledger_scan.render_plain(*values, seq, VERSION).encode()
    assert (plain == expected) == (not any(ledger_scan.needs_escape(v) for v in values))


@given(fields)
def test_needs_escape_is_exactly_whether_rfc8785_escapes(value: str) -> None:
    assert ledger_scan.needs_escape(value) == (orjson.dumps(value).decode() != f'"{value}"')
    assert ledger_scan.quote(value) == orjson.dumps(value).decode()


def _row(values: tuple[str, ...], seq: int, body: bytes | None) -> tuple[object, ...]:
    agent, at, _, chain, id_, kind, prev = values
    body_hash = hashlib.sha256(body or b"").hexdigest()
    doc = document((agent, at, body_hash, chain, id_, kind, prev), seq)
    return (
        agent,
        at,
        body_hash,
        chain,
        id_,
        kind,
        prev,
        seq,
        hashlib.sha256(canonical(doc)).hexdigest(),
        body,
        None,  # key_id
        None,  # sig
        1,  # rowid
    )


@settings(max_examples=500, deadline=None)
@given(st.tuples(*[fields] * 7), st.integers(0, MAX_SAFE_INT), st.binary())
def test_the_scan_loops_hash_what_canonical_hashes(values: tuple[str, ...], seq: int, body: bytes) -> None:
    """Both loops accept an entry sealed with ``canonical`` and refuse it with another hash; the
    plain loop, only ever given rows whose free text needs no escaping, accepts the entry exactly
    when no string in it needs escaping."""
    assume(values[5] != "agent" and not values[3].startswith("__"))  # system chains: tested apart
    own = "thought_id" if values[5] == "thought" else "attempt_id"
    # a body that stands in its chain, whatever the kind: these loops' other checks are tested apart
    row = _row(values, seq, canonical({"repository": values[3], own: values[4], "data": body.hex()}))
    bad = (*row[:8], "0" * 64, *row[9:])
    assert ledger_scan._Scan(KINDS, VERSION).careful([row]) is True
    assert ledger_scan._Scan(KINDS, VERSION).careful([bad]) is False
    if not any(ledger_scan.needs_escape(row[i]) for i in (0, 1, 3, 4)):
        plain = not any(ledger_scan.needs_escape(v) for v in row[:7])
        assert ledger_scan._Scan(KINDS, VERSION).plain([row]) is plain
        assert ledger_scan._Scan(KINDS, VERSION).plain([bad]) is False


# ---------------------------------------------------------------- workers that fail


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        [sys.executable, "-c", "import sys; sys.stdout.write('not a marshal')"],
        ["/nonexistent/python"],
    ],
    ids=["exits", "garbage", "cannot-start"],
)
def test_a_failed_worker_leaves_its_blocks_to_this_process(
    store: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setattr(ledger_scan, "worker_argv", lambda *a: argv)
    assert parallel(store) == one_pass(store)
    flip_body(store, 22)
    assert parallel(store) is None


def test_a_hung_worker_is_killed_and_its_blocks_scanned_here(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # takes a block, then hangs
    hang = "import os, sys, time; os.read(int(sys.argv[1]), 16); time.sleep(60)"
    monkeypatch.setattr(
        ledger_scan, "worker_argv", lambda uri, queue, *a: [sys.executable, "-c", hang, str(queue)]
    )
    monkeypatch.setattr(sqlite_verify, "WORKER_TIMEOUT_S", 1.0)
    started = time.monotonic()
    assert parallel(store) == one_pass(store)
    assert time.monotonic() - started < 10


# ---------------------------------------------------------------- writers during the verification


@pytest.fixture
def writer(store: Path) -> Iterator[Memory]:
    m = Memory.open(Settings(home=store.parent, db_path=store, embedder="hash"), HashEmbedder())
    yield m
    m.close()


def _before_workers(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> list[object]:
    """Run ``action`` once, after this process took its snapshot and before a worker starts."""
    results: list[object] = []
    start, stitch = sqlite_verify._start, sqlite_verify._stitch

    def hooked(argv: list[str], queue: int) -> subprocess.Popen[bytes] | None:
        if not results:
            action()
            results.append("ran")
        return start(argv, queue)

    def spied(*args: Any) -> list[ChainReport] | None:
        out = stitch(*args)
        results.append(out)
        return out

    monkeypatch.setattr(sqlite_verify, "_start", hooked)
    monkeypatch.setattr(sqlite_verify, "_stitch", spied)
    return results


def test_entries_appended_after_the_snapshot_do_not_fail_the_parallel_pass(
    store: Path, writer: Memory, monkeypatch: pytest.MonkeyPatch, split: Spy
) -> None:
    before = one_pass(store)
    assert isinstance(before, list)

    def append() -> None:
        for n in range(6):
            _record(writer, [A, B, C, "github.com/acme/new"][n % 4], 100 + n, {}, "x")

    results = _before_workers(monkeypatch, append)
    SqliteStore(store, DIM).close()
    assert results[0] == "ran"
    assert results[1] == before  # the snapshot's chains and heads, from the parallel pass
    assert split.by_worker
    after = one_pass(store)
    assert isinstance(after, list) and len(after) == 4


def test_a_forget_after_the_snapshot_does_not_fail_the_verification(
    store: Path, writer: Memory, monkeypatch: pytest.MonkeyPatch, split: Spy
) -> None:
    """The forget deletes a body that the worker's snapshot lacks and this one holds, and the
    tombstone that explains it lies above the snapshot's rowids: no false failure."""
    before = one_pass(store)
    assert isinstance(before, list)
    (b9,) = _column(store, "SELECT id FROM entries WHERE chain=? AND seq=9", B)

    def forget() -> None:
        writer.forget_attempt(CALLER, ForgetInput(repository=B, attempt_id=str(b9), reason="late"))

    results = _before_workers(monkeypatch, forget)
    s = SqliteStore(store, DIM, verify=False)
    try:
        assert s.verify() == before  # the snapshot's reports
    finally:
        s.close()
    assert results[0] == "ran"
    assert (21, 24) in split.by_worker
    assert results[1] is None  # the worker saw B:9's body gone; the one pass decided
    after = one_pass(store)
    assert isinstance(after, list)
    assert [(r.chain, r.entries) for r in after] == [(r.chain, r.entries + (r.chain == B)) for r in before]


def _column(path: Path, statement: str, *args: object) -> list[object]:
    with contextlib.closing(sqlite3.connect(path)) as con:
        return [r[0] for r in con.execute(statement, args)]


def test_verifying_while_another_process_writes_never_fails(store: Path, tmp_path: Path) -> None:
    script = tmp_path / "write.py"
    stop = tmp_path / "stop"
    script.write_text(
        "import sys\n"
        "from pathlib import Path\n"
        "from mentis.config import Settings\n"
        "from mentis.providers.embed import HashEmbedder\n"
        "from mentis.service.memory import Caller, Memory\n"
        "from mentis.api.attempts import ForgetInput, RecordAttemptInput\n"
        "path, stop = Path(sys.argv[1]), Path(sys.argv[2])\n"
        "m = Memory.open(Settings(home=path.parent, db_path=path, embedder='hash'), HashEmbedder())\n"
        "c = Caller(agent_id='w')\n"
        "print('ready', flush=True)\n"
        "for n in range(20_000):\n"
        "    if stop.exists():\n"
        "        break\n"
        "    repo = ['github.com/acme/shop', 'github.com/acme/api'][n % 2]\n"
        "    r = m.record_attempt(c, RecordAttemptInput(repository=repo, task_id='t', action=f'a{n}',\n"
        "                                                 observation=f'o{n}'))\n"
        "    if n % 5 == 4:\n"
        "        m.forget_attempt(c, ForgetInput(repository=repo, attempt_id=r.attempt_id))\n"
        "m.close()\n"
    )
    before = _column(store, "SELECT count(*) FROM entries")[0]
    proc = subprocess.Popen([sys.executable, str(script), str(store), str(stop)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == b"ready\n"
        for _ in range(4):  # the writer keeps writing until told to stop
            SqliteStore(store, DIM).close()  # raises IntegrityError on a false failure
            assert proc.poll() is None
    finally:
        stop.touch()
        assert proc.wait(timeout=60) == 0
        proc.stdout.close()
    assert _column(store, "SELECT count(*) FROM entries")[0] > before
    assert isinstance(assert_agrees(store, passes=True), list)
