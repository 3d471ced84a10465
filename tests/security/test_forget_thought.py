# ruff: noqa: F811  (fixtures imported from tests.security.stores are parameters here)
"""Finding 4 of security issue 10: a secret in a thought can be erased, as one in an attempt can.

``forget_thought`` erases the thought's content, vector, index terms and rejection fingerprints,
leaves a tombstone on its chain (which still verifies, also after a rebuild), and reads that reach
it through another thought's relation report the edge as dangling instead of failing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mentis.api.attempts import RecallInput
from mentis.api.common import parse
from mentis.api.thoughts import (
    AppendThoughtInput,
    ContextBundleInput,
    ForgetThoughtInput,
    GetThoughtInput,
    SearchThoughtsInput,
    TraverseInput,
)
from mentis.config import Settings
from mentis.errors import Conflict, Forbidden, NotFound
from mentis.retrieval import query_terms
from mentis.service.memory import Caller, Memory
from tests.security.stores import ADMIN, settings, state  # noqa: F401

REPO, OTHER = "team-b/secret", "team-c/other"
SECRET = "the deploy key is zqxv-7731-marmalade"


def _append(m: Memory, content: str, caller: Caller = ADMIN, **fields: object) -> str:
    req = parse(AppendThoughtInput, {"repository": REPO, "type": "Finding", "content": content, **fields})
    return m.append_thought(caller, req).thought_id


def _forget(m: Memory, thought_id: str, repository: str = REPO, caller: Caller = ADMIN) -> object:
    req = parse(
        ForgetThoughtInput, {"repository": repository, "thought_id": thought_id, "reason": "a secret"}
    )
    return m.forget_thought(caller, req)


def _search(m: Memory, query: str) -> list[str]:
    found = m.search_thoughts(
        ADMIN, parse(SearchThoughtsInput, {"query": query, "repository": REPO, "include_invalidated": True})
    )
    return [s.thought.thought_id for s in found.thoughts]


@pytest.fixture
def memory(open_memory: Callable[[], Memory]) -> Memory:
    return open_memory()


def test_append_thought_warns_about_a_secret_naming_forget_thought(memory: Memory) -> None:
    req = parse(
        AppendThoughtInput,
        {"repository": REPO, "type": "Finding", "content": "token ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2},
    )
    (warning,) = memory.append_thought(ADMIN, req).warnings
    assert "forget_thought" in warning and "forget_attempt" not in warning


def test_a_forgotten_thought_is_erased_from_every_read_and_the_chain_still_verifies(
    memory: Memory, open_memory: Callable[[], Memory]
) -> None:
    kept = _append(memory, "the cache is warmed at boot")
    gone = _append(memory, SECRET, tags=["marmalade-tag"], concepts=["deploy"])
    assert _search(memory, "zqxv marmalade deploy key")[0] == gone
    done = _forget(memory, gone)
    assert done.forgotten is True and done.thought_id == gone  # type: ignore[attr-defined]
    for m in (memory, open_memory()):  # this process, and a fresh one reading the file
        assert gone not in _search(m, "zqxv marmalade deploy key")
        with pytest.raises(NotFound):
            m.get_thought(ADMIN, parse(GetThoughtInput, {"thought_id": gone}))
        rows = m.recall(ADMIN, parse(RecallInput, {"sql": "select thought_id, content from thoughts"})).rows
        assert rows == [[kept, "the cache is warmed at boot"]]
        (report,) = m.verify_integrity(ADMIN).chains
        assert (report.entries, report.bodies_erased) == (3, 1)
    memory.rebuild()
    assert gone not in _search(memory, "zqxv marmalade deploy key")
    assert _search(memory, "cache warmed boot") == [kept]


def test_a_forgotten_thoughts_words_no_longer_find_the_turns_said_around_it(
    memory: Memory, open_memory: Callable[[], Memory]
) -> None:
    """Its session's conversational windows held its text (its own window and the next turn's):
    after the forget, its words match no lexical row, in this process or another (the vector side
    still returns the two turns left, as it returns any thought)."""
    other = open_memory()
    before = _append(memory, "where is the key kept", session_id="s-1")
    gone = _append(memory, SECRET, session_id="s-1")
    after = _append(memory, "thanks, noted", session_id="s-1")
    words = query_terms("zqxv marmalade")
    rowids = memory.store.thought_rowids([before, gone, after])
    for m in (memory, other):
        assert _search(m, "zqxv marmalade")[0] == gone
        assert {r for r, _ in m.store.window_lexical(words, [REPO], 10)} == {rowids[gone], rowids[after]}
    _forget(memory, gone)
    for m in (memory, other, open_memory()):
        assert m.store.window_lexical(words, [REPO], 10) == []
        assert m.store.thought_lexical(words, [REPO], 10) == []


def test_relations_to_a_forgotten_thought_are_reported_dangling(memory: Memory) -> None:
    target = _append(memory, SECRET)
    ref = _append(memory, "see the finding about deploy keys", refs=[target])
    newer = _append(
        memory, "deploy keys now live in the vault", relations=[{"kind": "Supersedes", "target_id": target}]
    )
    _forget(memory, target)
    walked = memory.traverse_thoughts(ADMIN, parse(TraverseInput, {"thought_id": newer, "direction": "both"}))
    assert [n.thought_id for n in walked.nodes] == [newer]
    assert [(e.from_id, e.kind, e.to_id) for e in walked.dangling] == [(newer, "Supersedes", target)]
    got = memory.get_thought(ADMIN, parse(GetThoughtInput, {"thought_id": ref}))
    assert got.refs == [target]
    bundle = memory.context_bundle(
        ADMIN, parse(ContextBundleInput, {"query": "deploy keys", "repository": REPO})
    )
    assert {b.seed.thought.thought_id for b in bundle.bundles} == {ref, newer}


def test_forgetting_erases_the_rejection_fingerprints_it_was_part_of(memory: Memory) -> None:
    wrong = _append(memory, "the outage was caused by the zqxv load balancer")
    fixer = _append(
        memory, "no: the outage came from dns", relations=[{"kind": "Invalidates", "target_id": wrong}]
    )
    again = parse(
        AppendThoughtInput,
        {"repository": REPO, "type": "Finding", "content": "the outage was caused by the zqxv load balancer"},
    )
    assert memory.append_thought(ADMIN, again).reasserts  # the fingerprint is there
    _forget(memory, wrong)
    third = memory.append_thought(ADMIN, again)
    assert third.reasserts == [] and not [w for w in third.warnings if "re-asserts" in w]
    assert memory.store.rejections(REPO) == []
    _forget(memory, fixer)
    assert memory.store.rejections(REPO) == []


@pytest.mark.parametrize(
    ("how", "error"),
    [("unknown-id", NotFound), ("other-repository", NotFound), ("read-only", Forbidden),
     ("other-scope", Forbidden), ("already-forgotten", Conflict)],
)  # fmt: skip
def test_a_refused_forget_thought_writes_nothing(memory: Memory, how: str, error: type[Exception]) -> None:
    thought = _append(memory, SECRET)
    _append(memory, "another repository's thought", caller=ADMIN, repository=OTHER)
    if how == "already-forgotten":
        _forget(memory, thought)
    args = {
        "unknown-id": dict(thought_id="00000000-0000-4000-8000-000000000000"),
        "other-repository": dict(repository=OTHER),
        "read-only": dict(caller=Caller(agent_id="reader", can_write=False)),
        "other-scope": dict(caller=Caller(agent_id="c", repositories=("team-c/*",))),
        "already-forgotten": {},
    }[how]
    before = state(memory)
    with pytest.raises(error):
        _forget(memory, **{"thought_id": thought, **args})  # type: ignore[arg-type]
    assert state(memory) == before


def test_the_cli_forgets_a_thought(memory: Memory, settings: Settings, backend: str, tmp_path: Path) -> None:
    thought = _append(memory, SECRET)
    env = dict(os.environ, MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="cli-agent", MENTIS_HOME=str(tmp_path))
    if backend == "postgres":
        assert settings.database_url is not None
        env["MENTIS_DATABASE_URL"] = settings.database_url
    else:
        env["MENTIS_DB"] = str(settings.db_path)
    argv = [sys.executable, "-m", "mentis", "forget-thought", "-r", REPO, thought, "--reason", "leaked"]
    run = subprocess.run([*argv, "--json"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert f'"thought_id":"{thought}"' in run.stdout.replace(" ", "")
    assert _search(memory, "zqxv marmalade deploy key") == []


def test_an_export_after_forget_thought_imports_and_verifies_elsewhere(
    memory: Memory, backend: str, tmp_path: Path
) -> None:
    import io

    kept = _append(memory, "the cache is warmed at boot")
    gone = _append(memory, SECRET, relations=[{"kind": "Invalidates", "target_id": kept}])
    _forget(memory, gone)
    out = io.BytesIO()
    memory.export(ADMIN, out)
    assert b"marmalade" not in out.getvalue()
    other = Memory.open(Settings(home=tmp_path / "o", db_path=tmp_path / "o" / "m.db", embedder="hash"))
    try:
        assert other.import_(ADMIN, out.getvalue().splitlines()) == 3
        assert [r.bodies_erased for r in other.store.verify()] == [1]
        assert _search(other, "cache warmed boot") == [kept]  # no longer invalidated: its invalidator is gone
    finally:
        other.close()


def test_the_parallel_verifier_agrees_on_a_store_with_a_forgotten_thought(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's parallel block scan (blocks of two rowids here) reads the thought tombstone too."""
    import sqlite3

    from mentis.store.sqlite import verify as sqlite_verify
    from mentis.store.sqlite.store import _LEDGER_SCHEMA

    memory = Memory.open(Settings(home=tmp_path / "p", db_path=tmp_path / "p" / "m.db", embedder="hash"))
    for n in range(6):
        _append(memory, f"finding number {n} about the zqxv cache")
    gone = _append(memory, SECRET)
    _append(memory, "after it", refs=[gone])
    _forget(memory, gone)
    monkeypatch.setattr(sqlite_verify, "MIN_BLOCK", 2)
    monkeypatch.setattr(sqlite_verify, "MAX_BLOCK", 2)
    conn = sqlite3.connect(memory.store.path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
        fast = sqlite_verify.verify_blocks(conn, memory.store.path, heads, _LEDGER_SCHEMA, 0)
    finally:
        conn.close()
    assert fast is not None
    assert [r.to_json() for r in fast] == [r.to_json() for r in memory.store.verify()]
    memory.close()
