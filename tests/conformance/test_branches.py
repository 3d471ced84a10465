"""Branch and merge chains (issue 26, docs/branches.md) on both stores: a fork recorded in both
chains, writes to a branch, read sets (a branch reads its parent's records, the parent does not read
the branch's until it is merged), merges that copy nothing, and verification of fork and merge
entries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mentis.api.attempts import RecallInput, SearchInput
from mentis.api.branches import BranchFromInput, MergeBranchInput
from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput, SearchThoughtsInput
from mentis.config import Settings
from mentis.errors import Conflict, Forbidden, IntegrityError, InvalidInput, NotFound
from mentis.service.memory import Caller, Memory
from tests.conformance.helpers import REPOS, record

REPO = REPOS[0]


def rewrite_chain(settings: Settings, chain: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Rewrite every body of ``chain`` with ``change`` and redo every hash after it (the chain's
    own verification then holds: only a check against another chain can catch it)."""
    import sqlite3

    import orjson

    from mentis.ledger.canonical import canonical, sha256_hex
    from mentis.ledger.entry import entry_document, entry_hash

    pg = settings.uses_postgres
    if pg:
        import psycopg

        assert settings.database_url is not None
        conn: Any = psycopg.connect(settings.database_url)
        mark = "%s"
    else:
        conn = sqlite3.connect(settings.db_path)
        mark = "?"
    q = lambda sql: sql.replace("?", mark)  # noqa: E731
    rows = conn.execute(
        q(
            "SELECT e.rowid, v, chain, seq, kind, id, at, agent, key_id, b.body FROM entries e "
            "JOIN bodies b ON b.rowid = e.rowid WHERE chain = ? ORDER BY seq"
        ),
        (chain,),
    ).fetchall()
    prev = ""
    for rowid, v, c, seq, kind, id_, at, agent, key_id, body in rows:
        raw = canonical(change(orjson.loads(bytes(body))))
        body_hash = sha256_hex(raw)
        hash_ = entry_hash(entry_document(v, c, seq, kind, id_, at, agent, prev, body_hash, key_id))
        conn.execute(q("UPDATE bodies SET body = ? WHERE rowid = ?"), (raw, rowid))
        conn.execute(
            q("UPDATE entries SET prev = ?, body_hash = ?, hash = ? WHERE rowid = ?"),
            (prev, body_hash, hash_, rowid),
        )
        prev = hash_
    conn.execute(q("UPDATE heads SET hash = ? WHERE chain = ?"), (prev, chain))
    conn.commit()
    conn.close()


def branch(memory: Memory, caller: Caller, name: str = "feature/x", **fields: Any) -> Any:
    return memory.branch_from(caller, parse(BranchFromInput, {"repository": REPO, "branch": name, **fields}))


def merge(memory: Memory, caller: Caller, name: str = "feature/x", **fields: Any) -> Any:
    return memory.merge_branch(
        caller, parse(MergeBranchInput, {"repository": REPO, "branch": name, **fields})
    )


def attempt_ids(memory: Memory, caller: Caller, **fields: Any) -> set[str]:
    res = memory.search(
        caller, parse(SearchInput, {"query": "checkout payment queue", "limit": 50, **fields})
    )
    return {i for t in res.tasks for i in t.matched_attempt_ids}


def thought(memory: Memory, caller: Caller, content: str, **fields: Any) -> str:
    data = {"repository": REPO, "type": "Decision", "content": content, **fields}
    return memory.append_thought(caller, parse(AppendThoughtInput, data), link_duplicates=False).thought_id


def thought_ids(memory: Memory, caller: Caller, **fields: Any) -> set[str]:
    res = memory.search_thoughts(
        caller, parse(SearchThoughtsInput, {"repository": REPO, "limit": 50, **fields})
    )
    return {t.thought.thought_id for t in res.thoughts}


def test_a_fork_is_an_entry_in_both_chains_at_the_parents_head(memory: Memory, caller: Caller) -> None:
    record(memory, caller)
    head = memory.store.chain_heads()[REPO]
    info = branch(memory, caller)
    assert (info.chain, info.parent, info.branch) == (f"{REPO}:feature/x", REPO, "feature/x")
    assert (info.fork.seq, info.fork.hash) == head
    kinds = [(e.chain, e.seq, e.kind) for e, _ in memory.store.iter_ledger()]
    assert (info.chain, 0, "fork") in kinds and (REPO, head[0] + 1, "branch") in kinds
    assert [b.branch for b in memory.list_branches(caller, REPO)] == ["feature/x"]


