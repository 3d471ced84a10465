"""The block scan's loop for attempt-only chunks (``ledger_scan._Scan.attempts``) and the stitch's
id check (``sqlite_verify._take_in``).

The loop writes :func:`mentis.ledger.links.body_links`' rule for an attempt inline; it must accept exactly
the rows the general loop (:meth:`ledger_scan._Scan.plain`, which calls ``body_links``) and the
reference verifier (:func:`mentis.ledger.chain.verify_rows`) accept, on bodies built to confuse a
parser: duplicate and escaped keys, escaped values, unicode, nesting, whitespace, other JSON types
and broken JSON. Then the same on real stores, where whole chunks are attempts and blocks are
scanned by this process and a worker process.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mentis.errors import IntegrityError
from mentis.ledger.canonical import canonical
from mentis.ledger.chain import verify_rows
from mentis.ledger.entry import KINDS, VERSION
from mentis.store.seal import Seal
from mentis.store.sqlite import ledger_scan
from mentis.store.sqlite import verify as sqlite_verify
from mentis.store.sqlite.schema import _LEDGER_SCHEMA
from mentis.store.sqlite.store import SqliteStore
from tests.drills.scale import SIZES
from tests.test_verify_parallel import DIM, assert_agrees, rowid, sql

AT = "2026-01-01T00:00:00Z"

# ---------------------------------------------------------------- adversarial bodies


def escaped(text: str) -> str:
    """``text`` as a JSON string with every character written as a ``\\u`` escape."""
    units = text.encode("utf-16-be")
    return '"' + "".join(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2)) + '"'


def plain_string(text: str) -> str:
    return orjson.dumps(text).decode()


CHAINS = ["github.com/acme/shop", "acme/web", "ünïcode/répo", "emoji/\U0001f600", "a"]
IDS = ["508821f2-0ab8-4beb-8227-851a29acdc63", "id-1", "ïd", "x"]
WS = st.sampled_from(["", " ", "\n", "\t", " \r\n "])


@st.composite
def json_value(draw: st.DrawFn, chain: str, id_: str, depth: int = 0) -> str:
    """JSON text of a value: often the chain or the id (written plainly or escaped), else anything."""
    choices = ["chain", "id", "string", "number", "literal"]
    if depth < 2:
        choices += ["object", "array"]
    what = draw(st.sampled_from(choices))
    if what in ("chain", "id"):
        text = chain if what == "chain" else id_
        text = (
            draw(st.sampled_from([text, text + " ", text.upper(), text[:-1]]))
            if draw(st.booleans())
            else text
        )
        return draw(st.sampled_from([plain_string, escaped]))(text)
    if what == "string":
        return plain_string(draw(st.text(max_size=8)))
    if what == "number":
        return draw(st.sampled_from(["0", "-1", "12.5", "1e400", "99999999999999999999999", "01", "1."]))
    if what == "literal":
        return draw(st.sampled_from(["true", "false", "null", "NaN", "nul"]))
    if what == "array":
        items = draw(st.lists(json_value(chain, id_, depth + 1), max_size=3))
        return "[" + ",".join(items) + "]"
    return draw(json_object(chain, id_, depth + 1))


KEYS = [
    '"repository"',
    '"attempt_id"',
    escaped("repository"),
    '"repositor\\u0079"',
    escaped("attempt_id"),
    '"Repository"',
    '"attempt_id "',
    '"other"',
]


@st.composite
def json_object(draw: st.DrawFn, chain: str, id_: str, depth: int = 0) -> str:
    members = []
    for _ in range(draw(st.integers(0, 5))):
        key = draw(st.sampled_from(KEYS)) if draw(st.booleans()) else plain_string(draw(st.text(max_size=5)))
        ws = [draw(WS) for _ in range(3)]
        members.append(f"{ws[0]}{key}{ws[1]}:{ws[2]}{draw(json_value(chain, id_, depth))}")
    return "{" + ",".join(members) + draw(WS) + "}"


@st.composite
def body_for(draw: st.DrawFn, chain: str, id_: str) -> bytes:
    """A body for an attempt of ``chain`` with id ``id_``: one that stands (the canonical one, or
    a shuffled one with duplicates), or one that may not, or no JSON object at all."""
    shape = draw(st.sampled_from(["canonical", "members", "other-json", "broken"]))
    if shape == "canonical":
        extra = draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
        text = canonical({**extra, "repository": chain, "attempt_id": id_}).decode()
    elif shape == "members":
        own = [f'"repository":{plain_string(chain)}', f'"attempt_id":{plain_string(id_)}']
        noise = draw(st.lists(st.sampled_from(KEYS), max_size=3))
        members = own + [f"{key}:{draw(json_value(chain, id_))}" for key in noise]
        members = draw(st.permutations(members))
        text = draw(WS) + "{" + ",".join(members) + "}" + draw(WS)
    elif shape == "other-json":
        text = draw(st.one_of(json_value(chain, id_), json_object(chain, id_)))
    else:
        whole = draw(json_object(chain, id_))
        cut = draw(st.integers(0, len(whole)))
        text = whole[:cut] + draw(st.sampled_from(["", "}", ",", '"', "\\ud800", "\x00", "]"]))
    raw = text.encode()
    damage = draw(st.sampled_from(["none", "none", "bom", "bad-utf8", "surrogate"]))
    if damage == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif damage == "bad-utf8" and len(raw) > 1:
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"])) + raw[at:]
    elif damage == "surrogate":
        raw = raw.replace(b'"repository":"', b'"repository":"\\udc00', 1)
    return raw


@st.composite
def attempt_row(draw: st.DrawFn) -> tuple[Any, ...]:
    """A ledger row (``ledger_scan.SELECT_BLOCK``'s columns) of an attempt at seq 0, sealed."""
    chain, id_ = draw(st.sampled_from(CHAINS)), draw(st.sampled_from(IDS))
    body = draw(body_for(chain, id_))
    body_hash = hashlib.sha256(body).hexdigest()
    doc = {"agent": "codex", "at": AT, "body_hash": body_hash, "chain": chain, "id": id_, "kind": "attempt",
           "prev": "", "seq": 0, "v": VERSION}  # fmt: skip
    hash_ = hashlib.sha256(canonical(doc)).hexdigest()
    return ("codex", AT, body_hash, chain, id_, "attempt", "", 0, hash_, body, None, None, 1)


def reference_accepts(row: tuple[Any, ...]) -> bool:
    agent, at, body_hash, chain, id_, kind, prev, seq, hash_, body, key_id, sig, _ = row
    try:
        verify_rows([(VERSION, chain, seq, kind, id_, at, agent, prev, body_hash, key_id, sig, hash_, body)])
    except IntegrityError:
        return False
    return True


@pytest.mark.drill  # `make drill` runs it with 3,000 rows; CI with 600 (tests/drills/scale.py)
@settings(max_examples=SIZES.fast_path_rows, deadline=None)
@given(attempt_row())
def test_the_attempt_loop_accepts_exactly_what_the_general_loop_and_the_reference_accept(
    row: tuple[Any, ...],
) -> None:
    fast, general = ledger_scan._Scan(KINDS, VERSION), ledger_scan._Scan(KINDS, VERSION)
    try:
        fast_ok = fast.attempts([row])
    except ValueError:  # what a scan does with an exception: leave the block to the reference
        fast_ok = False
    try:
        general_ok = general.plain([row])
    except ValueError:
        general_ok = False
    assert fast_ok == general_ok == reference_accepts(row), row[9]
    if fast_ok:
        assert fast.records == general.records == [(row[4], row[3], "attempt", 0)]
        assert fast.firsts == general.firsts and fast.bodies == general.bodies == 1
        assert {c: t[:2] for c, t in fast.tails.items()} == {c: t[:2] for c, t in general.tails.items()}


@pytest.mark.parametrize(
    ("body", "stands"),
    [
        (b'{"repository":"acme/web","attempt_id":"x","repository":"other"}', False),
        (b'{"repository":"other","attempt_id":"x","repository":"acme/web"}', True),  # the last one counts
        (b'{"repositor\\u0079":"acme/web","attempt_id":"x"}', True),
        (b'{"repository":"acme\\/web","attempt_id":"\\u0078"}', True),
        (b'{"repository":"acme/web","attempt_id":"x","repositor\\u0079":"other"}', False),
        (b' \n{ "attempt_id" : "x" , "repository" : "acme/web" }\t', True),
        (b'{"repository":"acme/web","attempt_id":"x","n":99999999999999999999999}', True),
        (b'{"repository":"acme/web","attempt_id":"x","n":1e400}', False),
        (b'{"repository":"acme/web","attempt_id":"x","s":"\\ud800"}', False),
        (b'\xef\xbb\xbf{"repository":"acme/web","attempt_id":"x"}', False),
        (b'[{"repository":"acme/web","attempt_id":"x"}]', False),
        (b'{"repository":"acme/web","attempt_id":"x"}{}', False),
        (b'{"repository":["acme/web"],"attempt_id":"x"}', False),
        (b'{"attempt_id":"x"}', False),
    ],
)
def test_the_attempt_loop_reads_bodies_as_the_parser_does(body: bytes, stands: bool) -> None:
    body_hash = hashlib.sha256(body).hexdigest()
    doc = {"agent": "a", "at": AT, "body_hash": body_hash, "chain": "acme/web", "id": "x", "kind": "attempt",
           "prev": "", "seq": 0, "v": VERSION}  # fmt: skip
    row = ("a", AT, body_hash, "acme/web", "x", "attempt", "", 0, hashlib.sha256(canonical(doc)).hexdigest(),
           body, None, None, 1)  # fmt: skip
    assert ledger_scan._Scan(KINDS, VERSION).attempts([row]) is stands
    assert reference_accepts(row) is stands


# ---------------------------------------------------------------- real stores


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks (and so chunks) of four rowids, with a worker even on one CPU."""
    monkeypatch.setattr(sqlite_verify, "PARALLEL_MIN_ENTRIES", 0)
    monkeypatch.setattr(sqlite_verify, "MIN_BLOCK", 4)
    monkeypatch.setattr(sqlite_verify, "MAX_BLOCK", 4)
    monkeypatch.setattr(sqlite_verify, "MAX_WORKERS", 1)
    monkeypatch.setattr(sqlite_verify, "_cpus", lambda: 2)


CHAIN_A, CHAIN_B = "acme/shop", "acme/api"


def fill(path: Path, bodies: dict[int, bytes] | None = None, ids: dict[int, str] | None = None) -> None:
    """40 attempts, alternating between two chains; entry ``n`` gets ``bodies[n]`` and ``ids[n]``
    when given (the entry is sealed over whatever it gets, as a tamperer would seal it)."""
    s = SqliteStore(path, DIM, verify=False)
    with s._write() as conn:
        for n in range(40):
            chain = CHAIN_A if n % 2 == 0 else CHAIN_B
            id_ = (ids or {}).get(n, f"attempt-{n}")
            conn.execute(
                "DELETE FROM entry_ids WHERE id=?", (id_,)
            )  # a reused id: as before ids were claimed
            body = canonical({"repository": chain, "attempt_id": id_, "observation": f"note {n}"})
            s._append(conn, Seal(), chain, "attempt", id_, AT, "codex", (bodies or {}).get(n, body))
    s.close()


def test_a_store_of_attempts_goes_through_the_attempt_loop_and_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    original = ledger_scan._Scan.attempts

    def counted(self: ledger_scan._Scan, rows: list[Any]) -> bool:
        calls.append(len(rows))
        return original(self, rows)

    monkeypatch.setattr(ledger_scan._Scan, "attempts", counted)
    fill(path := tmp_path / "m.db")
    reports = assert_agrees(path, passes=True)
    assert isinstance(reports, list) and [(r.chain, r.entries) for r in reports] == [
        (CHAIN_B, 20),
        (CHAIN_A, 20),
    ]
    assert calls and all(n == 4 for n in calls)


BAD_BODIES = {
    "names another repository": (
        canonical({"repository": CHAIN_B, "attempt_id": "attempt-22"}),
        "body names repository",
    ),
    "names another id": (
        canonical({"repository": CHAIN_A, "attempt_id": "attempt-0"}),
        "body names attempt_id 'attempt-0', not its entry's id",
    ),
    "duplicate key, last wrong": (
        b'{"attempt_id":"attempt-22","repository":"acme/shop","repository":"acme/api"}',
        "body names repository",
    ),
    "escaped key, wrong": (
        b'{"attempt_id":"attempt-22","repository":"acme/shop","repositor\\u0079":"x"}',
        "body names repository",
    ),
    "not JSON": (b'{"attempt_id":"attempt-22","repository":"acme/shop"', "body is not JSON"),
    "not an object": (b'["acme/shop","attempt-22"]', "body is not a JSON object"),
}


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_an_attempt_body_that_does_not_stand_in_its_chain_is_refused_by_both_passes(
    tmp_path: Path, case: str
) -> None:
    body, why = BAD_BODIES[case]
    fill(path := tmp_path / "m.db", bodies={22: body})
    message = assert_agrees(path, passes=False)
    assert f"chain '{CHAIN_A}' seq 11: {why}" in str(message)


def test_odd_but_standing_attempt_bodies_verify_in_both_passes(tmp_path: Path) -> None:
    bodies = {
        5: b' { "attempt_id" : "attempt-5", "repository" : "acme/api" } ',
        22: b'{"repository":"x","attempt_id":"attempt-22","repository":"acme/shop"}',
        31: b'{"repositor\\u0079":"acme\\/api","attempt_id":"\\u0061ttempt-31","n":[{"repository":"z"}]}',
    }
    fill(path := tmp_path / "m.db", bodies=bodies)
    assert_agrees(path, passes=True)


def test_an_attempt_id_used_in_two_blocks_is_refused_by_both_passes(tmp_path: Path) -> None:
    """Entries 1 and 38 share an id; with blocks of four they lie in different blocks, and the
    stitch takes every block's ids in (its own as it scans them, the worker's as they come)."""
    fill(path := tmp_path / "m.db", ids={38: "attempt-1"})
    assert rowid(path, CHAIN_A, 19) // 4 != rowid(path, CHAIN_B, 0) // 4
    message = assert_agrees(path, passes=False)
    assert "record id 'attempt-1' is already used" in str(message)


def test_an_attempt_id_used_twice_in_one_block_is_refused_by_both_passes(tmp_path: Path) -> None:
    fill(path := tmp_path / "m.db", ids={10: "attempt-9"})
    message = assert_agrees(path, passes=False)
    assert "record id 'attempt-9' is already used" in str(message)


def test_take_in_refuses_an_id_seen_before_or_twice_in_a_block() -> None:
    def block(*ids: str) -> Any:
        return ({}, {}, [], [(i, "c", "attempt", n) for n, i in enumerate(ids)], [], ([], {}, {}, {}))

    ids: set[str] = set()
    assert sqlite_verify._take_in(ids, block("a", "b")) is not None
    assert sqlite_verify._take_in(ids, block("c")) is not None and ids == {"a", "b", "c"}
    assert sqlite_verify._take_in(ids, block("d", "a")) is None
    assert sqlite_verify._take_in(set(), block("e", "e")) is None
    assert sqlite_verify._take_in(ids, None) is None


def test_attempts_of_a_reserved_chain_are_refused_by_both_passes(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    s = SqliteStore(path, DIM, verify=False)
    with s._write() as conn:
        for n in range(8):
            chain = "__system" if n == 6 else CHAIN_A
            body = canonical({"repository": chain, "attempt_id": f"attempt-{n}"})
            s._append(conn, Seal(), chain, "attempt", f"attempt-{n}", AT, "codex", body)
    s.close()
    message = assert_agrees(path, passes=False)
    assert "chain '__system' seq 0: chain '__system' is reserved" in str(message)


def test_a_body_changed_and_resealed_in_an_attempt_only_chunk_is_refused(tmp_path: Path) -> None:
    """A tamperer rewrites the body and its body_hash and rehashes the rest of the chain: the
    hashes hold, the link rule does not."""
    fill(path := tmp_path / "m.db")
    row = rowid(path, CHAIN_A, 7)
    body = canonical({"repository": CHAIN_B, "attempt_id": "attempt-14"})
    sql(path, "UPDATE bodies SET body=? WHERE rowid=?", body, row)
    sql(path, "UPDATE entries SET body_hash=? WHERE rowid=?", hashlib.sha256(body).hexdigest(), row)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        cols = "rowid, agent, at, body_hash, chain, id, kind, prev, seq, v"
        rows = con.execute(f"SELECT {cols} FROM entries WHERE chain=? AND seq>=7 ORDER BY seq", (CHAIN_A,))
        prev = None
        for rowid_, agent, at, body_hash, chain, id_, kind, old_prev, seq, v in rows.fetchall():
            doc = {"agent": agent, "at": at, "body_hash": body_hash, "chain": chain, "id": id_, "kind": kind,
                   "prev": old_prev if prev is None else prev, "seq": seq, "v": v}  # fmt: skip
            prev = hashlib.sha256(canonical(doc)).hexdigest()
            con.execute("UPDATE entries SET prev=?, hash=? WHERE rowid=?", (doc["prev"], prev, rowid_))
        con.execute("UPDATE heads SET hash=? WHERE chain=?", (prev, CHAIN_A))
    finally:
        con.close()
    message = assert_agrees(path, passes=False)
    assert f"chain '{CHAIN_A}' seq 7: body names repository '{CHAIN_B}'" in str(message)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_attempt_bodies_in_a_store_pass_the_parallel_pass_only_when_the_reference_does(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Bodies from the strategy above at random entries of a real store, scanned in this process
    (``verify_blocks`` without a worker) and by the reference."""
    picks = data.draw(st.dictionaries(st.integers(0, 39), st.just(None), min_size=1, max_size=3))
    bodies = {}
    for n in picks:
        chain = CHAIN_A if n % 2 == 0 else CHAIN_B
        bodies[n] = data.draw(body_for(chain, f"attempt-{n}"))
    path = tmp_path_factory.mktemp("fuzz") / "m.db"
    fill(path, bodies=bodies)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
        fast = sqlite_verify.verify_blocks(conn, str(path), heads, _LEDGER_SCHEMA, 0)
        try:
            reference: Any = sqlite_verify.one_pass(conn, heads)
        except IntegrityError:
            reference = None
    finally:
        conn.close()
    assert (fast is None) == (reference is None)
    if fast is not None:
        assert fast == reference
