# ruff: noqa: F811  (fixtures imported from tests.security.stores are parameters here)
"""Finding 1 of security issue 10: an import (or a tampered store) may not reach across chains.

An attacker allowed to write ``team-a/evil`` prepares that chain in a store of their own, exports
it, edits bodies to point into ``team-b/secret`` and hashes everything again so every hash
verifies. Each edit below worked before bodies had to stand in their own chain; now the import
is refused naming the chain and seq, the target store is byte-for-byte unchanged, and a store
holding such entries does not open.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.api.thoughts import AppendThoughtInput, GetThoughtInput, MemoryMdImportInput
from mentis.config import Settings
from mentis.errors import Conflict, IntegrityError, InvalidInput
from mentis.ledger.canonical import canonical
from mentis.ledger.entry import Entry
from mentis.service.memory import Caller, Memory
from mentis.store.sqlite import verify as sqlite_verify
from mentis.store.sqlite.store import _LEDGER_SCHEMA
from tests.security.stores import (  # noqa: F401 (fixtures)
    ADMIN,
    export_lines,
    reseal,
    scratch,
    settings,
    state,
)

EVIL, SECRET = "team-a/evil", "team-b/secret"
ATTACKER = Caller(agent_id="mallory", repositories=("team-a/*",))


def _attempt(m: Memory, repo: str, text: str) -> str:
    req = parse(
        RecordAttemptInput,
        {"repository": repo, "task_id": "T-1", "action": f"tried {text}", "observation": f"saw {text}"},
    )
    return m.record_attempt(ADMIN, req).attempt_id


def _thought(m: Memory, repo: str, text: str) -> str:
    req = parse(AppendThoughtInput, {"repository": repo, "type": "Finding", "content": text})
    return m.append_thought(ADMIN, req).thought_id


@pytest.fixture
def target(open_memory: Callable[[], Memory]) -> tuple[Memory, dict[str, str]]:
    """The victim store: team-b's attempt and thought."""
    m = open_memory()
    ids = {
        "attempt": _attempt(m, SECRET, "the staging password rotation"),
        "thought": _thought(m, SECRET, "the billing service keeps card tokens in redis"),
    }
    return m, ids


@pytest.fixture
def evil_lines(scratch: Memory) -> list[dict[str, Any]]:
    """team-a/evil, made honestly: attempt, its correction, a thought, and a forgotten attempt."""
    first = _attempt(scratch, EVIL, "a harmless change")
    scratch.mark_conclusion_outdated(
        ADMIN, parse(MarkOutdatedInput, {"repository": EVIL, "attempt_id": first, "reason": "stale"})
    )
    _thought(scratch, EVIL, "a harmless finding")
    second = _attempt(scratch, EVIL, "another harmless change")
    scratch.forget_attempt(ADMIN, parse(ForgetInput, {"repository": EVIL, "attempt_id": second}))
    return export_lines(scratch)


