"""Drill: random single-byte edits anywhere in a closed SQLite database file.

A store with attempts (checks, inferences, files, tags, titles), corrections, a forgotten attempt,
thoughts with relations and refs is built and closed (the WAL is checkpointed into the file). Each
trial copies the file, overwrites one byte at a uniformly random offset with a different random
value, and opens the copy. The outcome is one of:

- ``refused_open``: opening (which verifies every chain) raised a Mentis error;
- ``refused_read``: it opened, but a read raised an integrity or store error naming the damage
  (content is checked against its hash when read); any other error (say, "no such task") is a
  wrong answer, not a refusal;
- ``harmless``: every read (searches, recalls over every view, task histories, thought searches,
  gets, traversals, bundles, recent context, verify) returns exactly what the untouched store
  returns: the byte sat in free space, slack, or a row no read of the plan uses;
- ``scores_only``: the same records with the same content, but a score, an order or which records
  made a ranked list changed: the byte sat in a derived row nothing checks (an attempt or thought
  label, whose graph weights only rank) or in one of SQLite's own indexes over a derived table.
  Content is never affected; this is reported;
- ``known_gap``: a read answered differently (or failed with something other than a Mentis error)
  after an edit of a page of one of SQLite's own indexes over a derived table (an index b-tree
  that only ``PRAGMA integrity_check`` compares with its table) or of a derived table a recall view
  reads its scope from; the report names the tables. Vectors, lexical rows and stems carry
  checksums, relation edges are checked against their thoughts' bodies and open compares the
  schema (issue 24): the three tests at the end pin those;
- ``different`` (a failure): a read returned content that differs from what was written, after an
  edit of a page of the ledger itself (entries, bodies, heads, meta);
- ``unclear`` (a failure): something other than a Mentis error escaped after such an edit.

Which table or index a page belongs to comes from SQLite's ``dbstat`` table on the untouched file.

The split is printed and written to ``build/drills/tamper.json``.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import sqlite3
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecallInput, RecordAttemptInput, SearchInput
from mentis.api.thoughts import (
    AppendThoughtInput,
    ContextBundleInput,
    GetThoughtInput,
    RecentContextInput,
    Relation,
    SearchThoughtsInput,
    ThoughtFilters,
    TraverseInput,
)
from mentis.api.verify import VerifyInput
from mentis.config import Settings
from mentis.errors import IntegrityError, MentisError, StoreError
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.service.operations import OPERATIONS

from .scale import REPORTS, SIZES

pytestmark = pytest.mark.drill

A = "github.com/acme/shop"
B = "github.com/acme/api"
CALLER = Caller(agent_id="tamper-drill")
SEED = int(os.environ.get("MENTIS_DRILL_SEED", "1515"))
SHA = "1234567890abcdef1234567890abcdef12345678"
CALLS = {op.name: op for op in OPERATIONS}
KINDS = ("refused_open", "refused_read", "harmless", "scores_only", "known_gap", "different", "unclear")
# The ledger's own tables: what the hash chain covers. Anything else is derived (or SQLite's schema).
LEDGER_TABLES = ("entries", "bodies", "heads", "meta", "sqlite_autoindex_entries", "sqlite_autoindex_heads",
                 "sqlite_autoindex_meta")  # fmt: skip


def page_owners(path: Path) -> dict[int, str]:
    """Page number (1-based) -> the table or index that owns it; free pages are absent."""
    con = sqlite3.connect(path)
    try:
        return {int(page): str(name) for name, page in con.execute("SELECT name, pageno FROM dbstat")}
    finally:
        con.close()


def settings_for(path: Path) -> Settings:
    return Settings(home=path.parent, db_path=path, embedder="hash")


def build(path: Path) -> dict[str, list[str]]:
    """The store the edits land in; returns the ids the reads ask for."""
    m = Memory.open(settings_for(path), HashEmbedder())
    attempts: list[str] = []
    thoughts: list[str] = []
    try:
        for i in range(24):
            repo = (A, B)[i % 2]
            req = RecordAttemptInput(
                repository=repo,
                task_id=("checkout", "login", "cache", "deploy")[i // 2 % 4],
                task_title=f"Task title {i % 4}" if i < 4 else None,
                action=f"attempt {i}: rerun the flaky checkout test with seed {i}",
                observation=f"observation {i}: the cache lookup took {i * 7} ms",
                inference=f"inference {i}: the seed matters" if i % 3 == 0 else None,
                files=[f"src/mod{i % 5}.py", "tests/test_checkout.py"],
                tags=[f"tag{i % 3}"],
                check={"command": "pytest -q", "status": ("passed", "failed")[i % 2], "exit_code": i % 2}
                if i % 4
                else None,
                code_context={"commit": SHA, "branch": "main", "file_hashes": {f"src/mod{i % 5}.py": SHA}},
            )
            attempts.append(m.record_attempt(CALLER, req).attempt_id)
        for i in (0, 2, 4):
            m.mark_conclusion_outdated(
                CALLER,
                MarkOutdatedInput(repository=A, attempt_id=attempts[i], reason=f"stale since change {i}"),
            )
        m.forget_attempt(CALLER, ForgetInput(repository=A, attempt_id=attempts[4], reason="held a secret"))
        types = ("Decision", "Finding", "Constraint", "LessonLearned", "Hypothesis", "Plan")
        for i in range(12):
            relations = []
            if i >= 2 and i % 3 == 2:
                relations.append(Relation(kind="Supersedes", target_id=thoughts[i - 2]))
            if i >= 2 and i % 3 == 1:
                relations.append(Relation(kind="Supports", target_id=thoughts[i - 2]))
            done = m.append_thought(
                CALLER,
                AppendThoughtInput(
                    repository=(A, B)[i % 2],
                    type=types[i % len(types)],
                    content=f"thought {i}: the checkout service needs a pool of {10 + i} connections",
                    importance=f"0.{i % 9 + 1}",
                    tags=[f"tag{i % 3}"],
                    concepts=[f"concept{i % 4}"],
                    refs=[attempts[i + 2]] if i % 4 == 0 else [],
                    relations=relations,
                    task_id="checkout" if i % 2 else None,
                ),
            )
            thoughts.append(done.thought_id)
    finally:
        m.close()
    return {"attempts": attempts, "thoughts": thoughts}


def reads(ids: dict[str, list[str]]) -> list[tuple[str, BaseModel]]:
    """Every read the drill compares, as (operation name, input)."""
    out: list[tuple[str, BaseModel]] = [("verify_integrity", VerifyInput())]
    for q in ("flaky checkout test seed", "cache lookup ms", "inference seed matters", "attempt 7", "pool"):
        out.append(("search", SearchInput(query=q, limit=50)))
        out.append(("search", SearchInput(query=q, repository=B, limit=5)))
        out.append(("search_thoughts", SearchThoughtsInput(query=q, limit=50)))
        out.append(("search_thoughts", SearchThoughtsInput(query=q, include_invalidated=True, limit=50)))
        out.append(("context_bundle", ContextBundleInput(query=q)))
    out.append(("search_thoughts", SearchThoughtsInput(filters=ThoughtFilters(tags=["tag1"]), limit=50)))
    for view, key in (
        ("attempts", "attempt_id"),
        ("corrections", "at"),
        ("tasks", "repository, task_id"),
        ("thoughts", "thought_id"),
        ("relations", "from_id, kind, to_id"),
    ):
        out.append(("recall", RecallInput(sql=f"SELECT * FROM {view} ORDER BY {key}")))
    for repo in (A, B):
        for task in ("checkout", "login", "cache", "deploy"):
            out.append(("recall", RecallInput(repository=repo, task_id=task)))
        out.append(("recent_context", RecentContextInput(repository=repo, limit=50)))
    for tid in ids["thoughts"]:
        out.append(("get_thought", GetThoughtInput(thought_id=tid)))
        out.append(("traverse_thoughts", TraverseInput(thought_id=tid)))
    return out


def answers(memory: Memory, plan: list[tuple[str, BaseModel]]) -> list[Any]:
    """The answers, without the ``as_of`` a thought search echoes (the time it ran)."""
    out = []
    for name, req in plan:
        answer = CALLS[name].call(memory, CALLER, req).model_dump(mode="json")
        answer.pop("as_of", None)
        out.append(answer)
    return out


# What ranks records rather than what they hold.
SCORE_KEYS = {"score", "score_parts", "ranking", "matched_attempt_ids"}
IDENTITY = ("attempt_id", "thought_id", "task_id")


def records(answer: Any, found: set[str]) -> set[str]:
    """Every record an answer holds (a dict with an identity key), scores and nested records left
    out, as canonical JSON: the content, whatever the ranking."""
    if isinstance(answer, list):
        for item in answer:
            records(item, found)
    elif isinstance(answer, dict):
        own = {}
        for key, value in answer.items():
            if key in SCORE_KEYS:
                continue
            records(value, found)
            nested = isinstance(value, dict) and any(k in value for k in IDENTITY)
            nested = nested or (isinstance(value, list) and any(isinstance(v, dict) for v in value))
            if not nested:
                own[key] = value
        if any(k in answer for k in IDENTITY):
            found.add(json.dumps(own, sort_keys=True))
    return found


def compare(plan: list[tuple[str, BaseModel]], got: list[Any], expected: list[Any]) -> str:
    if got == expected:
        return "harmless"
    for (name, req), g, e in zip(plan, got, expected, strict=True):
        if g == e:
            continue
        if name not in ("search", "search_thoughts", "context_bundle"):
            return f"different: {name} {req!r}"  # not ranked: any change is content
        if not records(g, set()) <= records(expected, set()):
            return f"different: {name} {req!r} returned a record whose content was never written"
    return "scores_only"


def trial(template: Path, work: Path, offset: int, value: int, plan: list[Any], expected: list[Any]) -> str:
    copy = work / "trial.db"
    shutil.copyfile(template, copy)
    with copy.open("r+b") as fh:
        fh.seek(offset)
        fh.write(bytes([value]))
    try:
        memory = Memory.open(settings_for(copy), HashEmbedder())
    except MentisError as exc:
        return f"refused_open: {type(exc).__name__}"
    except Exception as exc:
        return f"unclear: open raised {type(exc).__name__}: {exc}"
    try:
        got = answers(memory, plan)
    except (IntegrityError, StoreError) as exc:
        return f"refused_read: {type(exc).__name__}"
    except MentisError as exc:  # e.g. NotFound for a task that is there: a wrong answer, not a refusal
        return f"different: a read raised {type(exc).__name__}: {exc}"
    except Exception as exc:
        return f"unclear: a read raised {type(exc).__name__}: {exc}"
    finally:
        memory.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
    return compare(plan, got, expected)


def test_random_byte_edits_are_refused_or_provably_harmless_never_silently_different(tmp_path: Path) -> None:
    template = tmp_path / "template.db"
    ids = build(template)
    assert not Path(f"{template}-wal").exists()
    original = template.read_bytes()
    plan = reads(ids)
    copy = tmp_path / "pristine.db"
    shutil.copyfile(template, copy)
    pristine = Memory.open(settings_for(copy), HashEmbedder())
    try:
        expected = answers(pristine, plan)
        assert answers(pristine, plan) == expected  # the reads are deterministic
    finally:
        pristine.close()
    assert template.read_bytes() == original

    owners = page_owners(template)
    page_size = 4096
    rng = random.Random(SEED)
    gaps: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    refusals: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    started = time.monotonic()
    for _ in range(SIZES.tamper_edits):
        offset = rng.randrange(len(original))
        value = rng.choice([v for v in range(256) if v != original[offset]])
        outcome = trial(template, tmp_path, offset, value, plan, expected)
        kind = outcome.split(":")[0]
        owner = owners.get(offset // page_size + 1, "free")
        if kind in ("different", "unclear") and owner not in LEDGER_TABLES:
            kind = "known_gap"
            gaps[owner] += 1
        outcomes[kind] += 1
        if kind.startswith("refused"):
            refusals[outcome.replace(": ", " by ")] += 1
        if kind in ("different", "unclear"):
            failures.append({"offset": offset, "owner": owner, "value": value, "outcome": outcome})

    report = {
        "edits": SIZES.tamper_edits,
        "scale": SIZES.name,
        "seed": SEED,
        "file_bytes": len(original),
        "split": {k: outcomes.get(k, 0) for k in KINDS},
        "refusals": dict(sorted(refusals.items())),
        "known_gaps_by_owner": dict(sorted(gaps.items())),
        "failures": failures,
        "seconds": round(time.monotonic() - started, 1),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, load average {os.getloadavg()[0]:.1f}",
    }
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / "tamper.json").write_text(json.dumps(report, indent=2) + "\n")
    sys.stderr.write(f"tamper drill: {json.dumps(report['split'])}\n")
    assert failures == [], json.dumps(failures[:10], indent=2)
    assert sum(outcomes.values()) == SIZES.tamper_edits


def test_the_comparison_tolerates_reordering_and_flags_changed_content(tmp_path: Path) -> None:
    ids = build(tmp_path / "mentis.db")
    plan = [("search", SearchInput(query="flaky checkout test seed", limit=50))]
    memory = Memory.open(settings_for(tmp_path / "mentis.db"), HashEmbedder())
    try:
        expected = answers(memory, plan)
    finally:
        memory.close()
    assert ids["attempts"] and len(expected[0]["tasks"]) > 1
    reordered = json.loads(json.dumps(expected))
    reordered[0]["tasks"].reverse()
    reordered[0]["tasks"][0]["score"] += 1
    assert compare(plan, reordered, expected) == "scores_only"
    changed = json.loads(json.dumps(expected))
    changed[0]["tasks"][-1]["attempt"]["observation"] += "!"
    assert compare(plan, changed, expected).startswith("different")
    retitled = json.loads(json.dumps(expected))
    retitled[0]["tasks"][0]["title"] = "another title"
    assert compare(plan, retitled, expected).startswith("different")


def test_an_edited_derived_index_row_is_refused_or_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "mentis.db"
    ids = build(path)
    plan = [(n, r) for n, r in reads(ids) if n == "search"]
    memory = Memory.open(settings_for(path), HashEmbedder())
    try:
        expected = answers(memory, plan)
    finally:
        memory.close()
    con = sqlite3.connect(path)
    try:
        # the first attempt's vector becomes the last one's: a valid-looking row, wrong for its body
        rows = con.execute("SELECT rowid, vec FROM vectors ORDER BY rowid").fetchall()
        con.execute("UPDATE vectors SET vec = ? WHERE rowid = ?", (rows[-1][1], rows[0][0]))
        con.commit()
    finally:
        con.close()
    try:
        memory = Memory.open(settings_for(path), HashEmbedder())
    except MentisError:
        return  # refused: what the drill accepts
    try:
        assert answers(memory, plan) == expected
    except MentisError:
        return
    finally:
        memory.close()


def test_a_schema_edit_that_garbles_sqlites_error_message_is_a_clear_store_error(tmp_path: Path) -> None:
    """Found by this drill: SQLite quoted the damaged schema bytes in its message, Python's sqlite3
    could not decode it, and a raw UnicodeDecodeError escaped from open."""
    path = tmp_path / "mentis.db"
    build(path)
    data = bytearray(path.read_bytes())
    at = data.find(b"CREATE TABLE lex_vocab(")
    comma = data.find(b",", at)
    assert 0 < at < comma
    data[comma] = 0x85  # not UTF-8, and SQLite's syntax error quotes it
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="damaged"):
        Memory.open(settings_for(path), HashEmbedder())


def test_an_edited_relation_edge_is_refused_or_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "mentis.db"
    ids = build(path)
    plan = [(n, r) for n, r in reads(ids) if n in ("get_thought", "traverse_thoughts")]
    memory = Memory.open(settings_for(path), HashEmbedder())
    try:
        expected = answers(memory, plan)
    finally:
        memory.close()
    con = sqlite3.connect(path)
    try:
        changed = con.execute("UPDATE thought_edge SET to_id = 'f' || substr(to_id, 2)").rowcount
        con.commit()
    finally:
        con.close()
    assert changed > 0
    try:
        memory = Memory.open(settings_for(path), HashEmbedder())
    except MentisError:
        return
    try:
        assert answers(memory, plan) == expected
    except MentisError:
        return
    finally:
        memory.close()


def test_a_schema_edit_that_still_parses_is_refused_or_harmless(tmp_path: Path) -> None:
    path = tmp_path / "mentis.db"
    ids = build(path)
    plan = [(n, r) for n, r in reads(ids) if n in ("search", "recall")]
    memory = Memory.open(settings_for(path), HashEmbedder())
    try:
        expected = answers(memory, plan)
    finally:
        memory.close()
    data = bytearray(path.read_bytes())
    at = data.find(b"CREATE TABLE correction_idx(rowid INTEGER PRIMARY KEY")
    assert at > 0
    data[data.find(b"INTEGER", at) + 1] = ord("X")  # "IXTEGER PRIMARY KEY": no longer the rowid
    path.write_bytes(bytes(data))
    try:
        memory = Memory.open(settings_for(path), HashEmbedder())
    except MentisError:
        return
    try:
        assert answers(memory, plan) == expected
    except MentisError:
        return
    finally:
        memory.close()
