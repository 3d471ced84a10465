"""SQLite's parallel verification (``store/sqlite/verify.py``) of a store holding branches: the
block scans and the stitch agree with the reference pass, and a fork point that no longer matches
its parent is never passed by them (the one pass then names it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mentis.api.attempts import RecordAttemptInput
from mentis.api.branches import BranchFromInput, MergeBranchInput
from mentis.api.thoughts import AppendThoughtInput
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite import store as sqlite_store
from mentis.store.sqlite import verify as sqlite_verify
from mentis.store.sqlite.verify import one_pass

from .conftest import REPO

CALLER = Caller(agent_id="verifier")


def scans(path: Path) -> tuple[object, object]:
    """(the parallel pass with every block here, the reference pass) over one snapshot."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
        fast = sqlite_verify.verify_blocks(conn, str(path), heads, sqlite_store._LEDGER_SCHEMA, 0)
        try:
            slow: object = one_pass(conn, heads)
        except Exception as exc:
            slow = exc
        return fast, slow
    finally:
        conn.close()


def filled(settings: Settings, refs: bool) -> Memory:
    m = Memory.open(settings, HashEmbedder())
    for i in range(5):
        m.record_attempt(
            CALLER, RecordAttemptInput(repository=REPO, task_id=f"t{i}", action="a", observation="o")
        )
    m.branch_from(CALLER, BranchFromInput(repository=REPO, branch="feature/x", parent=None))
    m.record_attempt(
        CALLER,
        RecordAttemptInput(repository=REPO, branch="feature/x", task_id="b", action="a", observation="o"),
    )
    main = m.append_thought(CALLER, AppendThoughtInput(repository=REPO, type="Decision", content="main"))
    m.append_thought(
        CALLER,
        AppendThoughtInput(
            repository=REPO,
            branch="feature/x",
            type="Decision",
            content="b",
            refs=[main.thought_id] if refs else [],
        ),
    )
    m.merge_branch(CALLER, MergeBranchInput(repository=REPO, branch="feature/x"))
    return m


def test_the_block_scans_verify_a_store_with_a_fork_and_a_merge_as_the_one_pass_does(
    settings: Settings,
) -> None:
    filled(settings, refs=False).close()
    fast, slow = scans(settings.db_path)
    assert fast is not None and fast == slow


def test_a_link_to_the_parent_s_record_goes_to_the_one_pass_which_passes_it(settings: Settings) -> None:
    filled(settings, refs=True).close()
    fast, slow = scans(settings.db_path)
    assert fast is None and isinstance(slow, list)


def test_a_fork_point_naming_another_hash_is_not_passed_by_the_block_scans(settings: Settings) -> None:
    from tests.conformance.test_branches import rewrite_chain

    filled(settings, refs=False).close()
    rewrite_chain(
        settings,
        f"{REPO}:feature/x",
        lambda doc: {**doc, "fork_hash": "f" * 64} if "fork_hash" in doc else doc,
    )
    fast, slow = scans(settings.db_path)
    assert fast is None
    assert isinstance(slow, Exception) and "feature/x" in str(slow)
