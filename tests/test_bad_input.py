"""Every tool refuses bad input with an error naming the field (and the limit), and writes nothing.

The MCP cases run through the official client connected in-process to ``build_server``; the CLI
cases run ``mentis.cli.app`` with typer's CliRunner on a real SQLite file. After each rejected
call the ledger (entry hashes and counts) is exactly what it was before.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from typer.testing import CliRunner

from mentis.api.attempts import MarkOutdatedInput, RecordAttemptInput
from mentis.api.skills import UploadSkillInput
from mentis.cli import app
from mentis.config import Settings
from mentis.mcp.server import build_server
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.service.operations import OPERATIONS
from mentis.service.profiles import parse_profile

from .conftest import REPO

LONE_SURROGATE: str = json.loads('"\\ud800"')
"""A lone surrogate exactly as a JSON parser hands it on from the escape ``"\\ud800"``."""
assert len(LONE_SURROGATE) == 1 and 0xD800 <= ord(LONE_SURROGATE) <= 0xDFFF

ATTEMPT = "{attempt}"
"""Placeholder replaced by the id of the seeded attempt, so only the bad field is wrong."""
SHA = "0123456789abcdef0123456789abcdef01234567"
SKILL = "---\nname: run-tests\ndescription: How to run the tests\n---\nRun `pytest -q`.\n"
"""The seeded skill (version 1 of ``run-tests``)."""
SKILL_REF = {"repository": REPO, "skill_id": "run-tests"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --------------------------------------------------------------------------- the ledger


def ledger_state(memory: Memory) -> tuple[dict[str, int], list[str]]:
    return memory.store.counts(), [entry.hash for entry, _ in memory.store.iter_ledger()]


def seed(memory: Memory) -> str:
    """One task with one attempt (and a correction) to aim the bad calls at."""
    caller = Caller(agent_id="seed-agent")
    done = memory.record_attempt(
        caller,
        RecordAttemptInput(
            repository=REPO,
            task_id="checkout-rounding",
            task_title="Checkout total is off by a cent",
            action="rounded each line before summing",
            files=["shop/cart.py"],
            observation="totals still off by one cent",
            check={"command": "pytest tests/test_cart.py", "status": "failed", "exit_code": 1},
        ),
    )
    memory.mark_conclusion_outdated(
        caller,
        MarkOutdatedInput(repository=REPO, attempt_id=done.attempt_id, reason="cart.py was rewritten"),
    )
    memory.upload_skill(caller, UploadSkillInput(repository=REPO, content=SKILL))
    return done.attempt_id


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Bad:
    """One bad call: the tool, its arguments, and what its error message must name."""

    tool: str
    args: dict[str, Any]
    names: tuple[str, ...]
    code: str = "invalid_input"
    id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _record(**changes: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "repository": REPO,
        "task_id": "checkout-rounding",
        "action": "applied the coupon before VAT",
        "files": ["shop/cart.py"],
        "observation": "totals match the invoice",
        "check": {"command": "pytest", "status": "passed"},
        "code_context": {"commit": SHA},
    }
    for key, value in changes.items():
        if value is _DROP:
            args.pop(key)
        else:
            args[key] = value
    return args


_DROP = object()


def _search(**changes: Any) -> dict[str, Any]:
    return {"query": "cart total off by a cent", **changes}


def _mark(**changes: Any) -> dict[str, Any]:
    args = {"repository": REPO, "attempt_id": ATTEMPT, "reason": "no longer true", **changes}
    return {k: v for k, v in args.items() if v is not _DROP}


def _forget(**changes: Any) -> dict[str, Any]:
    args = {"repository": REPO, "attempt_id": ATTEMPT, "reason": "holds a secret", **changes}
    return {k: v for k, v in args.items() if v is not _DROP}


BIG_ASCII = "x" * 65_537
BIG_UTF8 = "é" * 32_768 + "x"  # 32,769 characters, 65,537 bytes of UTF-8
assert len(BIG_UTF8.encode()) == 65_537

CASES: list[Bad] = [
    # ---------------------------------------------------------------- record_attempt
    *[
        Bad("record_attempt", _record(**{name: _DROP}), (name, "required"), id=f"missing-{name}")
        for name in ("repository", "task_id", "action", "observation")
    ],
    Bad(
        "record_attempt",
        _record(agent_id="someone-else"),
        ("agent_id", "not a known field"),
        id="unknown-top-level-agent_id",
    ),
    Bad("record_attempt", _record(bogus=1), ("bogus", "not a known field"), id="unknown-top-level"),
    Bad("record_attempt", _record(visibility="team"), ("visibility",), id="unknown-visibility"),
    Bad(
        "record_attempt",
        _record(code_context={"commit": SHA, "author": "x"}),
        ("code_context.author", "not a known field"),
        id="unknown-nested-code_context",
    ),
    Bad(
        "record_attempt",
        _record(check={"command": "pytest", "status": "passed", "took": 3}),
        ("check.took", "not a known field"),
        id="unknown-nested-check",
    ),
    Bad(
        "record_attempt",
        _record(check={"command": "pytest", "status": "ok"}),
        ("check.status", "passed", "failed"),
        id="wrong-enum-check-status",
    ),
    Bad(
        "record_attempt",
        _record(check={"status": "passed"}),
        ("check.command", "required"),
        id="missing-nested-check-command",
    ),
    Bad("record_attempt", _record(repository=""), ("repository",), id="empty-repository"),
    Bad(
        "record_attempt", _record(repository="   "), ("repository", "whitespace"), id="whitespace-repository"
    ),
    Bad("record_attempt", _record(task_id=""), ("task_id",), id="empty-task_id"),
    Bad("record_attempt", _record(task_id="\t \n"), ("task_id", "whitespace"), id="whitespace-task_id"),
    Bad("record_attempt", _record(action=""), ("action",), id="empty-action"),
    Bad(
        "record_attempt",
        _record(observation=BIG_ASCII),
        ("observation", "65536"),
        id="observation-65537-ascii-bytes",
    ),
    Bad(
        "record_attempt",
        _record(observation=BIG_UTF8),
        ("observation", "65536"),
        id="observation-65537-utf8-bytes",
    ),
    Bad("record_attempt", _record(inference=BIG_UTF8), ("inference", "65536"), id="inference-65537-bytes"),
    Bad(
        "record_attempt",
        _record(files=[f"src/f{i}.py" for i in range(1_001)]),
        ("files", "1000"),
        id="files-1001",
    ),
    Bad("record_attempt", _record(files=["ok.py", ""]), ("files.1",), id="empty-file-path"),
    Bad("record_attempt", _record(tags=[f"t{i}" for i in range(65)]), ("tags", "64"), id="tags-65"),
    Bad(
        "record_attempt",
        _record(observation="bad " + LONE_SURROGATE),
        ("observation", "surrogate"),
        id="lone-surrogate-observation",
    ),
    Bad(
        "record_attempt",
        _record(task_id="t" + LONE_SURROGATE),
        ("task_id", "surrogate"),
        id="lone-surrogate-task_id",
    ),
    Bad(
        "record_attempt", _record(files=[LONE_SURROGATE]), ("files.0", "surrogate"), id="lone-surrogate-file"
    ),
    Bad("record_attempt", _record(action="a\x00b"), ("action", "NUL"), id="nul-in-action"),
    Bad(
        "record_attempt",
        _record(code_context={"commit": "not-a-sha!"}),
        ("code_context.commit", "hex"),
        id="non-hex-commit",
    ),
    Bad(
        "record_attempt",
        _record(code_context={"file_hashes": {"a.py": "zzzz"}}),
        ("code_context.file_hashes", "hex"),
        id="non-hex-file-hash",
    ),
    Bad(
        "record_attempt",
        _record(check={"command": "pytest", "status": "passed", "exit_code": 2**31}),
        ("check.exit_code", "2147483647"),
        id="exit-code-out-of-range",
    ),
    Bad("record_attempt", _record(files="shop/cart.py"), ("files",), id="files-not-a-list"),
    # ---------------------------------------------------------------- search
    Bad("search", {}, ("query", "required"), id="missing-query"),
    Bad("search", _search(bogus=True), ("bogus", "not a known field"), id="unknown-top-level"),
    Bad("search", _search(query=""), ("query",), id="empty-query"),
    Bad("search", _search(query="  \n "), ("query", "whitespace"), id="whitespace-query"),
    Bad("search", _search(query="q" * 8_193), ("query", "8192"), id="query-8193-chars"),
    Bad("search", _search(query="cart " + LONE_SURROGATE), ("query", "surrogate"), id="lone-surrogate-query"),
    Bad("search", _search(limit=0), ("limit", "1"), id="limit-0"),
    Bad("search", _search(limit=51), ("limit", "50"), id="limit-51"),
    Bad("search", _search(repository=""), ("repository",), id="empty-repository"),
    Bad("search", _search(repository=" "), ("repository", "whitespace"), id="whitespace-repository"),
    Bad("search", _search(current_commit="HEAD"), ("current_commit", "hex"), id="non-hex-commit"),
    Bad(
        "search",
        _search(current_file_hashes={"a.py": "main"}),
        ("current_file_hashes", "hex"),
        id="non-hex-file-hash",
    ),
    Bad(
        "search",
        _search(current_file_hashes={f"f{i}": SHA for i in range(1_001)}),
        ("current_file_hashes", "1000"),
        id="file-hashes-1001",
    ),
    # ---------------------------------------------------------------- recall
    Bad("recall", {}, ("sql", "task_id"), id="neither-sql-nor-task"),
    Bad(
        "recall",
        {"sql": "select 1", "repository": REPO, "task_id": "checkout-rounding"},
        ("sql", "task_id"),
        id="both-sql-and-task",
    ),
    Bad("recall", {"repository": REPO}, ("task_id",), id="repository-without-task_id"),
    Bad("recall", {"task_id": "checkout-rounding"}, ("repository",), id="task_id-without-repository"),
    Bad("recall", {"sql": "select 1", "bogus": 1}, ("bogus", "not a known field"), id="unknown-top-level"),
    Bad("recall", {"sql": ""}, ("sql",), id="empty-sql"),
    Bad("recall", {"sql": "   "}, ("sql", "whitespace"), id="whitespace-sql"),
    Bad("recall", {"sql": "select 1 " + " " * 16_384}, ("sql", "16384"), id="sql-over-16384-chars"),
    Bad(
        "recall", {"sql": "select :x", "params": {"x": {"nested": 1}}}, ("params.x",), id="nested-param-value"
    ),
    Bad("recall", {"sql": "select :x", "params": {"": 1}}, ("params",), id="empty-param-name"),
    Bad("recall", {"repository": "", "task_id": "checkout-rounding"}, ("repository",), id="empty-repository"),
    Bad("recall", {"repository": REPO, "task_id": " "}, ("task_id", "whitespace"), id="whitespace-task_id"),
    Bad("recall", {"sql": "select '" + LONE_SURROGATE + "'"}, ("sql", "surrogate"), id="lone-surrogate-sql"),
    *[
        Bad("recall", {"sql": sql}, ("sql",), code="query", id=f"sql-{name}")
        for name, sql in [
            ("delete", "delete from attempts"),
            ("insert", "insert into attempts(attempt_id) values ('x')"),
            ("update", "update attempts set observation = 'x'"),
            ("replace", "replace into entries(rowid) values (1)"),
            ("drop", "drop view attempts"),
            ("create", "create table t(x)"),
            ("pragma", "pragma journal_mode=delete"),
            ("pragma-read", "pragma table_info(entries)"),
            ("attach", "attach database ':memory:' as other"),
            ("detach", "detach database main"),
            ("vacuum", "vacuum"),
            ("begin", "begin immediate"),
            ("two-statements", "select 1; delete from attempts"),
            ("cte-delete", "with x as (select 1) delete from attempts"),
            ("entries", "select * from entries"),
            ("bodies", "select * from bodies"),
            ("heads", "select * from heads"),
            ("meta", "select * from meta"),
            ("attempt_idx", "select * from attempt_idx"),
            ("sqlite_master", "select * from sqlite_master"),
            ("sqlite_temp_master", "select sql from sqlite_temp_master"),
            ("main-entries", "select hash from main.entries"),
            ("subquery-bodies", "select (select count(*) from bodies) from attempts"),
            ("join-entries", "select e.hash from attempts a join entries e on 1"),
            ("count-attempt_idx-beside-a-view", "select (select count(*) from attempt_idx) from attempts"),
            ("count-task_idx-beside-a-view", "select (select count(*) from task_idx) from tasks"),
            ("pragma-function", "select * from pragma_table_info('entries')"),
            ("load_extension", "select load_extension('x')"),
        ]
    ],
    # ---------------------------------------------------------------- mark_conclusion_outdated
    *[
        Bad("mark_conclusion_outdated", _mark(**{name: _DROP}), (name, "required"), id=f"missing-{name}")
        for name in ("repository", "attempt_id", "reason")
    ],
    Bad("mark_conclusion_outdated", _mark(bogus=1), ("bogus", "not a known field"), id="unknown-top-level"),
    Bad("mark_conclusion_outdated", _mark(attempt_id=""), ("attempt_id",), id="empty-attempt_id"),
    Bad(
        "mark_conclusion_outdated",
        _mark(attempt_id="  "),
        ("attempt_id", "whitespace"),
        id="whitespace-attempt_id",
    ),
    Bad("mark_conclusion_outdated", _mark(repository=""), ("repository",), id="empty-repository"),
    Bad("mark_conclusion_outdated", _mark(reason=""), ("reason",), id="empty-reason"),
    Bad("mark_conclusion_outdated", _mark(reason=BIG_UTF8), ("reason", "65536"), id="reason-65537-bytes"),
    Bad(
        "mark_conclusion_outdated",
        _mark(reason=LONE_SURROGATE),
        ("reason", "surrogate"),
        id="lone-surrogate-reason",
    ),
    Bad(
        "mark_conclusion_outdated",
        _mark(latest_commit="tip-of-main"),
        ("latest_commit", "hex"),
        id="non-hex-latest_commit",
    ),
    Bad(
        "mark_conclusion_outdated",
        _mark(attempt_id="00000000-0000-0000-0000-000000000000"),
        ("attempt",),
        code="not_found",
        id="unknown-attempt",
    ),
    Bad(
        "mark_conclusion_outdated",
        _mark(repository="github.com/acme/other"),
        ("attempt",),
        code="not_found",
        id="attempt-of-another-repository",
    ),
    # ---------------------------------------------------------------- forget_attempt
    *[
        Bad("forget_attempt", _forget(**{name: _DROP}), (name, "required"), id=f"missing-{name}")
        for name in ("repository", "attempt_id")
    ],
    Bad("forget_attempt", _forget(bogus=1), ("bogus", "not a known field"), id="unknown-top-level"),
    Bad("forget_attempt", _forget(attempt_id=""), ("attempt_id",), id="empty-attempt_id"),
    Bad(
        "forget_attempt", _forget(attempt_id=" \t"), ("attempt_id", "whitespace"), id="whitespace-attempt_id"
    ),
    Bad("forget_attempt", _forget(repository="  "), ("repository", "whitespace"), id="whitespace-repository"),
    Bad("forget_attempt", _forget(reason=BIG_ASCII), ("reason", "65536"), id="reason-65537-bytes"),
    Bad(
        "forget_attempt", _forget(reason=LONE_SURROGATE), ("reason", "surrogate"), id="lone-surrogate-reason"
    ),
    Bad(
        "forget_attempt",
        _forget(attempt_id="00000000-0000-0000-0000-000000000000"),
        ("attempt",),
        code="not_found",
        id="unknown-attempt",
    ),
    Bad(
        "forget_attempt",
        _forget(repository="github.com/acme/other"),
        ("attempt",),
        code="not_found",
        id="attempt-of-another-repository",
    ),
    # ---------------------------------------------------------------- publish
    *[
        Bad(
            "publish",
            {k: v for k, v in {"repository": REPO, "record_id": ATTEMPT}.items() if k != name},
            (name, "required"),
            id=f"missing-{name}",
        )
        for name in ("repository", "record_id")
    ],
    Bad(
        "publish",
        {"repository": REPO, "record_id": ATTEMPT, "visibility": "world"},
        ("visibility",),
        id="unknown-visibility",
    ),
    Bad(
        "publish",
        {"repository": REPO, "record_id": ATTEMPT, "visibility": "agent"},
        ("visibility", "only widens"),
        id="narrowing",
    ),
    Bad(
        "publish",
        {"repository": REPO, "record_id": "no-such-record"},
        ("no-such-record",),
        code="not_found",
        id="unknown-record",
    ),
    # ---------------------------------------------------------------- forget_thought
    *[
        Bad(
            "forget_thought",
            {k: v for k, v in {"repository": REPO, "thought_id": "x"}.items() if k != name},
            (name, "required"),
            id=f"missing-{name}",
        )
        for name in ("repository", "thought_id")
    ],
    Bad(
        "forget_thought",
        {"repository": REPO, "thought_id": "x", "bogus": 1},
        ("bogus", "not a known field"),
        id="unknown-top-level",
    ),
    Bad(
        "forget_thought",
        {"repository": REPO, "thought_id": " \t"},
        ("thought_id", "whitespace"),
        id="whitespace-thought_id",
    ),
    Bad(
        "forget_thought",
        {"repository": REPO, "thought_id": ATTEMPT},
        ("thought",),
        code="not_found",
        id="an-attempt-is-no-thought",
    ),
    # ---------------------------------------------------------------- skills
    Bad("upload_skill", {"repository": REPO}, ("content", "diff"), id="no-text"),
    Bad(
        "upload_skill",
        {"repository": REPO, "content": "---\nname: x\ndescription: [unclosed\n---\n"},
        ("content", "YAML"),
        id="front-matter-not-yaml",
    ),
    Bad(
        "upload_skill",
        {"repository": REPO, "content": "---\ndescription: d\n---\n"},
        ("content", "name", "required"),
        id="no-name",
    ),
    Bad(
        "upload_skill",
        {"repository": REPO, "content": "---\nname: x\n---\n"},
        ("content", "description", "required"),
        id="no-description",
    ),
    Bad(
        "upload_skill",
        {"repository": REPO, "content": SKILL + "x" * (1 << 20)},
        ("content", "1048576"),
        id="over-1-mib",
    ),
    Bad(
        "upload_skill",
        {**SKILL_REF, "diff": "@@ -1,1 +1,1 @@\n-nothing like it\n+x\n"},
        ("diff", "does not apply"),
        id="diff-does-not-apply",
    ),
    Bad("upload_skill", {"repository": REPO, "diff": "x"}, ("skill_id",), id="diff-without-skill-id"),
    Bad("upload_skill", {"repository": REPO, "content": SKILL, "bogus": 1}, ("bogus",), id="unknown-field"),
    Bad("read_skill", {**SKILL_REF, "version": 2}, ("version", "2"), "not_found", id="no-such-version"),
    Bad("read_skill", {**SKILL_REF, "version": 0}, ("version",), id="version-0"),
    Bad("read_skill", {**SKILL_REF, "skill_id": "nope"}, ("nope",), "not_found", id="unknown-skill"),
    Bad("read_skill", {**SKILL_REF, "skill_id": "Run Tests"}, ("skill_id", "lowercase"), id="bad-id"),
    Bad("search_skills", {"query": ""}, ("query",), id="empty-query"),
    Bad("search_skills", {"query": "x", "limit": 51}, ("limit", "50"), id="limit-51"),
    Bad("list_skills", {"statuses": ["gone"]}, ("statuses",), id="unknown-status"),
    Bad("skill_versions", {**SKILL_REF, "skill_id": "nope"}, ("nope",), "not_found", id="unknown-skill"),
    Bad("deprecate_skill", {**SKILL_REF, "skill_id": "nope"}, ("nope",), "not_found", id="unknown-skill"),
    Bad("revoke_skill", SKILL_REF, ("reason", "required"), id="no-reason"),
    Bad("delete_skill", {**SKILL_REF, "skill_id": "nope"}, ("nope",), "not_found", id="unknown-skill"),
    Bad("delete_skill", {"skill_id": "run-tests"}, ("repository", "required"), id="no-repository"),
    # ---------------------------------------------------------------- verify_integrity
    Bad("verify_integrity", {"bogus": 1}, ("bogus", "not a known field"), id="unknown-top-level"),
    Bad("verify_integrity", {"repository": ""}, ("repository",), id="empty-repository"),
    Bad("verify_integrity", {"repository": "  "}, ("repository", "whitespace"), id="whitespace-repository"),
    Bad(
        "verify_integrity",
        {"repository": "r" + LONE_SURROGATE},
        ("repository", "surrogate"),
        id="lone-surrogate-repository",
    ),
    Bad("verify_integrity", {"repository": "r" * 257}, ("repository", "256"), id="repository-257-chars"),
    Bad("verify_integrity", {"repository": 7}, ("repository",), id="repository-not-a-string"),
    # ---------------------------------------------------------------- stats
    Bad("stats", {"bogus": 1}, ("bogus", "not a known field"), id="unknown-top-level"),
    Bad("stats", {"repository": ""}, ("repository",), id="empty-repository"),
    Bad("stats", {"repository": "r" * 257}, ("repository", "256"), id="repository-257-chars"),
    Bad("stats", {"repository": 7}, ("repository",), id="repository-not-a-string"),
    Bad(
        "stats",
        {"repository": "github.com/no/such"},
        ("github.com/no/such",),
        "not_found",
        id="no-such-repository",
    ),
]

_THOUGHT = {"repository": REPO, "type": "Decision", "content": "use redis"}
CASES += [
    Bad("append_thought", {**_THOUGHT, "type": "Opinion"}, ("type",), id="unknown-type"),
    Bad("append_thought", {**_THOUGHT, "role": "Boss"}, ("role",), id="unknown-role"),
    Bad("append_thought", {**_THOUGHT, "visibility": "everyone"}, ("visibility",), id="unknown-visibility"),
    Bad(
        "append_thought",
        {**_THOUGHT, "visibility": "session"},
        ("visibility", "session_id"),
        id="session-visibility-without-a-session",
    ),
    Bad(
        "append_thought",
        {**_THOUGHT, "confidence": 1.5},
        ("confidence", "between 0 and 1"),
        id="confidence-1.5",
    ),
    Bad("append_thought", {**_THOUGHT, "importance": "lots"}, ("importance",), id="importance-text"),
    Bad("append_thought", {**_THOUGHT, "refs": ["missing-id"]}, ("refs", "missing-id"), id="dangling-ref"),
    Bad(
        "append_thought",
        {**_THOUGHT, "relations": [{"kind": "Supersedes", "target_id": "missing-id"}]},
        ("relations", "missing-id"),
        id="dangling-relation",
    ),
    Bad(
        "append_thought",
        {**_THOUGHT, "relations": [{"kind": "Supersedes", "target_id": ATTEMPT}]},
        ("relations", "attempt"),
        id="relation-to-an-attempt",
    ),
    Bad(
        "append_thought",
        {
            **_THOUGHT,
            "thought_id": "0b4f2a3e-1111-4222-8333-444455556666",
            "relations": [{"kind": "Supports", "target_id": "0b4f2a3e-1111-4222-8333-444455556666"}],
        },
        ("relations", "itself"),
        id="relation-to-itself",
    ),
    Bad("append_thought", {**_THOUGHT, "content": ""}, ("content",), id="empty-content"),
    Bad("append_thought", {**_THOUGHT, "content": "x" * 65_537}, ("content", "65536"), id="content-65537"),
    Bad("append_thought", {**_THOUGHT, "mood": "happy"}, ("mood", "not a known field"), id="unknown-field"),
    Bad(
        "append_thought",
        {**_THOUGHT, "entity_type": "queue"},
        ("entity_type", "upsert_entity_type"),
        id="unregistered-entity-type",
    ),
    Bad("append_thought", {**_THOUGHT, "entity_type": "Queue!"}, ("entity_type",), id="bad-entity-type"),
    Bad(
        "append_thought",
        {
            **_THOUGHT,
            "source_episode": {"transcript": "t.jsonl", "session_id": "s", "from_line": 9, "to_line": 2},
        },
        ("source_episode", "to_line"),
        id="episode-backwards",
    ),
    Bad(
        "append_thought",
        {**_THOUGHT, "source_episode": {"transcript": "t.jsonl", "from_line": 1, "to_line": 2}},
        ("source_episode.session_id",),
        id="episode-without-session",
    ),
    Bad(
        "append_thought",
        {**_THOUGHT, "thought_id": "not-a-uuid"},
        ("thought_id", "UUID"),
        id="bad-thought-id",
    ),
    Bad(
        "search_thoughts",
        {"filters": {"entity_types": ["A B"]}},
        ("filters.entity_types",),
        id="bad-entity-type",
    ),
    Bad("search_thoughts", {"filters": {"roles": ["Boss"]}}, ("filters.roles", "Memory"), id="unknown-role"),
    Bad(
        "upsert_entity_type",
        {"name": "Queue", "description": "a queue"},
        ("name", "lowercase"),
        id="bad-name",
    ),
    Bad(
        "upsert_entity_type", {"name": "queue", "description": " "}, ("description",), id="blank-description"
    ),
    Bad("upsert_entity_type", {"name": "queue"}, ("description", "required"), id="no-description"),
    Bad("list_entity_types", {"all": True}, ("all", "not a known field"), id="unknown-field"),
    Bad("search_thoughts", {"query": "  "}, ("query", "whitespace"), id="blank-query"),
    Bad("search_thoughts", {"limit": 51}, ("limit", "50"), id="limit-51"),
    Bad("search_thoughts", {"filters": {"types": ["Opinion"]}}, ("filters.types",), id="unknown-type"),
    Bad("search_thoughts", {"filters": {"colour": "red"}}, ("filters.colour",), id="unknown-filter"),
    Bad("search_thoughts", {"as_of": "yesterday"}, ("as_of", "ISO 8601"), id="bad-as-of"),
    Bad("search_thoughts", {"filters": {"min_confidence": 2}}, ("min_confidence",), id="min-confidence-2"),
    Bad("get_thought", {}, ("thought_id",), id="nothing-given"),
    Bad("get_thought", {"thought_id": "a", "hash": "0" * 64}, ("exactly one",), id="two-given"),
    Bad("get_thought", {"hash": "xyz"}, ("hash",), id="bad-hash"),
    Bad("get_thought", {"thought_id": "missing"}, ("no such thought",), "not_found", id="missing"),
    Bad("traverse_thoughts", {"thought_id": "x", "depth": 6}, ("depth", "5"), id="depth-6"),
    Bad("traverse_thoughts", {"thought_id": "x", "direction": "up"}, ("direction",), id="bad-direction"),
    Bad("traverse_thoughts", {"thought_id": "x", "kinds": ["Likes"]}, ("kinds", "Supersedes"), id="bad-kind"),
    Bad("traverse_thoughts", {"thought_id": "missing"}, ("missing",), "not_found", id="missing-start"),
    Bad("context_bundle", {"query": ""}, ("query",), id="empty-query"),
    Bad("context_bundle", {"query": "x", "limit": 0}, ("limit",), id="limit-0"),
    Bad("recent_context", {}, ("repository", "required"), id="no-repository"),
    Bad("recent_context", {"repository": REPO, "limit": 201}, ("limit", "200"), id="limit-201"),
    Bad("export_memory_md", {"repository": ""}, ("repository",), id="empty-repository"),
    Bad(
        "import_memory_md",
        {"repository": REPO, "markdown": "## Opinion\n- x"},
        ("line 1", "Opinion"),
        id="unknown-section",
    ),
    Bad(
        "import_memory_md",
        {"repository": REPO, "markdown": '## Decision\n- ok\n- bad <!-- mentis {"importance": 7} -->'},
        ("line 3", "importance"),
        id="bad-line-writes-nothing",
    ),
    Bad("register_agent", {"agent_id": "__agents__"}, ("agent_id",), id="reserved-id"),
    Bad("register_agent", {"agent_id": "a", "aliases": "b"}, ("aliases",), id="aliases-not-a-list"),
    Bad(
        "add_agent_key",
        {"agent_id": "seed-agent", "public_key": "AAAA"},
        ("public_key", "32 bytes"),
        id="short-key",
    ),
    Bad(
        "add_agent_key",
        {"agent_id": "nobody", "public_key": "A" * 43},
        ("nobody", "register it first"),
        "not_found",
        id="unregistered-agent",
    ),
    Bad(
        "revoke_agent_key", {"agent_id": "a", "key_id": "rsa:1", "reason": "x"}, ("key_id",), id="bad-key-id"
    ),
    Bad("revoke_agent_key", {"agent_id": "a", "key_id": "ed25519:" + "0" * 32}, ("reason",), id="no-reason"),
    Bad(
        "disable_agent",
        {"agent_id": "nobody", "reason": "gone"},
        ("nobody",),
        "not_found",
        id="unknown-agent",
    ),
    Bad("list_agents", {"all": True}, ("all",), id="unknown-field"),
    Bad("show_agent", {"agent_id": "nobody"}, ("nobody",), "not_found", id="unknown-agent"),
    Bad(
        "create_webhook",
        {"url": "https://169.254.169.254/", "events": ["attempt.recorded"], "token_id": "0" * 12},
        ("url", "link-local"),
        id="link-local-url",
    ),
    Bad(
        "create_webhook",
        {"url": "http://127.0.0.1:9/", "events": ["attempt.recorded"], "token_id": "0" * 12},
        ("token_id", "no such token"),
        id="unknown-token",
    ),
    Bad("list_webhooks", {"all": True}, ("all",), id="unknown-field"),
    Bad("delete_webhook", {"webhook_id": "wh_" + "0" * 16}, ("wh_",), "not_found", id="unknown-webhook"),
    Bad("webhook_deliveries", {"limit": 201}, ("limit", "200"), id="limit-too-high"),
    Bad("redeliver_webhook", {"delivery_id": "msg_nope"}, ("msg_nope",), "not_found", id="unknown-delivery"),
]

_SIG = "s1." + "a" * 32 + ".0.-." + "A" * 86


def _signed(**changes: Any) -> dict[str, Any]:
    args = {
        "tool": "record_attempt",
        "arguments": _record(),
        "id": "9b2c6a4e-0f7e-4a53-9d55-3d1b4c0f2a11",
        "at": "2026-01-02T03:04:05.000000Z",
        "key_id": "ed25519:" + "0" * 32,
        "sig": _SIG,
        **changes,
    }
    return {k: v for k, v in args.items() if v is not _DROP}


CASES += [
    Bad("prepare_write", {"tool": "search", "arguments": _search()}, ("tool", "writes nothing"), id="a-read"),
    Bad(
        "prepare_write",
        {"tool": "import_memory_md", "arguments": {"repository": REPO, "markdown": "## Decision\n- a\n"}},
        ("tool", "one signature covers one entry"),
        id="multi-append",
    ),
    Bad(
        "prepare_write",
        {"tool": "record_attempt", "arguments": _record(observation=_DROP)},
        ("observation", "required"),
        id="the-tools-own-field",
    ),
    Bad("prepare_write", {"tool": "record_attempt"}, ("arguments", "required"), id="missing-arguments"),
    Bad("signed_write", _signed(), ("at", "server's clock"), id="stale-time"),
    Bad("signed_write", _signed(at="yesterday"), ("at", "ISO 8601"), id="unreadable-time"),
    Bad("signed_write", _signed(sig="s1.abc"), ("sig must be s1.", "86 base64url"), id="malformed-envelope"),
    Bad("signed_write", _signed(tool="no_such_tool"), ("tool", "no operation named"), id="unknown-tool"),
    Bad(
        "prepare_write",
        {"tool": "accept_proposal", "arguments": {"proposal_id": "prop-1"}},
        ("tool", "a client cannot sign it"),
        id="server-held",
    ),
]
CASES += [
    Bad("list_proposals", {"status": "maybe"}, ("status", "pending")),
    Bad("list_proposals", {"limit": 201}, ("limit", "200"), id="limit"),
    Bad("show_proposal", {"proposal_id": "prop-none"}, ("prop-none",), "not_found", id="unknown"),
    Bad("show_proposal", {}, ("proposal_id", "required"), id="missing"),
    Bad("accept_proposal", {"proposal_id": "prop-none"}, ("prop-none",), "not_found", id="unknown"),
    Bad(
        "accept_proposal",
        {"proposal_id": "prop-none", "edits": {"repository": "elsewhere"}},
        ("edits.repository", "not a known field"),
        id="edit-outside-the-attempt",
    ),
    Bad("reject_proposal", {"proposal_id": "prop-none", "reason": ""}, ("reason", "at least 1")),
    Bad("reject_proposal", {"proposal_id": "prop-none"}, ("reason", "required"), id="no-reason"),
]
_RETRO = {"repository": REPO, "task_id": "checkout-rounding", "summary": "round once, at the end"}
CASES += [
    Bad(
        "append_retrospective",
        {**_RETRO, "task_id": "no-such-task"},
        ("task_id", "no-such-task"),
        id="unknown-task",
    ),
    Bad("append_retrospective", {**_RETRO, "summary": ""}, ("summary",), id="empty-summary"),
    Bad(
        "append_retrospective",
        {**_RETRO, "covers": ["missing-id"]},
        ("covers", "missing-id"),
        id="dangling-cover",
    ),
    Bad(
        "append_retrospective", {**_RETRO, "lesson": "x"}, ("lesson", "not a known field"), id="unknown-field"
    ),
    Bad("federated_search", {"query": ""}, ("query",), id="empty-query"),
    Bad(
        "federated_search",
        {"query": "q", "memories": ["nowhere"]},
        ("memories", "nowhere"),
        id="unknown-memory",
    ),
    Bad("federated_search", {"query": "q", "limit": 51}, ("limit", "50"), id="limit-51"),
    Bad("branch_from", {"repository": REPO, "branch": "a..b"}, ("branch", "git branch name"), id="bad-ref"),
    Bad("branch_from", {"repository": REPO, "branch": "x:y"}, ("branch", "':'"), id="colon"),
    Bad("branch_from", {"repository": REPO, "branch": "x", "fork_seq": 99}, ("fork_seq", "99"), id="no-seq"),
    Bad(
        "branch_from",
        {"repository": REPO, "branch": "x", "fork_seq": 0, "fork_hash": "0" * 64},
        ("fork_hash",),
        id="wrong-hash",
    ),
    Bad("list_branches", {"repository": ""}, ("repository",), id="empty-repository"),
    Bad("merge_branch", {"repository": REPO, "branch": "-x"}, ("branch", "'-'"), id="bad-ref"),
    Bad(
        "merge_branch",
        {"repository": REPO, "branch": "nope"},
        ("branch", "nope"),
        code="not_found",
        id="none",
    ),
    Bad("record_attempt", _record(branch="nope"), ("branch", "nope"), code="not_found", id="no-branch"),
    Bad("search", {"query": "q", "branch": "HEAD"}, ("branch",), id="bad-branch"),
]
TOOLS = {op.name for op in OPERATIONS}
assert {case.tool for case in CASES} == TOOLS


def _fill(value: Any, attempt_id: str) -> Any:
    if value == ATTEMPT:
        return attempt_id
    if isinstance(value, dict):
        return {k: _fill(v, attempt_id) for k, v in value.items()}
    return value


def _names_all(message: str, names: tuple[str, ...]) -> list[str]:
    """The expected names missing from ``message`` (numbers compared without thousands commas)."""
    plain = re.sub(r"(?<=\d),(?=\d{3})", "", message).lower()
    return [n for n in names if n.lower() not in plain]


# --------------------------------------------------------------------------- MCP, in-process


@pytest.mark.anyio
@pytest.mark.parametrize("case", CASES, ids=[f"{c.tool}-{c.id}" for c in CASES])
async def test_each_tool_rejects_bad_input_naming_the_field_and_writes_nothing(
    memory: Memory, case: Bad
) -> None:
    attempt_id = seed(memory)
    before = ledger_state(memory)
    with anyio.fail_after(30):
        async with Client(build_server(memory, parse_profile("all"))) as client:
            result = await client.call_tool(case.tool, _fill(case.args, attempt_id))
    assert result.is_error, f"accepted: {result.structured_content}"
    text = result.content[0].text
    assert text.startswith(f"Error executing tool {case.tool}: [{case.code}] "), text
    assert len(text) < 2_000, "the error echoes the oversized input back"
    missing = _names_all(text, case.names)
    assert not missing, f"message does not name {missing}: {text}"
    assert ledger_state(memory) == before


@pytest.mark.anyio
async def test_an_unknown_tool_is_an_error_and_writes_nothing(memory: Memory) -> None:
    seed(memory)
    before = ledger_state(memory)
    with anyio.fail_after(30):
        async with Client(build_server(memory, parse_profile("all"))) as client:
            result = await client.call_tool("drop_everything", {})
    assert result.is_error
    assert "drop_everything" in result.content[0].text
    assert ledger_state(memory) == before


@pytest.mark.anyio
async def test_a_valid_call_after_many_rejected_ones_still_writes_exactly_one_entry(
    memory: Memory,
) -> None:
    seed(memory)
    (counts, hashes) = ledger_state(memory)
    with anyio.fail_after(30):
        async with Client(build_server(memory, parse_profile("all"))) as client:
            for case in CASES:
                if case.tool == "record_attempt":
                    assert (await client.call_tool(case.tool, case.args)).is_error, case.id
            ok = await client.call_tool("record_attempt", _record())
    assert not ok.is_error, ok.content[0].text
    after_counts, after_hashes = ledger_state(memory)
    assert after_hashes[: len(hashes)] == hashes
    assert len(after_hashes) == len(hashes) + 1
    assert after_counts["attempts"] == counts["attempts"] + 1


# --------------------------------------------------------------------------- CLI


@pytest.fixture
def cli_env(db_path: Path) -> dict[str, str]:
    return {"MENTIS_DB": str(db_path), "MENTIS_EMBEDDER": "hash", "MENTIS_AGENT_ID": "cli-test"}


@pytest.fixture
def cli_store(db_path: Path, cli_env: dict[str, str]) -> Iterator[str]:
    """A store seeded through the CLI itself; yields the seeded attempt's id."""
    runner = CliRunner()
    done = runner.invoke(
        app,
        [
            "record",
            "--repo",
            REPO,
            "--task",
            "checkout-rounding",
            "--action",
            "rounded each line",
            "--observation",
            "still off by a cent",
            "--check-command",
            "pytest",
            "--check-status",
            "failed",
            "--json",
        ],
        env=cli_env,
    )
    assert done.exit_code == 0, done.stderr
    yield json.loads(done.stdout)["attempt_id"]


