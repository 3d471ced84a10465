"""Tampering with the SQLite file outside Mentis is caught (DESIGN §3-4).

Every place the store keeps an entry, a body or returned content is edited by one byte with
plain ``sqlite3`` while Mentis is closed; opening the store (``SqliteStore``, ``Memory.open``)
must refuse the edited chain, naming it and the seq (``IntegrityError``), while the other
repository is served, or refuse the whole store when the edit belongs to no one chain; and
``mentis verify-integrity`` must exit 6. Edits made while a ``Memory`` is open must be caught when
the content is read.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecallInput, RecordAttemptInput, SearchInput
from mentis.api.verify import ChainResult, VerifyResult
from mentis.config import Settings
from mentis.errors import IntegrityError, NotFound
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite.store import SqliteStore

A = "github.com/acme/shop"
B = "github.com/acme/api"
DIM = HashEmbedder().dim
CALLER = Caller(agent_id="test-agent")
MENTIS = [sys.executable, "-m", "mentis"]

# Chain A, by seq:                       Chain B, by seq:
#   0 attempt a0 (checkout, titled)        0 attempt b0
#   1 attempt a1 (checkout)  -> erased     1 attempt b1
#   2 attempt a2 (login)                   2 attempt b2
#   3 correction of a0
#   4 correction of a1       -> erased
#   5 forget a1 (tombstone, erased [1, 4])
#   6 attempt a3 (login)
MIDDLE = 2
LAST = 6
A2_TEXT = ("raise the login rate limiter burst", "login requests still throttled at ten per second")


@dataclass(frozen=True)
class Built:
    memory: Memory
    path: Path
    ids: dict[str, str]


def settings_for(path: Path) -> Settings:
    return Settings(home=path.parent, db_path=path, embedder="hash")


def record(memory: Memory, repository: str, task_id: str, action: str, observation: str, **kw: Any) -> str:
    req = RecordAttemptInput(
        repository=repository, task_id=task_id, action=action, observation=observation, **kw
    )
    return memory.record_attempt(CALLER, req).attempt_id


def build(path: Path) -> Built:
    """The store described above, left open. Writes to A and B interleave."""
    m = Memory.open(settings_for(path), HashEmbedder())
    ids: dict[str, str] = {}
    ids["a0"] = record(
        m,
        A,
        "checkout",
        "rerun the flaky checkout test with a fixed seed",
        "checkout test passes with seed 42",
        task_title="Flaky checkout test",
    )
    ids["b0"] = record(m, B, "pagination", "add cursor pagination", "cursor breaks on deleted rows")
    ids["a1"] = record(m, A, "checkout", "pin the payment sandbox version", "sandbox token leaked here")
    ids["a2"] = record(m, A, "login", *A2_TEXT)
    ids["b1"] = record(m, B, "pagination", "use keyset pagination", "keyset order is stable")
    m.mark_conclusion_outdated(
        CALLER, MarkOutdatedInput(repository=A, attempt_id=ids["a0"], reason="seed no longer fixes it")
    )
    m.mark_conclusion_outdated(
        CALLER, MarkOutdatedInput(repository=A, attempt_id=ids["a1"], reason="sandbox was upgraded")
    )
    m.forget_attempt(CALLER, ForgetInput(repository=A, attempt_id=ids["a1"], reason="holds a token"))
    ids["b2"] = record(m, B, "rate-limit", "lower the api quota", "quota errors vanish")
    ids["a3"] = record(m, A, "login", "cache the session lookup", "login latency drops by half")
    return Built(m, path, ids)


@pytest.fixture
def built(tmp_path: Path) -> Iterator[Built]:
    """The store, with its Memory open."""
    b = build(tmp_path / "mentis.db")
    yield b
    b.memory.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "mentis.db"
    build(path).memory.close()
    assert not Path(f"{path}-wal").exists()  # closing checkpointed everything into the file
    return path


@pytest.fixture
def closed(template: Path, tmp_path: Path) -> Path:
    """A private copy of the store, with Mentis closed."""
    path = tmp_path / "mentis.db"
    shutil.copyfile(template, path)
    return path


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection on the file, outside Mentis (autocommit)."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        yield con
    finally:
        con.close()


def rowid_of(con: sqlite3.Connection, chain: str, seq: int) -> int:
    return int(con.execute("SELECT rowid FROM entries WHERE chain=? AND seq=?", (chain, seq)).fetchone()[0])


def body_of(con: sqlite3.Connection, chain: str, seq: int) -> bytes:
    row = con.execute("SELECT body FROM bodies WHERE rowid=?", (rowid_of(con, chain, seq),)).fetchone()
    return bytes(row[0])


def flip(text: str, index: int | None = None) -> str:
    """``text`` with one character changed to another of the same kind (hex stays hex)."""
    i = len(text) // 2 if index is None else index % len(text)
    c = text[i]
    if c.isdigit():
        r = str((int(c) + 1) % 10)
    elif c in "abcde":
        r = chr(ord(c) + 1)
    elif c == "f":
        r = "a"
    elif c.isalpha():
        r = c.swapcase()
    else:
        r = "x"
    out = text[:i] + r + text[i + 1 :]
    assert out != text and len(out.encode()) == len(text.encode())
    return out


def flip_in_value(body: bytes, key: str) -> bytes:
    """``body`` with one letter inside the JSON string value of ``key`` changed; still valid JSON."""
    marker = f'"{key}":"'.encode()
    start = body.index(marker) + len(marker)
    i = next(j for j in range(start, len(body)) if chr(body[j]).isalpha())
    out = body[:i] + chr(body[i]).swapcase().encode() + body[i + 1 :]
    assert json.loads(out)[key] != json.loads(body)[key]
    assert sum(x != y for x, y in zip(out, body, strict=True)) == 1
    return out


def set_body(con: sqlite3.Connection, chain: str, seq: int, body: bytes) -> None:
    con.execute("UPDATE bodies SET body=? WHERE rowid=?", (body, rowid_of(con, chain, seq)))


def cli_env(path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(MENTIS_EMBEDDER="hash", MENTIS_HOME=str(path.parent), MENTIS_AGENT_ID="test-agent")
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")  # a cheaper start-up
    env.pop("MENTIS_DB", None)
    return env


def start_verify(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*MENTIS, "verify", "--db", str(path)],
        env=cli_env(path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, out, err


def cli_verify(path: Path) -> tuple[int, str, str]:
    return finish(start_verify(path))


def check_names(err: IntegrityError, chain: str | None, seqs: set[int] | None) -> None:
    """The error names ``chain`` and one of ``seqs`` (any seq when ``seqs`` is None)."""
    if chain is None:
        return
    assert err.chain == chain, str(err)
    assert isinstance(err.seq, int), str(err)
    if seqs is not None:
        assert err.seq in seqs, str(err)
    assert f"chain {chain!r} seq {err.seq}" in str(err)


def assert_refused(path: Path, chain: str | None, seqs: set[int] | None) -> None:
    """Opening the store refuses ``chain`` (named, with the seq) and serves the other repository; a
    defect of no one chain (``chain`` None) refuses the whole store. `mentis verify-integrity`
    exits 6 naming it."""
    proc = start_verify(path)  # runs while the in-process checks do
    try:
        failure = _refused_whole(path) if chain is None else _refused_chain(path, chain, seqs)
    finally:
        code, out, err = finish(proc)
    assert code == IntegrityError.exit_code == 6, err
    assert out == ""
    if chain is not None:
        assert f"chain {chain!r} seq {failure.seq}" in err
    else:
        assert "does not verify" in err


def _refused_whole(path: Path) -> IntegrityError:
    with pytest.raises(IntegrityError) as by_store:
        SqliteStore(path, DIM)
    with pytest.raises(IntegrityError) as by_memory:
        Memory.open(settings_for(path), HashEmbedder())
    assert str(by_memory.value) == str(by_store.value)
    return by_store.value


def _refused_chain(path: Path, chain: str, seqs: set[int] | None) -> IntegrityError:
    store = SqliteStore(path, DIM)
    try:
        failure = store.damaged[chain]
    finally:
        store.close()
    check_names(failure, chain, seqs)
    m = Memory.open(settings_for(path), HashEmbedder())
    try:
        assert set(m.store.damaged) >= {chain}
        with pytest.raises(IntegrityError) as refused:
            m.verify_integrity(CALLER, chain)
        check_names(refused.value, chain, {failure.seq})
        assert "mentis doctor" in str(refused.value)
        for other in {A, B} - set(m.store.damaged):  # the other repository is served
            assert m.verify_integrity(CALLER, other).chains[0].chain == other
            m.search(CALLER, SearchInput(query="login checkout pagination", repository=other))
    finally:
        m.close()
    return failure


# ---------------------------------------------------------------- the untampered store


def expected_verify(path: Path) -> VerifyResult:
    with raw(path) as con:
        heads = dict(con.execute("SELECT chain, hash FROM heads"))
    return VerifyResult(
        ok=True,
        chains=[
            ChainResult(chain=B, ok=True, entries=3, head_seq=2, head_hash=heads[B], bodies_erased=0),
            ChainResult(chain=A, ok=True, entries=7, head_seq=LAST, head_hash=heads[A], bodies_erased=2),
        ],
    )


def test_an_untouched_store_with_a_forget_verifies_because_the_tombstone_explains_the_gaps(
    closed: Path,
) -> None:
    with raw(closed) as con:
        missing = [
            seq
            for (seq,) in con.execute(
                "SELECT e.seq FROM entries e LEFT JOIN bodies b ON b.rowid = e.rowid "
                "WHERE b.rowid IS NULL AND e.chain=? ORDER BY e.seq",
                (A,),
            )
        ]
        tomb = json.loads(body_of(con, A, 5))
    assert missing == [1, 4]
    assert tomb["erased"] == [1, 4]

    expected = expected_verify(closed)
    store = SqliteStore(closed, DIM)
    store.close()
    m = Memory.open(settings_for(closed), HashEmbedder())
    try:
        assert m.verify_integrity(CALLER) == expected
    finally:
        m.close()

    code, out, err = cli_verify(closed)
    assert code == 0, err
    assert json.loads(out) == expected.model_dump(mode="json")


# ---------------------------------------------------------------- entries


ENTRY_EDITS: dict[str, Callable[[Any], Any]] = {
    "v": lambda v: v + 1,
    # a name that sorts after A, so A's own gap at seq 2 is the first thing found
    "chain": lambda c: c[:-1] + chr(ord(c[-1]) + 1),
    "seq": lambda s: s + 7,
    "kind": lambda k: flip(k, -1),
    "id": flip,
    "at": lambda t: flip(t, 5),
    "agent": flip,
    "prev": flip,
    "body_hash": flip,
    "hash": flip,
    "key_id": lambda _: "k1",
    "sig": lambda _: "c2lnbmF0dXJl",
}


@pytest.mark.parametrize("column", list(ENTRY_EDITS))
def test_editing_one_column_of_a_middle_entry_makes_open_and_verify_refuse(closed: Path, column: str) -> None:
    with raw(closed) as con:
        rowid = rowid_of(con, A, MIDDLE)
        (old,) = con.execute(f"SELECT {column} FROM entries WHERE rowid=?", (rowid,)).fetchone()
        new = ENTRY_EDITS[column](old)
        assert new != old
        con.execute(f"UPDATE entries SET {column}=? WHERE rowid=?", (new, rowid))
    assert_refused(closed, A, {MIDDLE})


@pytest.mark.parametrize(
    ("chain", "seq", "key"),
    [
        (A, MIDDLE, "observation"),  # an attempt
        (A, 3, "reason"),  # a correction
        (A, 5, "reason"),  # a forget tombstone
        (B, 1, "action"),  # the other chain
    ],
)
def test_flipping_one_letter_inside_a_body_makes_open_and_verify_refuse(
    closed: Path, chain: str, seq: int, key: str
) -> None:
    with raw(closed) as con:
        set_body(con, chain, seq, flip_in_value(body_of(con, chain, seq), key))
    assert_refused(closed, chain, {seq})


def test_changing_the_erased_list_of_a_tombstone_makes_open_and_verify_refuse(closed: Path) -> None:
    with raw(closed) as con:
        body = body_of(con, A, 5)
        assert b'"erased":[1,4]' in body
        set_body(con, A, 5, body.replace(b'"erased":[1,4]', b'"erased":[1,3]'))
    assert_refused(closed, A, {5})


def test_swapping_the_bodies_of_two_entries_makes_open_and_verify_refuse(closed: Path) -> None:
    with raw(closed) as con:
        two, six = body_of(con, A, MIDDLE), body_of(con, A, LAST)
        set_body(con, A, MIDDLE, six)
        set_body(con, A, LAST, two)
    assert_refused(closed, A, {MIDDLE})


def test_putting_a_made_up_body_back_for_an_erased_entry_makes_open_and_verify_refuse(
    closed: Path,
) -> None:
    with raw(closed) as con:
        fake = body_of(con, A, MIDDLE)
        con.execute("INSERT INTO bodies(rowid, body) VALUES(?, ?)", (rowid_of(con, A, 1), fake))
    assert_refused(closed, A, {1})


@pytest.mark.parametrize("seq", [MIDDLE, 5])
@pytest.mark.parametrize("with_body", [True, False], ids=["with-body", "entry-only"])
def test_deleting_a_middle_entry_makes_open_and_verify_refuse(
    closed: Path, seq: int, with_body: bool
) -> None:
    with raw(closed) as con:
        rowid = rowid_of(con, A, seq)
        con.execute("DELETE FROM entries WHERE rowid=?", (rowid,))
        if with_body:
            con.execute("DELETE FROM bodies WHERE rowid=?", (rowid,))
    assert_refused(closed, A, {seq})


@pytest.mark.parametrize(("chain", "seq"), [(A, MIDDLE), (A, 3), (B, 0)])
def test_deleting_a_body_no_tombstone_covers_makes_open_and_verify_refuse(
    closed: Path, chain: str, seq: int
) -> None:
    with raw(closed) as con:
        con.execute("DELETE FROM bodies WHERE rowid=?", (rowid_of(con, chain, seq),))
    assert_refused(closed, chain, {seq})


def test_deleting_the_tombstone_body_leaves_the_erased_bodies_unexplained(closed: Path) -> None:
    with raw(closed) as con:
        con.execute("DELETE FROM bodies WHERE rowid=?", (rowid_of(con, A, 5),))
    assert_refused(closed, A, {1, 4, 5})


def test_swapping_the_seq_of_two_entries_makes_open_and_verify_refuse(closed: Path) -> None:
    with raw(closed) as con:
        con.execute("UPDATE entries SET seq=-1 WHERE chain=? AND seq=?", (A, MIDDLE))
        con.execute("UPDATE entries SET seq=? WHERE chain=? AND seq=?", (MIDDLE, A, MIDDLE + 1))
        con.execute("UPDATE entries SET seq=? WHERE chain=? AND seq=-1", (MIDDLE + 1, A))
    assert_refused(closed, A, {MIDDLE})


def test_reordering_two_entries_rows_makes_open_and_verify_refuse(closed: Path) -> None:
    """The entries keep their seqs but trade rowids, so each points at the other's body."""
    with raw(closed) as con:
        r2, r6 = rowid_of(con, A, MIDDLE), rowid_of(con, A, LAST)
        con.execute("UPDATE entries SET rowid=-1 WHERE rowid=?", (r2,))
        con.execute("UPDATE entries SET rowid=? WHERE rowid=?", (r2, r6))
        con.execute("UPDATE entries SET rowid=? WHERE rowid=-1", (r6,))
    assert_refused(closed, A, {MIDDLE})