def test_a_branch_reads_its_parent_and_the_parent_reads_the_branch_only_after_merge(
    memory: Memory, caller: Caller
) -> None:
    main_id = record(memory, caller).attempt_id
    branch(memory, caller)
    on_branch = record(
        memory, caller, branch="feature/x", observation="payment queue drained on branch"
    ).attempt_id
    after_fork = record(memory, caller, observation="checkout payment queue fixed on main").attempt_id
    assert attempt_ids(memory, caller, repository=REPO, branch="feature/x") == {
        main_id,
        on_branch,
        after_fork,
    }
    assert attempt_ids(memory, caller, repository=REPO) == {main_id, after_fork}
    t_main = thought(memory, caller, "use the payment queue fixture")
    t_branch = thought(memory, caller, "drain the queue before each test", branch="feature/x")
    assert thought_ids(memory, caller, repository=f"{REPO}:feature/x") == {t_main, t_branch}
    assert thought_ids(memory, caller) == {t_main}

    report = merge(memory, caller)
    assert report.into == REPO and report.conflicts == []
    assert attempt_ids(memory, caller, repository=REPO) == {main_id, on_branch, after_fork}
    assert thought_ids(memory, caller) == {t_main, t_branch}
    # nothing copied: the branch's attempt keeps its chain, id and entry
    stored = [(e.chain, e.id) for e, _ in memory.store.iter_ledger() if e.id == on_branch]
    assert stored == [(f"{REPO}:feature/x", on_branch)]
    history = memory.recall(caller, parse(RecallInput, {"repository": REPO, "task_id": "T-1"}))
    assert {row[0] for row in history.rows} == {main_id, on_branch, after_fork}


def test_branch_writes_and_merges_survive_reopening_and_verify(
    memory: Memory, caller: Caller, open_memory: Callable[[], Memory]
) -> None:
    record(memory, caller)
    branch(memory, caller)
    t1 = thought(memory, caller, "main decision")
    t2 = thought(memory, caller, "branch builds on it", branch="feature/x", refs=[t1])
    merge(memory, caller)
    memory.close()
    again = open_memory()
    assert again.store.damaged == {}
    assert {r.chain for r in again.store.verify()} >= {REPO, f"{REPO}:feature/x"}
    assert thought_ids(again, caller) == {t1, t2}
    again.close()


@pytest.mark.parametrize(
    "name",
    [
        "bad name",
        "a..b",
        "x:y",
        "-x",
        "x.lock",
        "a/.b",
        "HEAD",
        "@",
        "a//b",
        "/a",
        "a/",
        "x.",
        "a@{b",
        "a~1",
        "a^",
        "a?",
        "a*",
        "a[",
        "a\\b",
    ],
)
def test_a_branch_name_git_refuses_is_refused_naming_the_field(
    memory: Memory, caller: Caller, name: str
) -> None:
    record(memory, caller)
    before = memory.store.chain_heads()
    with pytest.raises(InvalidInput) as err:
        branch(memory, caller, name)
    assert err.value.field == "branch"
    assert memory.store.chain_heads() == before


def test_bad_fork_points_and_merges_are_refused_and_write_nothing(memory: Memory, caller: Caller) -> None:
    record(memory, caller)
    before = memory.store.chain_heads()
    with pytest.raises(InvalidInput) as err:
        branch(memory, caller, fork_seq=99)
    assert err.value.field == "fork_seq"
    with pytest.raises(InvalidInput) as err:
        branch(memory, caller, fork_seq=0, fork_hash="0" * 64)
    assert err.value.field == "fork_hash"
    assert memory.store.chain_heads() == before
    branch(memory, caller)
    branch(memory, caller, "feature/y", parent="feature/x")
    before = memory.store.chain_heads()
    with pytest.raises(InvalidInput) as err:
        merge(memory, caller, into="feature/x")
    assert err.value.field == "into"
    with pytest.raises(InvalidInput) as err:
        merge(memory, caller, "feature/x", into="feature/y")
    assert err.value.field == "into" and "descendant" in str(err.value)
    with pytest.raises(NotFound, match=r"^branch: "):
        merge(memory, caller, "nope")
    with pytest.raises(NotFound, match=r"^branch: "):
        record(memory, caller, branch="nope")
    with pytest.raises(Conflict):
        branch(memory, caller)
    with pytest.raises(InvalidInput) as err:
        record(memory, caller, repository=f"{REPO}:feature/x")
    assert err.value.field == "repository"
    assert memory.store.chain_heads() == before