def _cli_ledger(db_path: Path) -> tuple[dict[str, int], list[str]]:
    memory = Memory.open(Settings(home=db_path.parent, db_path=db_path, embedder="hash"), HashEmbedder())
    try:
        return ledger_state(memory)
    finally:
        memory.close()


_REC = ["record", "--repo", REPO, "--task", "t1", "--action", "did a thing", "--observation", "saw"]

CLI_CASES: list[tuple[str, list[str], tuple[str, ...], int]] = [
    ("record-wrong-enum", [*_REC, "--check-command", "pytest", "--check-status", "ok"], ("check.status",), 2),
    ("record-check-status-without-command", [*_REC, "--check-status", "passed"], ("check.command",), 2),
    ("record-unknown-visibility", [*_REC, "--visibility", "team"], ("visibility",), 2),
    (
        "publish-unknown-visibility",
        ["publish", "--repo", REPO, "x", "--visibility", "world"],
        ("visibility",),
        2,
    ),
    ("publish-unknown-record", ["publish", "--repo", REPO, "no-such-record"], ("no-such-record",), 3),
    (
        "record-empty-repository",
        ["record", "--repo", "", "--task", "t", "--action", "a", "--observation", "o"],
        ("repository",),
        2,
    ),
    (
        "record-whitespace-task",
        ["record", "--repo", REPO, "--task", "  ", "--action", "a", "--observation", "o"],
        ("task_id", "whitespace"),
        2,
    ),
    (
        "record-observation-65537-bytes",
        ["record", "--repo", REPO, "--task", "t", "--action", "a", "--observation", BIG_UTF8],
        ("observation", "65536"),
        2,
    ),
    (
        "record-1001-files",
        [*_REC, *[a for i in range(1_001) for a in ("--file", f"f{i}.py")]],
        ("files", "1000"),
        2,
    ),
    ("record-non-hex-commit", [*_REC, "--commit", "main"], ("code_context.commit", "hex"), 2),
    (
        "record-lone-surrogate",
        ["record", "--repo", REPO, "--task", "t", "--action", "a", "--observation", "o" + LONE_SURROGATE],
        ("observation", "surrogate"),
        2,
    ),
    ("search-limit-0", ["search", "cart total", "--limit", "0"], ("limit", "1"), 2),
    ("search-limit-51", ["search", "cart total", "--limit", "51"], ("limit", "50"), 2),
    ("search-query-8193", ["search", "q" * 8_193], ("query", "8192"), 2),
    ("search-whitespace-query", ["search", "   "], ("query", "whitespace"), 2),
    ("recall-neither", ["recall"], ("sql", "task_id"), 2),
    (
        "recall-both",
        ["recall", "select 1", "--repo", REPO, "--task", "checkout-rounding"],
        ("sql", "task_id"),
        2,
    ),
    ("recall-bad-param", ["recall", "select :x", "--param", "x"], ("--param", "NAME=VALUE"), 2),
    ("recall-delete", ["recall", "delete from attempts"], ("sql",), 9),
    ("recall-insert", ["recall", "insert into attempts(attempt_id) values ('x')"], ("sql",), 9),
    ("recall-pragma", ["recall", "pragma journal_mode=delete"], ("sql",), 9),
    ("recall-attach", ["recall", "attach database ':memory:' as x"], ("sql",), 9),
    ("recall-entries", ["recall", "select * from entries"], ("sql",), 9),
    ("recall-bodies", ["recall", "select * from bodies"], ("sql",), 9),
    ("recall-sqlite_master", ["recall", "select * from sqlite_master"], ("sql",), 9),
    (
        "outdated-non-hex-commit",
        ["outdated", "--repo", REPO, ATTEMPT, "--reason", "r", "--latest-commit", "HEAD~1"],
        ("latest_commit", "hex"),
        2,
    ),
    (
        "outdated-reason-65537-bytes",
        ["outdated", "--repo", REPO, ATTEMPT, "--reason", BIG_ASCII],
        ("reason", "65536"),
        2,
    ),
    (
        "outdated-whitespace-attempt",
        ["outdated", "--repo", REPO, " ", "--reason", "r"],
        ("attempt_id", "whitespace"),
        2,
    ),
    (
        "outdated-unknown-attempt",
        ["outdated", "--repo", REPO, "no-such-attempt", "--reason", "r"],
        ("attempt",),
        3,
    ),
    ("forget-empty-attempt", ["forget", "--repo", REPO, ""], ("attempt_id",), 2),
    ("forget-unknown-attempt", ["forget", "--repo", REPO, "no-such-attempt"], ("attempt",), 3),
    ("forget-other-repository", ["forget", "--repo", "github.com/acme/other", ATTEMPT], ("attempt",), 3),
    ("verify-unknown-repository", ["verify", "--repo", "github.com/acme/none"], ("repository",), 3),
    (
        "retrospective-unknown-task",
        ["append-retrospective", "--repo", REPO, "--task", "no-such-task", "sum"],
        ("task_id", "no-such-task"),
        2,
    ),
    (
        "retrospective-empty-summary",
        ["append-retrospective", "--repo", REPO, "--task", "checkout-rounding", ""],
        ("summary",),
        2,
    ),
    (
        "retrospective-dangling-cover",
        ["append-retrospective", "--repo", REPO, "--task", "checkout-rounding", "s", "--cover", "nope"],
        ("covers", "nope"),
        2,
    ),
    ("search-memory-without-federated", ["search", "q", "--memory", "team"], ("--memory", "--federated"), 2),
    ("search-federated-unknown-memory", ["search", "q", "--federated", "-m", "nowhere"], ("memories",), 2),
]