@pytest.mark.parametrize(("chain", "last"), [(A, LAST), (B, 2)])
def test_deleting_the_last_entry_of_a_chain_and_its_body_makes_open_and_verify_refuse(
    closed: Path, chain: str, last: int
) -> None:
    with raw(closed) as con:
        rowid = rowid_of(con, chain, last)
        con.execute("DELETE FROM entries WHERE rowid=?", (rowid,))
        con.execute("DELETE FROM bodies WHERE rowid=?", (rowid,))
    assert_refused(closed, chain, {last})


HEAD_EDITS: dict[str, tuple[str, Callable[[sqlite3.Connection], None]]] = {
    "hash": (A, lambda con: con.execute("UPDATE heads SET hash=? WHERE chain=?", (flip("0" * 64), A))),
    "seq-down": (A, lambda con: con.execute("UPDATE heads SET seq=seq-1 WHERE chain=?", (A,))),
    "seq-up": (A, lambda con: con.execute("UPDATE heads SET seq=seq+1 WHERE chain=?", (A,))),
    "deleted": (A, lambda con: con.execute("DELETE FROM heads WHERE chain=?", (A,))),
    "renamed": (A + "x", lambda con: con.execute("UPDATE heads SET chain=? WHERE chain=?", (A + "x", A))),
    "invented": (
        "github.com/acme/ghost",
        lambda con: con.execute("INSERT INTO heads VALUES('github.com/acme/ghost', 0, ?)", ("0" * 64,)),
    ),
}


