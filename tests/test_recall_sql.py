"""`recall` SQL: read-only, views only, bounded in rows, bytes and time."""

from __future__ import annotations

import pytest

from mentis.errors import QueryError
from mentis.memory import RECALL_MAX_BYTES, RECALL_MAX_ROWS, Caller, Memory
from mentis.model import RecallInput, RecordAttemptInput, parse

from .conftest import REPO


def sql(memory: Memory, caller: Caller, text: str, **params: object) -> object:
    return memory.recall(caller, parse(RecallInput, {"sql": text, "params": params or None}))


@pytest.fixture
def filled(memory: Memory, caller: Caller) -> Memory:
    for i in range(3):
        memory.record_attempt(
            caller,
            parse(
                RecordAttemptInput,
                {
                    "repository": REPO,
                    "task_id": f"T-{i}",
                    "task_title": f"task {i}",
                    "action": "a",
                    "observation": "o",
                    "files": ["x.py"],
                },
            ),
        )
    return memory


def test_the_documented_views_answer_with_their_columns(filled: Memory, caller: Caller) -> None:
    tasks = sql(filled, caller, "select * from tasks order by task_id")
    assert tasks.columns == ["repository", "task_id", "title", "created_at", "attempt_count"]  # type: ignore[attr-defined]
    assert [r[:3] + r[4:] for r in tasks.rows] == [  # type: ignore[attr-defined]
        [REPO, f"T-{i}", f"task {i}", 1] for i in range(3)
    ]
    attempts = sql(filled, caller, "select * from attempts limit 1")
    for column in (
        "attempt_id",
        "repository",
        "task_id",
        "agent_id",
        "created_at",
        "status",
        "action",
        "observation",
        "inference",
        "files",
        "commit",
        "branch",
        "dirty",
        "check_command",
        "check_exit_code",
        "outdated",
    ):
        assert column in attempts.columns  # type: ignore[attr-defined]


def test_named_parameters_bind(filled: Memory, caller: Caller) -> None:
    out = sql(filled, caller, "select task_id from attempts where task_id = :t", t="T-1")
    assert out.rows == [["T-1"]]  # type: ignore[attr-defined]


def test_common_table_expressions_over_views_are_allowed(filled: Memory, caller: Caller) -> None:
    out = sql(filled, caller, "with x as (select task_id from attempts) select count(*) from x")
    assert out.rows == [[3]]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text",
    [
        "select * from entries",
        "select count(*) from entries",
        "select count(*) from attempt_idx",
        "select body from bodies",
        "select * from sqlite_master",
        "select * from heads",
        "select * from vectors",
        "select * from attempt_terms",
        "select term from lex_vocab",
        "delete from attempts",
        "insert into entries(v) values (1)",
        "update attempts set action = 'x'",
        "pragma table_info(attempts)",
        "attach database ':memory:' as other",
        "create table t(x)",
        "drop view attempts",
        "select load_extension('x')",
    ],
)
def test_statements_outside_select_on_the_views_are_refused(
    filled: Memory, caller: Caller, text: str
) -> None:
    before = [e.hash for e, _ in filled.store.iter_ledger()]
    with pytest.raises(QueryError):
        sql(filled, caller, text)
    assert [e.hash for e, _ in filled.store.iter_ledger()] == before
    assert sql(filled, caller, "select count(*) from attempts").rows == [[3]]  # type: ignore[attr-defined]


def test_more_than_100_rows_are_truncated_and_flagged(filled: Memory, caller: Caller) -> None:
    out = sql(
        filled,
        caller,
        "with recursive r(n) as (select 1 union all select n + 1 from r where n < 500) select n from r",
    )
    assert (len(out.rows), out.truncated) == (RECALL_MAX_ROWS, True)  # type: ignore[attr-defined]
    assert "100 rows" in out.truncation_reason  # type: ignore[attr-defined]


def test_more_than_512000_bytes_are_truncated_and_flagged(filled: Memory, caller: Caller) -> None:
    out = sql(
        filled,
        caller,
        "with recursive r(n) as (select 1 union all select n + 1 from r where n < 50) "
        "select n, printf('%.20000c', 'x') from r",
    )
    assert out.truncated and "bytes" in out.truncation_reason  # type: ignore[attr-defined]
    assert sum(len(row[1]) for row in out.rows) <= RECALL_MAX_BYTES  # type: ignore[attr-defined]


def test_a_query_running_past_the_time_limit_is_stopped(
    filled: Memory, caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mentis.memory.RECALL_TIMEOUT_S", 0.2)
    with pytest.raises(QueryError, match="limit"):
        sql(
            filled,
            caller,
            "with recursive r(n) as (select 1 union all select n + 1 from r) select count(*) from r",
        )