# The commands were renamed after their operations; the older names stay as aliases and reject the same.
RENAMED = {
    "record": "record-attempt",
    "outdated": "mark-conclusion-outdated",
    "forget": "forget-attempt",
    "verify": "verify-integrity",
}
CLI_CASES += [
    (f"{case}-as-{RENAMED[args[0]]}", [RENAMED[args[0]], *args[1:]], names, code)
    for case, args, names, code in CLI_CASES
    if args[0] in RENAMED
]


@pytest.mark.parametrize(
    ("args", "names", "exit_code"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES]
)
def test_each_cli_command_rejects_bad_input_with_one_line_on_stderr_and_writes_nothing(
    db_path: Path,
    cli_env: dict[str, str],
    cli_store: str,
    args: list[str],
    names: tuple[str, ...],
    exit_code: int,
) -> None:
    before = _cli_ledger(db_path)
    argv = [cli_store if a == ATTEMPT else a for a in args]
    result = CliRunner().invoke(app, argv, env=cli_env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == exit_code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert len(lines[0]) < 2_000, "the error echoes the oversized input back"
    missing = _names_all(lines[0], names)
    assert not missing, f"message does not name {missing}: {lines[0]}"
    assert result.stdout == ""
    assert _cli_ledger(db_path) == before