@pytest.mark.parametrize("edit", list(HEAD_EDITS))
def test_editing_heads_makes_open_and_verify_refuse(closed: Path, edit: str) -> None:
    chain, apply = HEAD_EDITS[edit]
    with raw(closed) as con:
        apply(con)
    assert_refused(closed, chain, None)


def test_an_orphan_body_row_makes_open_and_verify_refuse(closed: Path) -> None:
    with raw(closed) as con:
        (top,) = con.execute("SELECT max(rowid) FROM entries").fetchone()
        con.execute("INSERT INTO bodies(rowid, body) VALUES(?, ?)", (top + 100, b'{"action":"x"}'))
    with pytest.raises(IntegrityError, match=f"body row {top + 100} belongs to no entry"):
        SqliteStore(closed, DIM)
    assert_refused(closed, None, None)


# ---------------------------------------------------------------- tampering while a Memory is open


def a2_query() -> SearchInput:
    return SearchInput(query=" ".join(A2_TEXT), repository=A)


def test_search_and_history_return_the_attempt_before_anyone_tampers(built: Built) -> None:
    """The baseline for the tests below: the untouched attempt is the preview and in history."""
    found = built.memory.search(CALLER, a2_query())
    top = found.tasks[0]
    assert (top.task_id, top.attempt.attempt_id) == ("login", built.ids["a2"])
    history = built.memory.recall(CALLER, RecallInput(repository=A, task_id="login"))
    assert [r[0] for r in history.rows] == [built.ids["a2"], built.ids["a3"]]