def _line(lines: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(line for line in lines if "entry" in line and line["entry"]["kind"] == kind)


def _file_thought_elsewhere(lines: list[dict[str, Any]], ids: dict[str, str]) -> int:
    line = _line(lines, "thought")
    line["body"].update(repository=SECRET, agent_id="bob-from-team-b")
    return int(line["entry"]["seq"])


def _relate(kind: str) -> Callable[[list[dict[str, Any]], dict[str, str]], int]:
    def edit(lines: list[dict[str, Any]], ids: dict[str, str]) -> int:
        line = _line(lines, "thought")
        line["body"]["relations"] = [{"kind": kind, "target_id": ids["thought"]}]
        return int(line["entry"]["seq"])

    return edit


def _ref_elsewhere(lines: list[dict[str, Any]], ids: dict[str, str]) -> int:
    line = _line(lines, "thought")
    line["body"]["refs"] = [ids["attempt"]]
    return int(line["entry"]["seq"])


def _correct_elsewhere(lines: list[dict[str, Any]], ids: dict[str, str]) -> int:
    line = _line(lines, "correction")
    line["body"]["attempt_id"] = ids["attempt"]
    return int(line["entry"]["seq"])


def _forget_elsewhere(lines: list[dict[str, Any]], ids: dict[str, str]) -> int:
    line = _line(lines, "forget")
    line["body"].update(repository=SECRET, attempt_id=ids["attempt"], erased=[])
    return int(line["entry"]["seq"])


def _forget_other_id(lines: list[dict[str, Any]], ids: dict[str, str]) -> int:
    line = _line(lines, "forget")
    line["body"].update(attempt_id=ids["attempt"], erased=[])
    return int(line["entry"]["seq"])


def _attempt_not_its_entry(lines: list[dict[str, Any]], ids: dict[str, str]) -> int:
    line = _line(lines, "attempt")
    line["body"]["attempt_id"] = "00000000-0000-4000-8000-000000000000"
    return int(line["entry"]["seq"])


def plant(memory: Memory, backend: str, lines: list[dict[str, Any]]) -> None:
    """Write the crafted entries and bodies straight into the store's ledger tables (no derive), as
    someone with the database file or credentials would."""
    rows = [orjson.loads(line) for line in reseal(lines)[1:]]
    items = [(Entry.from_json(r["entry"]), None if r["body"] is None else canonical(r["body"])) for r in rows]
    store: Any = memory.store
    with store._write(EVIL) if backend == "postgres" else store._write() as conn:
        for entry, body in items:
            store._insert(conn, entry, body)


ATTACKS = {
    "thought-filed-under-team-b": (_file_thought_elsewhere, "names repository 'team-b/secret'"),
    "invalidates-a-team-b-thought": (_relate("Invalidates"), "no earlier record of this chain"),
    "corrects-a-team-b-thought": (_relate("Corrects"), "no earlier record of this chain"),
    "refs-a-team-b-attempt": (_ref_elsewhere, "no earlier record of this chain"),
    "correction-of-a-team-b-attempt": (_correct_elsewhere, "no earlier record of this chain"),
    "forget-naming-team-b": (_forget_elsewhere, "names repository 'team-b/secret'"),
    "forget-of-a-team-b-attempt": (_forget_other_id, "no earlier record of this chain"),
    "attempt-body-not-its-entry": (_attempt_not_its_entry, "not its entry's id"),
}


def test_an_honest_export_resealed_the_same_way_imports(
    target: tuple[Memory, dict[str, str]], evil_lines: list[dict[str, Any]]
) -> None:
    """The control: resealing alone changes nothing, so each refusal below is the edit's."""
    memory, _ = target
    assert memory.import_(ATTACKER, reseal(evil_lines)) == len(evil_lines) - 1
    assert {r.chain for r in memory.store.verify()} == {EVIL, SECRET}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_crafted_import_is_refused_naming_chain_and_seq_and_writes_nothing(
    target: tuple[Memory, dict[str, str]],
    evil_lines: list[dict[str, Any]],
    open_memory: Callable[[], Memory],
    attack: str,
) -> None:
    memory, ids = target
    edit, why = ATTACKS[attack]
    seq = edit(evil_lines, ids)
    before = state(memory)
    with pytest.raises(IntegrityError) as raised:
        memory.import_(ADMIN, reseal(evil_lines))
    assert f"chain 'team-a/evil' seq {seq}: " in str(raised.value)
    assert why in str(raised.value)
    assert state(memory) == before
    reopened = open_memory()  # still verifies
    got = reopened.get_thought(ADMIN, parse(GetThoughtInput, {"thought_id": ids["thought"]}))
    assert got.invalidated_by == []
    found = reopened.search(ADMIN, parse(SearchInput, {"query": "staging password", "repository": SECRET}))
    assert [t.attempt.attempt_id for t in found.tasks] == [ids["attempt"]]
    assert found.tasks[0].attempt.correction is None


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_store_holding_crafted_entries_refuses_their_chain_at_open(
    target: tuple[Memory, dict[str, str]],
    evil_lines: list[dict[str, Any]],
    open_memory: Callable[[], Memory],
    backend: str,
    attack: str,
) -> None:
    """The rule is in verification itself: open (and so `mentis verify-integrity`, migrate) refuses
    the crafted chain, naming the entry, and serves the repository it aimed at."""
    memory, ids = target
    edit, why = ATTACKS[attack]
    seq = edit(evil_lines, ids)
    plant(memory, backend, evil_lines)
    opened = open_memory()
    assert set(opened.store.damaged) == {EVIL}
    assert re.search(rf"chain 'team-a/evil' seq {seq}: .*{why}", str(opened.store.damaged[EVIL]))
    with pytest.raises(IntegrityError, match=rf"chain 'team-a/evil' seq {seq}"):
        opened.store.verify()
    assert [c.chain for c in opened.verify_integrity(ADMIN, SECRET).chains] == [SECRET]
    if backend == "sqlite":
        conn = sqlite3.connect(memory.store.path, isolation_level=None)
        try:
            conn.execute("BEGIN")
            heads = {c: (s, h) for c, s, h in conn.execute("SELECT chain, seq, hash FROM heads")}
            assert sqlite_verify.verify_blocks(conn, memory.store.path, heads, _LEDGER_SCHEMA, 0) is None
        finally:
            conn.close()


def test_an_import_reusing_a_record_id_of_the_target_is_refused_and_writes_nothing(
    target: tuple[Memory, dict[str, str]], evil_lines: list[dict[str, Any]]
) -> None:
    memory, ids = target
    line = _line(evil_lines, "thought")
    line["entry"]["id"] = line["body"]["thought_id"] = ids["thought"]
    before = state(memory)
    with pytest.raises(Conflict, match=ids["thought"]):
        memory.import_(ADMIN, reseal(evil_lines))
    assert state(memory) == before


def test_memory_md_metadata_cannot_choose_the_repository(target: tuple[Memory, dict[str, str]]) -> None:
    memory, _ = target
    before = state(memory)
    markdown = '## Finding\n\n- planted <!-- mentis {"repository": "team-b/secret"} -->\n'
    with pytest.raises(InvalidInput, match="line 3: metadata may hold only"):
        memory.import_memory_md(
            ATTACKER, parse(MemoryMdImportInput, {"repository": EVIL, "markdown": markdown})
        )
    assert state(memory) == before


@pytest.mark.parametrize(
    "meta",
    [
        '{"refs": ["no-such-record"]}',
        '{"thought_id": "chosen"}',
        '{"relations": []}',
        '{"repository": "team-a/evil"}',
    ],
)
def test_one_rejected_memory_md_line_rejects_the_file_before_anything_is_written(
    target: tuple[Memory, dict[str, str]], meta: str
) -> None:
    memory, _ = target
    before = state(memory)
    markdown = f"## Finding\n\n- first, fine\n- second, fine\n- third <!-- mentis {meta} -->\n"
    with pytest.raises(InvalidInput, match="line 5"):
        memory.import_memory_md(
            ATTACKER, parse(MemoryMdImportInput, {"repository": EVIL, "markdown": markdown})
        )
    assert state(memory) == before


def test_memory_md_written_by_export_still_imports(target: tuple[Memory, dict[str, str]]) -> None:
    memory, _ = target
    markdown = (
        '## Decision\n\n- use redis <!-- mentis {"role": "Memory", "importance": "0.7", "confidence": "0.9", '
        '"tags": ["cache"], "concepts": ["redis"], "task_id": "T-9"} -->\n'
    )
    done = memory.import_memory_md(
        ATTACKER, parse(MemoryMdImportInput, {"repository": EVIL, "markdown": markdown})
    )
    assert done.imported == 1


def test_a_verify_worker_process_applies_the_body_rules(
    evil_lines: list[dict[str, Any]], tmp_path: Path
) -> None:
    """SQLite's parallel scan worker (``python -S -P -c ledger_scan.WORKER``) parses bodies as the reference
    does: a block holding a crafted body comes back failed, the block before it passes."""
    import marshal
    import os
    import subprocess

    import orjson

    from mentis.config import Settings
    from mentis.ledger.canonical import canonical
    from mentis.ledger.entry import KINDS, VERSION
    from mentis.store.sqlite import ledger_scan

    memory = Memory.open(Settings(home=tmp_path / "w", db_path=tmp_path / "w" / "m.db", embedder="hash"))
    ids = {"attempt": _attempt(memory, SECRET, "a change"), "thought": _thought(memory, SECRET, "a finding")}
    seq = _file_thought_elsewhere(evil_lines, ids)
    rows = [orjson.loads(line) for line in reseal(evil_lines)[1:]]
    store: Any = memory.store
    with store._write() as conn:
        placed = [
            store._insert(conn, Entry.from_json(r["entry"]), canonical(r["body"])) for r in rows if r["body"]
        ]
    crafted = placed[seq]
    read, write = os.pipe()
    os.write(write, ledger_scan.queue_item(1, crafted - 1) + ledger_scan.queue_item(crafted, crafted))
    os.close(write)
    uri = Path(memory.store.path).resolve().as_uri() + "?mode=ro"
    argv = ledger_scan.worker_argv(uri, read, VERSION, KINDS)
    done = subprocess.run(argv, pass_fds=(read,), capture_output=True, timeout=60, check=True)
    os.close(read)
    scans = marshal.loads(done.stdout)
    memory.close()
    assert scans[1] is not None and scans[crafted] is None


def test_mentis_verify_and_migrate_refuse_a_store_holding_a_crafted_entry(
    target: tuple[Memory, dict[str, str]],
    evil_lines: list[dict[str, Any]],
    settings: Settings,
    backend: str,
    tmp_path: Path,
) -> None:
    import os
    import subprocess
    import sys

    from mentis.providers.embed import HashEmbedder
    from mentis.service.migrate import migrate

    memory, ids = target
    seq = _forget_elsewhere(evil_lines, ids)
    plant(memory, backend, evil_lines)
    env = dict(os.environ, MENTIS_EMBEDDER="hash", MENTIS_HOME=str(tmp_path))
    if settings.database_url is not None:
        env["MENTIS_DATABASE_URL"] = settings.database_url
    else:
        env["MENTIS_DB"] = str(settings.db_path)
    run = subprocess.run(
        [sys.executable, "-m", "mentis", "verify"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 6 and f"chain 'team-a/evil' seq {seq}: " in run.stderr
    into = Settings(home=tmp_path / "to", db_path=tmp_path / "to" / "m.db", embedder="hash")
    with pytest.raises(IntegrityError, match=f"chain 'team-a/evil' seq {seq}: "):
        migrate(settings, into, HashEmbedder())
    empty = Memory.open(into, HashEmbedder())
    assert empty.store.repositories() == []
    empty.close()