def test_ensure_branch_creates_once_and_returns_the_same_branch(memory: Memory, caller: Caller) -> None:
    record(memory, caller)
    first = memory.ensure_branch(caller, REPO, "wip")
    assert memory.ensure_branch(caller, REPO, "wip") == first
    assert len(memory.list_branches(caller, REPO)) == 1


def test_a_rewritten_parent_under_a_fork_point_refuses_the_branch_naming_chain_and_seq(
    memory: Memory, caller: Caller, settings: Settings, open_memory: Callable[[], Memory]
) -> None:
    record(memory, caller)
    info = branch(memory, caller)
    record(memory, caller, branch="feature/x")
    memory.close()
    # a fork point naming a hash the parent never had, every hash of the branch's chain redone
    rewrite_chain(
        settings, info.chain, lambda doc: {**doc, "fork_hash": "f" * 64} if "fork_hash" in doc else doc
    )
    m = open_memory()
    try:
        assert info.chain in m.store.damaged
        failure = m.store.damaged[info.chain]
        assert (failure.chain, failure.seq) == (info.chain, 0)
        assert REPO not in m.store.damaged
        with pytest.raises(IntegrityError):
            record(m, caller, branch="feature/x")
    finally:
        m.close()


def test_an_export_of_a_repository_carries_its_branches_and_imports_verified(
    memory: Memory, caller: Caller, other_settings: Settings
) -> None:
    import io

    from mentis.providers.embed import HashEmbedder

    record(memory, caller)
    branch(memory, caller)
    t1 = thought(memory, caller, "main decision")
    t2 = thought(memory, caller, "branch refers to it", branch="feature/x", refs=[t1])
    merge(memory, caller)
    out = io.BytesIO()
    memory.export(caller, out, REPO)
    ledger = [(e.chain, e.seq, e.hash) for e, _ in memory.store.iter_ledger()]
    target = Memory.open(other_settings, HashEmbedder())
    try:
        target.import_(caller, out.getvalue().splitlines())
        assert [(e.chain, e.seq, e.hash) for e, _ in target.store.iter_ledger()] == ledger
        assert [b.chain for b in target.list_branches(caller, REPO)] == [f"{REPO}:feature/x"]
        assert thought_ids(target, caller) == {t1, t2}
    finally:
        target.close()


def test_an_import_whose_merged_head_names_another_hash_is_refused_naming_chain_and_seq(
    memory: Memory, caller: Caller, other_settings: Settings
) -> None:
    import io

    import orjson

    from mentis.ledger.canonical import canonical, sha256_hex
    from mentis.ledger.entry import entry_document, entry_hash
    from mentis.providers.embed import HashEmbedder

    record(memory, caller)
    branch(memory, caller)
    record(memory, caller, branch="feature/x")
    report = merge(memory, caller)
    out = io.BytesIO()
    memory.export(caller, out)
    lines = out.getvalue().splitlines()
    # the merge entry is the target's newest: rewrite its body to name another head, hashes redone
    for n, line in enumerate(lines[1:], start=1):
        doc = orjson.loads(line)
        e = doc["entry"]
        if e["kind"] == "merge":
            doc["body"]["source_hash"] = "e" * 64
            e["body_hash"] = sha256_hex(canonical(doc["body"]))
            fields = (e["v"], e["chain"], e["seq"], e["kind"], e["id"], e["at"], e["agent"], e["prev"])
            e["hash"] = entry_hash(entry_document(*fields, e["body_hash"], e.get("key_id")))
            lines[n] = orjson.dumps(doc)
    header = orjson.loads(lines[0])
    header["heads"][REPO] = [report.merge.seq, orjson.loads(lines[-1])["entry"]["hash"]]
    lines[0] = orjson.dumps(header)
    target = Memory.open(other_settings, HashEmbedder())
    try:
        with pytest.raises(IntegrityError) as err:
            target.import_(caller, lines)
        assert (err.value.chain, err.value.seq) == (REPO, report.merge.seq)
        assert target.store.chain_heads() == {}
    finally:
        target.close()


def test_migrate_carries_branches(
    memory: Memory, caller: Caller, settings: Settings, other_settings: Settings
) -> None:
    from mentis.service.migrate import migrate

    record(memory, caller)
    branch(memory, caller)
    on_branch = record(memory, caller, branch="feature/x").attempt_id
    ledger = [(e.chain, e.seq, e.hash) for e, _ in memory.store.iter_ledger()]
    memory.close()
    migrate(settings, other_settings)
    from mentis.providers.embed import HashEmbedder

    target = Memory.open(other_settings, HashEmbedder())
    try:
        assert [(e.chain, e.seq, e.hash) for e, _ in target.store.iter_ledger()] == ledger
        assert on_branch in attempt_ids(target, caller, repository=REPO, branch="feature/x")
        assert on_branch not in attempt_ids(target, caller, repository=REPO)
    finally:
        target.close()