@pytest.mark.parametrize("what", ["body", "entry"])
def test_an_attempt_changed_while_memory_is_open_makes_search_raise(built: Built, what: str) -> None:
    built.memory.search(CALLER, a2_query())  # warm: the index and connections are in use
    with raw(built.path) as con:
        if what == "body":
            set_body(con, A, MIDDLE, flip_in_value(body_of(con, A, MIDDLE), "observation"))
        else:
            con.execute("UPDATE entries SET agent='mallory' WHERE chain=? AND seq=?", (A, MIDDLE))
    with pytest.raises(IntegrityError) as info:
        built.memory.search(CALLER, a2_query())
    check_names(info.value, A, {MIDDLE})


@pytest.mark.parametrize("what", ["body", "entry"])
def test_an_attempt_changed_while_memory_is_open_makes_history_recall_raise(built: Built, what: str) -> None:
    with raw(built.path) as con:
        if what == "body":
            set_body(con, A, MIDDLE, flip_in_value(body_of(con, A, MIDDLE), "action"))
        else:
            con.execute("UPDATE entries SET at=? WHERE chain=? AND seq=?", ("1999", A, MIDDLE))
    with pytest.raises(IntegrityError) as info:
        built.memory.recall(CALLER, RecallInput(repository=A, task_id="login"))
    check_names(info.value, A, {MIDDLE})


