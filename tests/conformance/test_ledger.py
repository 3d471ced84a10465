"""The ledger: its canonical form and chain verification, then the same verification on both stores
(an untouched store verifies; a row edited with SQL makes open and verify refuse that chain, naming it and
seq)."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
import rfc8785
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from mentis.errors import IntegrityError, InvalidInput
from mentis.ledger.canonical import MAX_SAFE_INT, canonical, sha256_hex
from mentis.ledger.chain import entry_rows, verify_rows
from mentis.ledger.entry import seal
from mentis.service.memory import Caller, Memory

from .helpers import REPOS, fill, ledger

CALLER = Caller(agent_id="conformance")

json_scalars = (
    st.none() | st.booleans() | st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT) | st.text()
)
json_docs = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@examples(max_examples=1500, deadline=None)
@given(json_docs)
def test_canonical_is_byte_equal_to_the_reference_jcs_encoder(doc: object) -> None:
    assert canonical(doc) == rfc8785.dumps(doc)


@given(st.dictionaries(st.text(alphabet=st.characters(min_codepoint=0xE000)), st.integers(0, 9)))
def test_keys_outside_the_bmp_sort_as_jcs_requires(doc: dict[str, int]) -> None:
    assert canonical(doc) == rfc8785.dumps(doc)


@pytest.mark.parametrize("bad", [1.5, {"a": [0.1]}, 2**53, {"n": -(2**60)}])
def test_floats_and_unsafe_integers_are_refused_in_hashed_documents(bad: object) -> None:
    with pytest.raises(InvalidInput):
        canonical(bad)


def _chain(n: int, chain: str = "r") -> list[tuple[object, bytes]]:
    out = []
    prev = ""
    for seq in range(n):
        body = canonical({"n": seq, "repository": chain, "attempt_id": f"id{seq}"})
        e = seal(
            chain=chain,
            seq=seq,
            prev=prev,
            kind="attempt",
            id=f"id{seq}",
            at="t",
            agent="a",
            body=body,
        )
        out.append((e, body))
        prev = e.hash
    return out


def test_a_sealed_chain_verifies_and_reports_its_head() -> None:
    chain = _chain(5)
    (report,) = verify_rows(entry_rows(chain), {"r": (4, chain[-1][0].hash)})
    assert (report.chain, report.entries, report.head_seq, report.head_hash) == (
        "r",
        5,
        4,
        chain[-1][0].hash,
    )


def test_entry_hash_covers_the_canonical_document() -> None:
    e, _ = _chain(1)[0]
    assert e.hash == sha256_hex(rfc8785.dumps(e.document()))


def test_a_changed_body_names_chain_seq_and_what_failed() -> None:
    chain = _chain(3)
    e, _ = chain[1]
    chain[1] = (e, orjson.dumps({"n": 99}))
    with pytest.raises(IntegrityError, match=r"chain 'r' seq 1: body does not match") as info:
        verify_rows(entry_rows(chain))
    assert (info.value.chain, info.value.seq) == ("r", 1)


def test_a_missing_middle_entry_breaks_seq_continuity() -> None:
    chain = _chain(4)
    del chain[2]
    with pytest.raises(IntegrityError, match="expected seq 2, found seq 3"):
        verify_rows(entry_rows(chain))


def test_a_missing_body_without_a_tombstone_fails() -> None:
    chain = _chain(3)
    chain[1] = (chain[1][0], None)  # type: ignore[assignment]
    with pytest.raises(IntegrityError, match="no forget tombstone"):
        verify_rows(entry_rows(chain))


def test_a_truncated_chain_is_caught_by_its_recorded_head() -> None:
    chain = _chain(4)
    head = (3, chain[-1][0].hash)
    with pytest.raises(IntegrityError, match="recorded head is seq 3"):
        verify_rows(entry_rows(chain[:3]), {"r": head})


def test_a_value_of_the_wrong_type_fails_as_tampering_naming_the_entry() -> None:
    rows = list(entry_rows(_chain(3)))
    blob_agent = [*rows[1]]
    blob_agent[6] = b"a"
    with pytest.raises(IntegrityError, match=r"chain 'r' seq 1: an entry column holds a value of the wrong"):
        verify_rows([rows[0], tuple(blob_agent), rows[2]])
    text_body = [*rows[2]]
    text_body[12] = rows[2][12].decode()
    with pytest.raises(IntegrityError, match=r"chain 'r' seq 2: body is not a blob"):
        verify_rows([rows[0], rows[1], tuple(text_body)])


# ---------------------------------------------------------------- on both stores

Raw = Callable[[str], list[tuple[object, ...]]]


def test_an_untouched_store_with_corrections_and_a_forget_verifies(
    memory: Memory, caller: Caller, open_memory: Callable[[], Memory]
) -> None:
    fill(memory, caller)
    before = ledger(memory)
    again = open_memory()
    result = again.verify_integrity(caller)
    assert [(c.chain, c.entries, c.bodies_erased) for c in result.chains] == [
        (REPOS[1], 4, 1),
        (REPOS[0], 4, 0),
    ]
    assert ledger(again) == before


def _refused(open_memory: Callable[[], Memory], chain: str, seq: int) -> None:
    """Opening refuses ``chain`` alone, naming it and ``seq``: its reads raise, the other chain is
    served, and ``verify-integrity`` raises naming it."""
    m = open_memory()
    assert set(m.store.damaged) == {chain}
    for err in (m.store.damaged[chain], _raised(lambda: m.verify_integrity(CALLER, chain))):
        assert (err.chain, err.seq) == (chain, seq)
        assert f"chain {chain!r} seq {seq}" in str(err)
    _raised(lambda: m.verify_integrity(CALLER))
    (other,) = set(REPOS) - {chain}
    assert [c.chain for c in m.verify_integrity(CALLER, other).chains] == [other]


def _raised(call: Callable[[], object]) -> IntegrityError:
    with pytest.raises(IntegrityError) as err:
        call()
    return err.value


@pytest.mark.parametrize("column", ["agent", "at", "id", "kind", "body_hash", "prev", "hash"])
def test_editing_one_column_of_a_middle_entry_makes_open_refuse_naming_chain_and_seq(
    memory: Memory, caller: Caller, raw_sql: Raw, open_memory: Callable[[], Memory], column: str
) -> None:
    fill(memory, caller)
    memory.close()
    raw_sql(f"UPDATE entries SET {column} = {column} || 'x' WHERE chain = '{REPOS[0]}' AND seq = 1")
    _refused(open_memory, REPOS[0], 1)


def test_flipping_a_letter_inside_a_body_makes_open_refuse(
    memory: Memory, caller: Caller, raw_sql: Raw, open_memory: Callable[[], Memory], backend: str
) -> None:
    fill(memory, caller)
    memory.close()
    where = f"rowid = (SELECT rowid FROM entries WHERE chain = '{REPOS[0]}' AND seq = 2)"
    if backend == "postgres":
        raw_sql(
            "UPDATE bodies SET body = convert_to(replace(convert_from(body, 'UTF8'), 'navbar', 'Navbar'), "
            f"'UTF8') WHERE {where}"
        )
    else:
        raw_sql(
            "UPDATE bodies SET body = CAST(replace(CAST(body AS TEXT), 'navbar', 'Navbar') AS BLOB) "
            f"WHERE {where}"
        )
    _refused(open_memory, REPOS[0], 2)


def test_deleting_a_middle_entry_makes_open_refuse(
    memory: Memory, caller: Caller, raw_sql: Raw, open_memory: Callable[[], Memory]
) -> None:
    fill(memory, caller)
    memory.close()
    raw_sql(f"DELETE FROM entries WHERE chain = '{REPOS[0]}' AND seq = 1")
    _refused(open_memory, REPOS[0], 1)


def test_deleting_the_last_entry_makes_open_refuse_through_the_recorded_head(
    memory: Memory, caller: Caller, raw_sql: Raw, open_memory: Callable[[], Memory]
) -> None:
    fill(memory, caller)
    memory.close()
    raw_sql(
        f"DELETE FROM bodies WHERE rowid = (SELECT rowid FROM entries WHERE chain = '{REPOS[0]}' AND seq = 3)"
    )
    raw_sql(f"DELETE FROM entries WHERE chain = '{REPOS[0]}' AND seq = 3")
    _refused(open_memory, REPOS[0], 3)


def test_an_orphan_body_makes_open_refuse(
    memory: Memory, caller: Caller, raw_sql: Raw, open_memory: Callable[[], Memory]
) -> None:
    fill(memory, caller)
    memory.close()
    raw_sql("INSERT INTO bodies(rowid, body) SELECT max(rowid) + 100, body FROM bodies GROUP BY body LIMIT 1")
    with pytest.raises(IntegrityError, match="belongs to no entry"):
        open_memory()


def test_a_body_changed_while_the_store_is_open_makes_search_raise(
    memory: Memory, caller: Caller, raw_sql: Raw, backend: str
) -> None:
    from .helpers import search

    fill(memory, caller)
    assert search(memory, caller, "navbar overflows")
    if backend == "postgres":
        raw_sql(
            "UPDATE bodies SET body = convert_to(replace(convert_from(body, 'UTF8'), 'navbar', 'N'), 'UTF8')"
        )
    else:
        raw_sql("UPDATE bodies SET body = CAST(replace(CAST(body AS TEXT), 'navbar', 'N') AS BLOB)")
    with pytest.raises(IntegrityError):
        search(memory, caller, "navbar overflows")
