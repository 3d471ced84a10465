"""`recall` SQL on both stores: the documented views only, read-only, scoped, bounded in rows, bytes
and time."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mentis.errors import IntegrityError, QueryError
from mentis.service.attempts import RECALL_MAX_BYTES, RECALL_MAX_ROWS
from mentis.service.memory import Caller, Memory

from .helpers import REPOS, fill, ledger, record, sql

COLUMNS = {
    "attempts": [
        "attempt_id", "repository", "task_id", "task_title", "agent_id", "session_id", "created_at",
        "status", "action", "observation", "inference", "files", "tags", "commit", "branch", "dirty",
        "check_command", "check_exit_code", "check_output", "outdated",
    ],
    "corrections": ["attempt_id", "repository", "reason", "latest_commit", "at", "agent_id"],
    "tasks": ["repository", "task_id", "title", "created_at", "attempt_count"],
    "thoughts": [
        "thought_id", "repository", "type", "role", "content", "importance", "confidence", "created_at",
        "agent_id", "task_id", "tags", "concepts", "entity_type", "source_session", "source_episode",
    ],
    "relations": ["from_id", "kind", "to_id", "valid_at", "invalid_at"],
}  # fmt: skip


@pytest.mark.parametrize("view", sorted(COLUMNS))
def test_each_documented_view_has_the_same_columns_on_every_store(
    memory: Memory, caller: Caller, view: str
) -> None:
    assert sql(memory, caller, f"select * from {view}").columns == COLUMNS[view]


def test_the_views_answer_with_values_read_from_the_bodies(memory: Memory, caller: Caller) -> None:
    ids = fill(memory, caller)
    out = sql(
        memory,
        caller,
        "select attempt_id, task_id, files, tags, outdated, status from attempts "
        "where repository = :r order by created_at",
        r=REPOS[0],
    )
    assert out.rows[0] == [ids[0], "T-0", '["src/shop/checkout.py"]', '["css"]', 1, "unverified"]
    assert [r[4] for r in out.rows] == [1, 0, 0]
    corrections = sql(memory, caller, "select attempt_id, reason from corrections")
    assert corrections.rows == [[ids[0], "fixed upstream"]]
    tasks = sql(memory, caller, "select repository, task_id, attempt_count from tasks order by 1, 2")
    assert tasks.rows == [
        [REPOS[1], "T-1", 1],
        [REPOS[1], "T-3", 1],
        [REPOS[0], "T-0", 2],
        [REPOS[0], "T-2", 1],
    ]


def test_tasks_carry_their_title_and_named_parameters_bind(memory: Memory, caller: Caller) -> None:
    for i in range(3):
        record(memory, caller, task_id=f"T-{i}", task_title=f"task {i}")
    tasks = sql(memory, caller, "select * from tasks order by task_id")
    assert [r[:3] + r[4:] for r in tasks.rows] == [[REPOS[0], f"T-{i}", f"task {i}", 1] for i in range(3)]
    out = sql(memory, caller, "select task_id from attempts where task_id = :t", t="T-1")
    assert out.rows == [["T-1"]]


def test_common_table_expressions_over_views_are_allowed(memory: Memory, caller: Caller) -> None:
    fill(memory, caller)
    out = sql(memory, caller, "with x as (select task_id from attempts) select count(*) from x")
    assert out.rows == [[5]]


def test_a_forgotten_attempt_is_in_no_view(memory: Memory, caller: Caller) -> None:
    ids = fill(memory, caller)
    out = sql(memory, caller, "select count(*) from attempts where attempt_id = :a", a=ids[1])
    assert out.rows == [[0]]


def test_a_scoped_caller_sees_only_its_repositories_in_every_view(memory: Memory, caller: Caller) -> None:
    fill(memory, caller)
    scoped = Caller(agent_id="scoped", repositories=(REPOS[1],))
    for view in ("attempts", "tasks"):
        out = sql(memory, scoped, f"select distinct repository from {view}")
        assert out.rows == [[REPOS[1]]]
    assert sql(memory, scoped, "select count(*) from corrections").rows == [[0]]


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
        "select * from recall_scope",
        "delete from attempts",
        "insert into entries(v) values (1)",
        "update attempts set action = 'x'",
        "pragma table_info(attempts)",
        "attach database ':memory:' as other",
        "create table t(x integer)",
        "drop view attempts",
        "select load_extension('x')",
        "select 1; delete from entries",
        "with x as (delete from entries returning 1) select * from x",
    ],
)
def test_statements_outside_select_on_the_views_are_refused_and_change_nothing(
    memory: Memory, caller: Caller, text: str
) -> None:
    record(memory, caller)
    before = ledger(memory)
    with pytest.raises(QueryError):
        sql(memory, caller, text)
    assert ledger(memory) == before
    assert sql(memory, caller, "select count(*) from attempts").rows == [[1]]


def test_a_statement_cannot_widen_its_own_scope(memory: Memory, caller: Caller) -> None:
    fill(memory, caller)
    scoped = Caller(agent_id="scoped", repositories=(REPOS[1],))
    with pytest.raises(QueryError):
        sql(
            memory,
            scoped,
            "with x as materialized (select set_config('role', 'postgres', true) as r) "
            "select * from x, entries",
        )
    out = sql(memory, scoped, "select distinct repository from attempts")
    assert out.rows == [[REPOS[1]]]


def test_more_than_100_rows_are_truncated_and_flagged(memory: Memory, caller: Caller) -> None:
    out = sql(
        memory,
        caller,
        "with recursive r(n) as (select 1 union all select n + 1 from r where n < 500) select n from r",
    )
    assert (len(out.rows), out.truncated) == (RECALL_MAX_ROWS, True)
    assert "100 rows" in out.truncation_reason


def test_more_than_512000_bytes_are_truncated_and_flagged(memory: Memory, caller: Caller) -> None:
    out = sql(
        memory,
        caller,
        "with recursive s(k, x) as (select 1, cast('xxxxxxxxxxxxxxxxxxxx' as text) "
        "union all select k + 1, x || x from s where k < 11), "
        "r(n) as (select 1 union all select n + 1 from r where n < 50) "
        "select n, x from r, s where k = 11",
    )
    assert out.truncated and "bytes" in out.truncation_reason
    assert sum(len(row[1]) for row in out.rows) <= RECALL_MAX_BYTES


def test_a_query_running_past_the_time_limit_is_stopped(
    memory: Memory, caller: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mentis.service.attempts.RECALL_TIMEOUT_S", 0.2)
    with pytest.raises(QueryError, match="limit"):
        sql(
            memory,
            caller,
            "with recursive r(n) as (select 1 union all select n + 1 from r) select count(*) from r",
        )
    monkeypatch.undo()  # the store answers the next query (within the usual limit: 0.2 s is load-bound)
    assert sql(memory, caller, "select count(*) from attempts").rows == [[0]]


def test_a_body_changed_while_the_store_is_open_is_refused_by_recall(
    memory: Memory, caller: Caller, raw_sql: Callable[[str], list[tuple[object, ...]]], backend: str
) -> None:
    record(memory, caller)
    if backend == "postgres":
        raw_sql(
            "UPDATE bodies SET body = "
            "convert_to(replace(convert_from(body, 'UTF8'), 'retried', 'skipped'), 'UTF8')"
        )
    else:
        raw_sql("UPDATE bodies SET body = CAST(replace(CAST(body AS TEXT), 'retried', 'skipped') AS BLOB)")
    with pytest.raises(IntegrityError):
        sql(memory, caller, "select action from attempts")