def test_a_correction_changed_while_memory_is_open_makes_search_and_history_raise(
    built: Built,
) -> None:
    with raw(built.path) as con:
        set_body(con, A, 3, flip_in_value(body_of(con, A, 3), "reason"))
    query = SearchInput(query="rerun the flaky checkout test with a fixed seed", repository=A)
    with pytest.raises(IntegrityError) as info:
        built.memory.search(CALLER, query)
    check_names(info.value, A, {3})
    with pytest.raises(IntegrityError) as info:
        built.memory.recall(CALLER, RecallInput(repository=A, task_id="checkout"))
    check_names(info.value, A, {3})


def test_a_body_changed_while_memory_is_open_is_not_returned_by_recall_sql(built: Built) -> None:
    """recall SQL reads bodies through the views; an altered body must not come back as content."""
    sql = "SELECT observation FROM attempts WHERE attempt_id = :id"
    params: dict[str, str | int | float | bool | None] = {"id": built.ids["a2"]}
    before = built.memory.recall(CALLER, RecallInput(sql=sql, params=params))
    assert before.rows == [[A2_TEXT[1]]]
    with raw(built.path) as con:
        set_body(con, A, MIDDLE, flip_in_value(body_of(con, A, MIDDLE), "observation"))
    with pytest.raises(IntegrityError):
        built.memory.recall(CALLER, RecallInput(sql=sql, params=params))


