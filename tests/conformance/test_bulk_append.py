"""``Store.append_attempts``: many attempts in one write transaction, on both backends."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mentis.config import Settings
from mentis.errors import Conflict, InvalidInput, MentisError
from mentis.providers.embed import HashEmbedder
from mentis.retrieval import query_terms
from mentis.service.memory import Caller, Memory
from mentis.store.protocol import AttemptRow
from mentis.store.seal import Seal
from tests.backends import backend_settings
from tests.conformance.conftest import run_sql
from tests.conformance.helpers import REPOS, record, search


def _rows(memory: Memory, caller: Caller, n: int) -> list[AttemptRow]:
    """``n`` attempts alternating between two repositories, with bodies shaped as the service
    writes them (taken from one recorded attempt) and real vectors."""
    record(memory, caller, repository=REPOS[0])
    template = memory.store.task_history(REPOS[0], "T-1")[0].body
    rows = []
    for i in range(n):
        body = replace(
            template,
            attempt_id=str(uuid.uuid4()),
            repository=REPOS[i % 2],
            task_id=f"bulk-{i % 3}",
            agent_id="bulk-agent",
            action=f"bulk attempt {i} tuned the zeppelinwidget{i} cache",
        )
        rows.append(AttemptRow(body, memory.ctx.embed([body.action])[0]))
    return rows


def test_append_attempts_chains_every_row_in_order_with_its_derived_rows(
    memory: Memory, caller: Caller
) -> None:
    rows = _rows(memory, caller, 6)
    heads = {repo: len([e for e, _ in memory.store.iter_ledger() if e.chain == repo]) for repo in REPOS[:2]}

    entries = memory.store.append_attempts(rows, Seal())

    assert [(e.chain, e.id, e.kind) for e in entries] == [
        (r.body.repository, r.body.attempt_id, "attempt") for r in rows
    ]
    for repo in REPOS[:2]:
        seqs = [e.seq for e in entries if e.chain == repo]
        assert seqs == list(range(heads[repo], heads[repo] + 3))
    assert {r.chain: r.entries for r in memory.store.verify()} == {
        repo: heads[repo] + 3 for repo in REPOS[:2]
    }
    ledger = [(e.chain, e.seq, e.hash) for e, _ in memory.store.iter_ledger()]
    assert [(e.chain, e.seq, e.hash) for e in entries] == ledger[-6:]
    history = memory.store.task_history(REPOS[1], "bulk-1")
    assert [a.entry.id for a in history] == [rows[1].body.attempt_id]
    hits = memory.store.lexical(query_terms("zeppelinwidget4"), None, 10)
    assert [memory.store.attempt_keys([r])[r][2] for r, _ in hits] == [rows[4].body.attempt_id]
    assert ("bulk-2", REPOS[0]) in {(t, r) for r, t in search(memory, caller, "zeppelinwidget2 cache")}


@pytest.mark.parametrize("spoil", ["vector of the wrong size", "vector with a NaN", "the same attempt twice"])
def test_a_bad_row_refuses_the_whole_batch_and_writes_nothing(
    memory: Memory, caller: Caller, spoil: str
) -> None:
    rows = _rows(memory, caller, 4)
    last = rows[-1]
    if spoil == "vector of the wrong size":
        rows[-1] = last._replace(vector=np.ones(memory.store.dim + 1, dtype=np.float32))
    elif spoil == "vector with a NaN":
        rows[-1] = last._replace(vector=np.full(memory.store.dim, np.nan, dtype=np.float32))
    else:
        rows[-1] = rows[0]
    before = (list(memory.store.iter_ledger()), memory.store.counts())

    expected: type[MentisError] = Conflict if spoil == "the same attempt twice" else InvalidInput
    with pytest.raises(expected) as failed:
        memory.store.append_attempts(rows, Seal())

    assert spoil == "the same attempt twice" or last.body.attempt_id in str(failed.value)
    assert (list(memory.store.iter_ledger()), memory.store.counts()) == before
    assert memory.store.lexical(query_terms("zeppelinwidget0"), None, 10) == []
    assert [r.entries for r in memory.store.verify()] == [1]


def test_an_empty_batch_appends_nothing(memory: Memory) -> None:
    assert memory.store.append_attempts([], Seal()) == []
    assert memory.store.counts()["entries"] == 0


LEXICAL_ROWS = (
    "SELECT * FROM lex_vocab ORDER BY id",  # chk, the row's checksum, comes last
    *(
        f"SELECT rowid, repository, len, terms FROM {table} ORDER BY rowid"
        for table in ("attempt_terms", "title_terms")
    ),
)


@pytest.mark.parametrize("flush_every", [None, 3])
def test_one_batch_stores_the_lexical_rows_that_one_append_at_a_time_stores(
    memory: Memory,
    caller: Caller,
    backend: str,
    other_settings: Settings,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    flush_every: int | None,
) -> None:
    """The same vocabulary ids, ``df`` and packed rows (PostgreSQL writes a batch's lexical rows
    set-based, ``flush_every`` documents at a time)."""
    if flush_every is not None:
        if backend != "postgres":
            pytest.skip("PostgreSQL's lexical batches only")
        monkeypatch.setattr("mentis.store.postgres.lexicon.TERMS_BATCH", flush_every)
    rows = _rows(memory, caller, 8)
    third = backend_settings(backend, tmp_path / "third", request)
    batched, single = Memory.open(other_settings, HashEmbedder()), Memory.open(third, HashEmbedder())
    try:
        batched.store.append_attempts(rows, Seal())
        for row in rows:
            single.store.append_attempts([row], Seal())
        got = [run_sql(other_settings, sql) for sql in LEXICAL_ROWS]
        assert got == [run_sql(third, sql) for sql in LEXICAL_ROWS]
        assert len(got[1]) == len(rows) and len(got[2]) == len(rows)
        cache = [row[-2] for row in got[0] if "cach" in row]  # df; one row per repository on PostgreSQL
        assert sum(cache) == len(rows)  # "cache" in every action: df counts each document once
        hits = batched.store.lexical(query_terms("zeppelinwidget5"), None, 10)
        assert [batched.store.attempt_keys([r])[r][2] for r, _ in hits] == [rows[5].body.attempt_id]
    finally:
        batched.close()
        single.close()
