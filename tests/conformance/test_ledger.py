"""Ledger verification on both stores: an untouched store verifies; a row edited with SQL makes
open (and verify) refuse, naming the chain and seq."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mentis.errors import IntegrityError
from mentis.memory import Caller, Memory

from .helpers import REPOS, fill, ledger

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
    with pytest.raises(IntegrityError) as err:
        open_memory()
    assert (err.value.chain, err.value.seq) == (chain, seq)
    assert f"chain {chain!r} seq {seq}" in str(err.value)


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