def test_a_token_for_a_repository_reads_and_writes_its_branches_and_no_other(
    memory: Memory, caller: Caller
) -> None:
    record(memory, caller)
    record(memory, caller, REPOS[1])
    branch(memory, caller)
    scoped = Caller(agent_id="scoped", repositories=(REPO,))
    mine = record(memory, scoped, branch="feature/x", observation="payment queue on the branch").attempt_id
    assert mine in attempt_ids(memory, scoped, repository=REPO, branch="feature/x")
    assert mine in attempt_ids(memory, scoped)  # every chain it may read, the branch included
    other = Caller(agent_id="other", repositories=(REPOS[1],))
    with pytest.raises(Forbidden):
        attempt_ids(memory, other, repository=REPO, branch="feature/x")
    assert mine not in attempt_ids(memory, other)
    with pytest.raises(Forbidden):
        record(memory, other, branch="feature/x")


def test_a_merge_reports_and_writes_the_three_kinds_of_conflict(memory: Memory, caller: Caller) -> None:
    from mentis.api.attempts import MarkOutdatedInput
    from mentis.api.skills import RevokeSkillInput, UploadSkillInput
    from mentis.ledger.branches import MergeBody

    skill = "---\nname: run-tests\ndescription: How to run the tests\n---\nRun `pytest -q`.\n"
    old = record(memory, caller, files=["src/shop/checkout.py"]).attempt_id
    doomed = thought(memory, caller, "retry the payment queue three times")
    memory.upload_skill(caller, UploadSkillInput(repository=REPO, content=skill))
    branch(memory, caller)
    # the main line: marks the attempt outdated, supersedes the thought, revokes the skill
    memory.mark_conclusion_outdated(
        caller, MarkOutdatedInput(repository=REPO, attempt_id=old, reason="checkout.py was rewritten")
    )
    thought(
        memory,
        caller,
        "never retry the payment queue",
        relations=[{"kind": "Supersedes", "target_id": doomed}],
    )
    memory.revoke_skill(
        caller, RevokeSkillInput(repository=REPO, skill_id="run-tests", reason="leaks tokens")
    )
    # the branch, later: a passed check on the same file, the thought re-asserted, a new skill version
    check = {"command": "pytest tests/test_checkout.py", "status": "passed"}
    passed = record(
        memory, caller, branch="feature/x", files=["src/shop/checkout.py"], check=check
    ).attempt_id
    thought(memory, caller, "as decided, retry the queue", branch="feature/x", refs=[doomed])
    memory.upload_skill(caller, UploadSkillInput(repository=f"{REPO}:feature/x", content=skill + "More.\n"))

    report = merge(memory, caller)
    kinds = {(c.kind, c.record_id) for c in report.conflicts}
    assert kinds == {("attempt", old), ("thought", doomed), ("skill", "run-tests")}
    attempt = next(c for c in report.conflicts if c.kind == "attempt")
    assert "checkout.py was rewritten" in attempt.target and passed in attempt.source
    entry, raw = next((e, b) for e, b in memory.store.iter_ledger() if e.kind == "merge")
    assert raw is not None and {(c.kind, c.record_id) for c in MergeBody.parse(raw).conflicts} == kinds
    assert entry.seq == report.merge.seq


def test_a_branch_named_as_an_existing_repository_and_a_cross_chain_supersession_are_refused(
    memory: Memory, caller: Caller
) -> None:
    record(memory, caller)
    record(memory, caller, f"{REPO}:taken")  # a plain repository whose name is a branch chain's
    with pytest.raises(Conflict):
        branch(memory, caller, "taken")
    branch(memory, caller)
    on_main = thought(memory, caller, "use the payment queue fixture")
    before = memory.store.chain_heads()
    with pytest.raises(InvalidInput) as err:
        thought(
            memory,
            caller,
            "do not",
            branch="feature/x",
            relations=[{"kind": "Supersedes", "target_id": on_main}],
        )
    assert err.value.field == "relations"
    assert memory.store.chain_heads() == before
    thought(
        memory,
        caller,
        "builds on it",
        branch="feature/x",
        relations=[{"kind": "Supports", "target_id": on_main}],
    )
    assert thought_ids(memory, caller) == {on_main}  # the parent's reads are unchanged


