"""Finding 5 of security issue 10: store files are private, and forgotten text leaves the disk.

A new store's directory is 0700 and its ``mentis.db``, ``-wal`` and ``-shm`` 0600 whatever the
umask; an existing store open to group or others is reported on stderr. After ``forget_attempt``
and ``forget_thought`` no byte of the erased text is left in the database, its WAL or its shared
memory file, nor in an export, nor in a later attempt that re-asserted the forgotten conclusion.
"""

from __future__ import annotations

import io
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput, ForgetThoughtInput
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore

REPO = "team-b/secret"
CALLER = Caller(agent_id="agent")
OBSERVATION = b"qwzx-observation-marker"
REASON = b"qwzx-reason-marker"
THOUGHT = b"qwzx-thought-marker"
TAG = b"qwzx-tag-marker"
WINDOW = b"qwzxwindowzq"  # one word: its stem is held by the thought's lexical row and two windows
MARKERS = (OBSERVATION, REASON, THOUGHT, TAG, WINDOW)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def _open(path: Path) -> Memory:
    return Memory.open(Settings(home=path.parent, db_path=path, embedder="hash"), HashEmbedder())


def on_disk(path: Path) -> dict[str, list[bytes]]:
    """Which markers each store file holds, read as raw bytes."""
    out = {}
    for suffix in ("", "-wal", "-shm"):
        f = Path(str(path) + suffix)
        data = f.read_bytes() if f.exists() else b""
        out[f.name] = [m for m in MARKERS if m in data]
    return out


def test_a_new_store_is_private_whatever_the_umask(tmp_path: Path, loose_umask: None) -> None:
    path = tmp_path / "new" / "deeper" / "mentis.db"
    m = _open(path)
    try:
        m.record_attempt(CALLER, parse(RecordAttemptInput, {"repository": REPO, "task_id": "T", "action": "a",
                                                              "observation": "o"}))  # fmt: skip
        files = {p.name: mode(p) for p in path.parent.iterdir()}
        assert files == {"mentis.db": 0o600, "mentis.db-wal": 0o600, "mentis.db-shm": 0o600}
        assert (mode(path.parent), mode(path.parent.parent)) == (0o700, 0o700)
    finally:
        m.close()
    tokens = tmp_path / "tokens" / "mentis.db"
    TokenStore(tokens).close()  # `mentis token create` may be the first to create the file
    assert mode(tokens) == 0o600 and mode(tokens.parent) == 0o700


def test_an_existing_store_open_to_others_is_reported_on_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store" / "mentis.db"
    _open(path).close()
    with caplog.at_level(logging.WARNING, logger="mentis.store.shared.files"):
        _open(path).close()
    assert caplog.records == []
    os.chmod(path, 0o644)
    os.chmod(path.parent, 0o755)
    with caplog.at_level(logging.WARNING, logger="mentis.store.shared.files"):
        _open(path).close()
    named = sorted(r.getMessage().split(" is open")[0] for r in caplog.records)
    assert named == [str(path.parent), str(path)]
    assert mode(path) == 0o644  # reported, not changed behind the owner's back


def test_forgotten_text_is_gone_from_the_files_the_export_and_later_reassertions(tmp_path: Path) -> None:
    path = tmp_path / "store" / "mentis.db"
    m = _open(path)
    try:

        def attempt(observation: str) -> str:
            req = {"repository": REPO, "task_id": "T", "action": "ran the suite", "observation": observation,
                   "inference": "the flaky test is caused by the shared cache"}  # fmt: skip
            return m.record_attempt(CALLER, parse(RecordAttemptInput, req)).attempt_id

        first = attempt(f"the log showed {OBSERVATION.decode()}")
        m.mark_conclusion_outdated(CALLER, parse(MarkOutdatedInput, {
            "repository": REPO, "attempt_id": first, "reason": f"wrong: see {REASON.decode()}"}))  # fmt: skip
        later = m.record_attempt(CALLER, parse(RecordAttemptInput, {
            "repository": REPO, "task_id": "T2", "action": "looked again", "observation": "same failure",
            "inference": "the flaky test is caused by the shared cache"}))  # fmt: skip
        assert REASON.decode() in later.reasserts[0].reason  # the reply names why it was rejected

        def said(content: str, **more: object) -> str:
            req = {"repository": REPO, "type": "Finding", "content": content, "session_id": "s-1", **more}
            return m.append_thought(CALLER, parse(AppendThoughtInput, req)).thought_id

        # in a session between two other turns: its text is in its own window and the next one's
        said("what did the vault say")
        thought = said(f"the token is {THOUGHT.decode()} {WINDOW.decode()}", tags=[TAG.decode()])
        said("thanks, noted")
        before = on_disk(path)
        assert set().union(*before.values()) == set(MARKERS)  # the test can see them
        m.forget_attempt(CALLER, parse(ForgetInput, {"repository": REPO, "attempt_id": first}))
        m.forget_thought(CALLER, parse(ForgetThoughtInput, {"repository": REPO, "thought_id": thought}))
        assert on_disk(path) == {"mentis.db": [], "mentis.db-wal": [], "mentis.db-shm": []}
        out = io.BytesIO()
        m.export(CALLER, out)
        assert [mark for mark in MARKERS if mark in out.getvalue()] == []
        found = m.search(
            CALLER, parse(SearchInput, {"query": "looked again same failure", "repository": REPO})
        )
        (task,) = [t for t in found.tasks if t.task_id == "T2"]
        assert [(r.rejected_id, r.reason) for r in task.attempt.reasserts] == [(first, "")]
    finally:
        m.close()
    assert on_disk(path) == {"mentis.db": [], "mentis.db-wal": [], "mentis.db-shm": []}


def test_a_forget_waits_boundedly_for_an_old_reader_and_erases_after_the_next_write(tmp_path: Path) -> None:
    """A TRUNCATE checkpoint must wait for connections reading an older snapshot. A reader that
    outlasts the wait must not hold the forget (and this process's store lock) for the 30 s busy
    timeout: the forget returns, and the erasure is completed after the next write."""
    import sqlite3
    import time

    from mentis.store.sqlite import connection as sqlite_base

    path = tmp_path / "mentis.db"
    memory = _open(path)
    try:
        first = memory.record_attempt(
            CALLER,
            parse(
                RecordAttemptInput,
                {"repository": REPO, "task_id": "T", "action": "ran it", "observation": OBSERVATION.decode()},
            ),
        )
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM entries").fetchone()  # holds the snapshot before the forget
        started = time.monotonic()
        memory.forget_attempt(
            CALLER, parse(ForgetInput, {"repository": REPO, "attempt_id": first.attempt_id})
        )
        waited = time.monotonic() - started
        assert waited < sqlite_base.BUSY_TIMEOUT_MS / 1000 / 2, "the forget waited out the whole busy timeout"
        assert memory.store._file.erase_pending  # type: ignore[attr-defined]
        reader.execute("COMMIT")
        reader.close()
        memory.record_attempt(
            CALLER,
            parse(
                RecordAttemptInput, {"repository": REPO, "task_id": "T2", "action": "a", "observation": "b"}
            ),
        )
        assert not memory.store._file.erase_pending  # type: ignore[attr-defined]
        assert all(OBSERVATION not in found for found in on_disk(path).values())
    finally:
        memory.close()