# ---------------------------------------------------------------- derived tables hold keys only


def test_an_altered_attempt_index_task_id_does_not_reach_search_results(built: Built) -> None:
    """attempt_idx is derived; search must not report a task id the attempt's body does not hold."""
    with raw(built.path) as con:
        con.execute("UPDATE attempt_idx SET task_id='logout' WHERE attempt_id=?", (built.ids["a2"],))
    try:
        found = built.memory.search(CALLER, a2_query())
    except IntegrityError:
        return
    for t in found.tasks:
        assert (t.repository, t.task_id) != (A, "logout"), t


def test_an_altered_attempt_index_repository_does_not_leak_content_past_a_scope(built: Built) -> None:
    """A caller scoped to B must never receive an attempt whose ledger chain is A."""
    with raw(built.path) as con:
        con.execute("UPDATE attempt_idx SET repository=? WHERE attempt_id=?", (B, built.ids["a2"]))
    scoped = Caller(agent_id="b-only", repositories=(B,))
    try:
        found = built.memory.search(scoped, SearchInput(query=" ".join(A2_TEXT)))
    except IntegrityError:
        found = None
    if found is not None:
        assert built.ids["a2"] not in {t.attempt.attempt_id for t in found.tasks}
    try:
        history = built.memory.recall(scoped, RecallInput(repository=B, task_id="login"))
    except (IntegrityError, NotFound):  # NotFound is right too: B's ledger has no task "login"
        return
    assert built.ids["a2"] not in {r[0] for r in history.rows}


def test_a_correction_index_row_moved_to_another_attempt_does_not_reach_its_preview(
    built: Built,
) -> None:
    """correction_idx is derived; a correction made for a0 must never be shown on a2."""
    with raw(built.path) as con:
        a2_rowid = rowid_of(con, A, MIDDLE)
        con.execute(
            "UPDATE correction_idx SET attempt_rowid=? WHERE rowid=?", (a2_rowid, rowid_of(con, A, 3))
        )
    try:
        found = built.memory.search(CALLER, a2_query())
    except IntegrityError:
        return
    preview = next(t.attempt for t in found.tasks if t.attempt.attempt_id == built.ids["a2"])
    assert (preview.correction, preview.corrections_count) == (None, 0)
