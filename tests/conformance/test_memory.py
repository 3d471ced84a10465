"""The service's behaviour on a real SQLite file with the deterministic embedder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecallInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.config import Settings
from mentis.errors import Conflict, EmbeddingError, Forbidden, NotFound
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from tests.conftest import REPO


def record(memory: Memory, caller: Caller, **fields: Any) -> str:
    data = {"repository": REPO, "task_id": "T-1", "action": "ran it", "observation": "it broke"}
    data.update(fields)
    return memory.record_attempt(caller, parse(RecordAttemptInput, data)).attempt_id


def search(memory: Memory, caller: Caller, query: str, **fields: Any) -> list[Any]:
    return memory.search(caller, parse(SearchInput, {"query": query, **fields})).tasks


def ledger(memory: Memory) -> list[str]:
    return [e.hash for e, _ in memory.store.iter_ledger()]


def test_status_is_the_check_status_or_unverified(memory: Memory, caller: Caller) -> None:
    passed = memory.record_attempt(
        caller,
        parse(
            RecordAttemptInput,
            {
                "repository": REPO,
                "task_id": "T",
                "action": "a",
                "observation": "o",
                "check": {"command": "pytest", "status": "passed", "exit_code": 0},
            },
        ),
    )
    plain = memory.record_attempt(
        caller,
        parse(RecordAttemptInput, {"repository": REPO, "task_id": "T", "action": "a", "observation": "o"}),
    )
    assert (passed.status, plain.status) == ("passed", "unverified")
    assert (passed.ledger.seq, plain.ledger.seq) == (0, 1)


def test_search_groups_attempts_by_task_with_one_preview(memory: Memory, caller: Caller) -> None:
    for i in range(7):
        record(
            memory,
            caller,
            task_id="T-db",
            action=f"migration attempt {i}",
            observation="migration lock timeout",
        )
    record(memory, caller, task_id="T-css", action="fixed navbar", observation="css grid overflow")
    tasks = search(memory, caller, "migration lock timeout")
    assert tasks[0].task_id == "T-db"
    assert tasks[0].attempt_count == 7
    assert len(tasks[0].matched_attempt_ids) == 5
    assert len({t.task_id for t in tasks}) == len(tasks)


def test_failed_and_outdated_attempts_are_returned_and_marked(memory: Memory, caller: Caller) -> None:
    aid = record(memory, caller, check={"command": "make test", "status": "failed", "exit_code": 2})
    for reason in ("schema changed in v2", "the fix moved to db/pool.py"):
        out = memory.mark_conclusion_outdated(
            caller, parse(MarkOutdatedInput, {"repository": REPO, "attempt_id": aid, "reason": reason})
        )
    assert out.corrections_count == 2
    (task,) = search(memory, caller, "it broke")
    assert task.attempt.status == "failed"
    assert task.attempt.correction is not None
    assert task.attempt.correction.reason == "the fix moved to db/pool.py"
    assert task.attempt.corrections_count == 2


def test_corrections_keep_history_and_never_change_the_attempt(memory: Memory, caller: Caller) -> None:
    aid = record(memory, caller, observation="original observation")
    for reason in ("first", "second"):
        memory.mark_conclusion_outdated(
            caller, parse(MarkOutdatedInput, {"repository": REPO, "attempt_id": aid, "reason": reason})
        )
    rows = memory.recall(
        caller, parse(RecallInput, {"sql": "select reason from corrections order by at"})
    ).rows
    assert rows == [["first"], ["second"]]
    hist = memory.recall(caller, parse(RecallInput, {"repository": REPO, "task_id": "T-1"}))
    row = dict(zip(hist.columns, hist.rows[0], strict=True))
    assert row["observation"] == "original observation"
    assert [c["reason"] for c in row["corrections"]] == ["first", "second"]


def test_forgotten_attempts_never_come_back(memory: Memory, caller: Caller) -> None:
    keep = record(memory, caller, task_id="T-keep", observation="shared words here")
    gone = record(memory, caller, task_id="T-gone", observation="shared words here secret=hunter2")
    memory.mark_conclusion_outdated(
        caller, parse(MarkOutdatedInput, {"repository": REPO, "attempt_id": gone, "reason": "leaked"})
    )
    memory.forget_attempt(
        caller, parse(ForgetInput, {"repository": REPO, "attempt_id": gone, "reason": "secret"})
    )
    assert [t.attempt.attempt_id for t in search(memory, caller, "shared words hunter2")] == [keep]
    sql = memory.recall(caller, parse(RecallInput, {"sql": "select attempt_id from attempts"})).rows
    assert sql == [[keep]]
    assert memory.recall(caller, parse(RecallInput, {"sql": "select * from corrections"})).rows == []
    with pytest.raises(NotFound):
        memory.recall(caller, parse(RecallInput, {"repository": REPO, "task_id": "T-gone"}))
    raw = b"".join(body or b"" for _, body in memory.store.iter_ledger())
    assert b"hunter2" not in raw
    assert memory.verify_integrity(caller).chains[0].bodies_erased == 2


def test_forgetting_twice_or_correcting_a_forgotten_attempt_is_a_conflict(
    memory: Memory, caller: Caller
) -> None:
    aid = record(memory, caller)
    memory.forget_attempt(caller, parse(ForgetInput, {"repository": REPO, "attempt_id": aid}))
    before = ledger(memory)
    with pytest.raises(Conflict):
        memory.forget_attempt(caller, parse(ForgetInput, {"repository": REPO, "attempt_id": aid}))
    with pytest.raises(Conflict):
        memory.mark_conclusion_outdated(
            caller, parse(MarkOutdatedInput, {"repository": REPO, "attempt_id": aid, "reason": "x"})
        )
    assert ledger(memory) == before


def test_an_attempt_is_not_found_through_another_repository(memory: Memory, caller: Caller) -> None:
    aid = record(memory, caller)
    with pytest.raises(NotFound):
        memory.forget_attempt(
            caller, parse(ForgetInput, {"repository": "github.com/other/x", "attempt_id": aid})
        )


def test_repository_filter_limits_search(memory: Memory, caller: Caller) -> None:
    record(memory, caller, repository="github.com/a/one", observation="cache stampede")
    record(memory, caller, repository="github.com/a/two", observation="cache stampede")
    tasks = search(memory, caller, "cache stampede", repository="github.com/a/two")
    assert [t.repository for t in tasks] == ["github.com/a/two"]


def test_stale_files_are_the_paths_whose_hashes_changed(memory: Memory, caller: Caller) -> None:
    record(
        memory,
        caller,
        code_context={"commit": "abc1234", "file_hashes": {"a.py": "1111", "b.py": "2222"}},
    )
    (task,) = search(memory, caller, "it broke", current_file_hashes={"a.py": "1111", "b.py": "3333"})
    assert task.attempt.stale_files == ["b.py"]
    (task,) = search(memory, caller, "it broke")
    assert task.attempt.stale_files is None


def test_a_scoped_caller_sees_only_its_repositories(memory: Memory, caller: Caller) -> None:
    record(memory, caller, repository="github.com/acme/one", observation="deadlock in worker")
    record(memory, caller, repository="github.com/other/two", observation="deadlock in worker")
    scoped = Caller(agent_id="scoped", repositories=("github.com/acme/*",))
    assert [t.repository for t in search(memory, scoped, "deadlock worker")] == ["github.com/acme/one"]
    rows = memory.recall(scoped, parse(RecallInput, {"sql": "select distinct repository from attempts"})).rows
    assert rows == [["github.com/acme/one"]]
    with pytest.raises(Forbidden):
        record(memory, scoped, repository="github.com/other/two")
    reader = Caller(agent_id="reader", can_write=False)
    with pytest.raises(Forbidden):
        record(memory, reader)


class BrokenEmbedder:
    model_id = HashEmbedder().model_id
    dim = 384

    def __init__(self, vectors: Any) -> None:
        self.vectors = vectors

    def embed(self, texts: Sequence[str]) -> Any:
        if isinstance(self.vectors, Exception):
            raise self.vectors
        return self.vectors


@pytest.mark.parametrize(
    "vectors",
    [
        np.ones((1, 383), dtype=np.float32),
        np.full((1, 384), np.nan, dtype=np.float32),
        np.full((1, 384), np.inf, dtype=np.float32),
        np.ones((2, 384), dtype=np.float32),
        [[0.0] * 384],
        EmbeddingError("model crashed"),
    ],
    ids=["short", "nan", "inf", "two-rows", "not-an-array", "raises"],
)
def test_a_bad_embedding_writes_nothing(settings: Settings, caller: Caller, vectors: Any) -> None:
    good = Memory.open(settings, HashEmbedder())
    record(good, caller)
    before = ledger(good)
    good.close()
    bad = Memory.open(settings, BrokenEmbedder(vectors))  # type: ignore[arg-type]
    with pytest.raises(EmbeddingError):
        record(bad, caller)
    assert ledger(bad) == before
    assert bad.store.counts()["attempts"] == 1
    bad.close()


def test_a_store_embedded_with_another_model_is_refused(settings: Settings) -> None:
    Memory.open(settings, HashEmbedder()).close()

    class Other(HashEmbedder):
        model_id = "another-model"

    other = Other()
    other.model_id = "another-model"
    with pytest.raises(Exception, match="was embedded with 'mentis-hash-384'"):
        Memory.open(settings, other)


def test_the_store_lives_under_mentis_home_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MENTIS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MENTIS_DB", raising=False)
    assert Settings.from_env().db_path == tmp_path / "home" / "mentis.db"


def test_reindex_re_embeds_a_store_for_a_new_model(settings: Settings, caller: Caller) -> None:
    old = Memory.open(settings, HashEmbedder())
    record(old, caller, task_id="T-cache", observation="cache stampede under load")
    record(old, caller, task_id="T-css", observation="navbar overflow")
    before = ledger(old)
    old.close()

    class Smaller(HashEmbedder):
        pass

    new_model = Smaller(dim=64)
    with pytest.raises(Exception, match="mentis reindex"):
        Memory.open(settings, new_model)
    memory = Memory.open(settings, new_model, check_model=False)
    assert memory.reindex() == 2
    memory.close()
    reopened = Memory.open(settings, new_model)
    assert reopened.store.get_meta("embed_model") == "mentis-hash-64"
    assert search(reopened, caller, "cache stampede")[0].task_id == "T-cache"
    assert ledger(reopened) == before
    reopened.close()


def test_a_stored_secret_is_kept_but_the_reply_warns_without_repeating_it(
    memory: Memory, caller: Caller
) -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    reply = memory.record_attempt(
        caller,
        parse(
            RecordAttemptInput,
            {
                "repository": REPO,
                "task_id": "T",
                "action": "set GITHUB_TOKEN",
                "observation": f"used {token}",
            },
        ),
    )
    (warning,) = reply.warnings
    assert "secret" in warning and "forget_attempt" in warning
    assert token not in warning
    assert (
        memory.record_attempt(
            caller,
            parse(
                RecordAttemptInput,
                {"repository": REPO, "task_id": "T", "action": "a", "observation": "no secrets here"},
            ),
        ).warnings
        == []
    )