def test_records_a_branch_adds_after_its_merge_are_read_by_the_target_only_once_merged_again(
    memory: Memory, caller: Caller
) -> None:
    record(memory, caller)
    branch(memory, caller)
    before = record(memory, caller, branch="feature/x", observation="payment queue before merge").attempt_id
    t_before = thought(memory, caller, "merged decision", branch="feature/x")
    merge(memory, caller)
    after = record(memory, caller, branch="feature/x", observation="payment queue after merge").attempt_id
    t_after = thought(memory, caller, "later decision", branch="feature/x")
    on_main = attempt_ids(memory, caller, repository=REPO)
    assert before in on_main and after not in on_main
    assert t_before in thought_ids(memory, caller) and t_after not in thought_ids(memory, caller)
    history = memory.recall(caller, parse(RecallInput, {"repository": REPO, "task_id": "T-1"}))
    assert before in {r[0] for r in history.rows} and after not in {r[0] for r in history.rows}
    assert after in attempt_ids(memory, caller, repository=REPO, branch="feature/x")
    merge(memory, caller)
    assert after in attempt_ids(memory, caller, repository=REPO)
    assert t_after in thought_ids(memory, caller)


def test_a_branch_reads_its_parent_s_skills_and_its_own_version_first_and_the_parent_not_the_branch_s(
    memory: Memory, caller: Caller
) -> None:
    from mentis.api.skills import ListSkillsInput, ReadSkillInput, UploadSkillInput

    skill = "---\nname: run-tests\ndescription: How to run the tests\n---\nRun `pytest -q`.\n"
    other = "---\nname: release\ndescription: How to release\n---\nTag it.\n"
    record(memory, caller)
    memory.upload_skill(caller, UploadSkillInput(repository=REPO, content=skill))
    info = branch(memory, caller)
    read = memory.read_skill(caller, ReadSkillInput(repository=info.chain, skill_id="run-tests"))
    assert read.skill.repository == REPO and "pytest -q" in read.content
    memory.upload_skill(caller, UploadSkillInput(repository=info.chain, content=skill.replace("-q", "-x")))
    memory.upload_skill(caller, UploadSkillInput(repository=info.chain, content=other))
    read = memory.read_skill(caller, ReadSkillInput(repository=info.chain, skill_id="run-tests"))
    assert read.skill.repository == info.chain and "pytest -x" in read.content
    listed = memory.list_skills(caller, ListSkillsInput(repository=info.chain)).skills
    assert sorted((s.skill_id, s.repository) for s in listed) == [
        ("release", info.chain),
        ("run-tests", info.chain),
    ]
    on_main = memory.list_skills(caller, ListSkillsInput(repository=REPO)).skills
    assert [(s.skill_id, s.repository) for s in on_main] == [("run-tests", REPO)]
    with pytest.raises(NotFound):
        memory.read_skill(caller, ReadSkillInput(repository=REPO, skill_id="release"))


def test_a_branch_of_a_repository_with_no_entries_yet_forks_before_its_first_and_verifies(
    memory: Memory, caller: Caller, open_memory: Callable[[], Memory]
) -> None:
    info = memory.ensure_branch(caller, REPO, "first-use")
    assert (info.fork.seq, info.fork.hash) == (-1, "")
    on_branch = record(memory, caller, branch="first-use").attempt_id
    assert on_branch in attempt_ids(memory, caller, repository=REPO, branch="first-use")
    assert attempt_ids(memory, caller, repository=REPO) == set()
    memory.close()
    again = open_memory()
    try:
        assert again.store.damaged == {}
        assert [b.branch for b in again.list_branches(caller, REPO)] == ["first-use"]
    finally:
        again.close()


def test_a_token_for_a_repository_imports_its_branches(
    memory: Memory, caller: Caller, other_settings: Settings
) -> None:
    import io

    from mentis.providers.embed import HashEmbedder

    record(memory, caller)
    branch(memory, caller)
    record(memory, caller, branch="feature/x")
    out = io.BytesIO()
    memory.export(caller, out, REPO)
    lines = [line for line in out.getvalue().splitlines() if b'"__agents__"' not in line]
    target = Memory.open(other_settings, HashEmbedder())
    try:
        scoped = Caller(agent_id="scoped", repositories=(REPO,))
        assert target.import_(scoped, lines) == len(lines) - 1
        assert [b.branch for b in target.list_branches(scoped, REPO)] == ["feature/x"]
    finally:
        target.close()
