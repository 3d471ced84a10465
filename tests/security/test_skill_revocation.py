# ruff: noqa: F811  (fixtures imported from tests.security.stores are parameters here)
"""Finding 10 of security issue 24: a revocation follows the instructions, not the file.

The review revoked a skill, then uploaded the same instructions under another id with a changed
``name:`` line, or with one more newline: the copy was active with no warning and
``search_skills`` returned it, because revocations were keyed on the hash of the whole text.

Now a revocation is also keyed on the instructions (the body without front matter, its runs of
whitespace made one space): in the revoking repository a copy is stored revoked (like a re-upload
under the revoked id) with a warning, and a copy that existed before is revoked with it; a copy
in another repository is flagged, to callers who may read the revoking one. Existing stores get
the new derived rows when they open (SQLite schema 6, PostgreSQL migration 10).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from mentis.api import skill_text
from mentis.api.common import parse
from mentis.api.skills import (
    DeleteSkillInput,
    ListSkillsInput,
    ReadSkillInput,
    RevokeSkillInput,
    SearchSkillsInput,
    UploadSkillInput,
)
from mentis.config import Settings
from mentis.ledger.bodies import SkillStatusBody
from mentis.service.memory import Caller, Memory
from mentis.store.postgres import schema as postgres_schema
from mentis.store.seal import Seal
from mentis.store.sqlite import store as sqlite
from tests.conformance.conftest import run_sql
from tests.security.stores import ADMIN, settings  # noqa: F401

REPO, OTHER, THIRD = "team-a/shop", "team-b/billing", "team-c/web"
BODY = "# Clean the build\n\n1. Run `rm -rf ~/.cache/shop` to clear stale wheels.\n2. Run `make build`.\n"
REASON = "rm -rf on the home cache deletes other projects' caches"


def skill_md(name: str, body: str = BODY, description: str = "How to clean the build") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}"


def upload(m: Memory, content: str, repository: str = REPO, caller: Caller = ADMIN, **fields: Any) -> Any:
    data = {"repository": repository, "content": content, **fields}
    return m.upload_skill(caller, parse(UploadSkillInput, data))


def revoke(m: Memory, skill_id: str, repository: str = REPO) -> Any:
    data = {"repository": repository, "skill_id": skill_id, "reason": REASON}
    return m.revoke_skill(ADMIN, parse(RevokeSkillInput, data))


def read(m: Memory, skill_id: str, repository: str = REPO, caller: Caller = ADMIN) -> Any:
    return m.read_skill(caller, parse(ReadSkillInput, {"repository": repository, "skill_id": skill_id}))


def searched(m: Memory, repository: str = REPO) -> list[str]:
    query = {"query": "clean the build cache", "repository": repository, "include_deprecated": True}
    return [s.skill.skill_id for s in m.search_skills(ADMIN, parse(SearchSkillsInput, query)).skills]


def statuses(m: Memory) -> list[tuple[str, str, str]]:
    every = {"statuses": ["active", "deprecated", "revoked"]}
    return [
        (s.repository, s.skill_id, s.status)
        for s in m.list_skills(ADMIN, parse(ListSkillsInput, every)).skills
    ]


@pytest.fixture
def memory(open_memory: Callable[[], Memory]) -> Memory:
    m = open_memory()
    upload(m, skill_md("clean-build"))
    revoke(m, "clean-build")
    return m


COPIES = {
    "renamed": skill_md("tidy-build"),
    "one more newline": skill_md("tidy-build", BODY + "\n"),
    "reflowed": skill_md("tidy-build", BODY.replace("\n", "\r\n").replace(". ", ".  \t")),
    "new description": skill_md("tidy-build", description="Tidy up before a release"),
    "as json": orjson.dumps({"name": "tidy-build", "description": "Tidy", "body": "  " + BODY}).decode(),
}


@pytest.mark.parametrize("variant", sorted(COPIES))
def test_a_revoked_skills_instructions_under_another_id_are_stored_revoked_and_never_searched(
    memory: Memory, variant: str
) -> None:
    done = upload(memory, COPIES[variant])

    assert (done.skill_id, done.status) == ("tidy-build", "revoked")
    (warning,) = [w for w in done.warnings if "clean-build" in w]
    assert "instructions" in warning and REASON in warning
    assert searched(memory) == []
    got = read(memory, "tidy-build")
    assert got.skill.status == "revoked"
    assert any(w.startswith("REVOKED:") and "clean-build" in w and REASON in w for w in got.warnings)


def test_a_copy_uploaded_before_the_revocation_is_revoked_with_it(open_memory: Callable[[], Memory]) -> None:
    m = open_memory()
    upload(m, skill_md("clean-build"))
    upload(m, COPIES["renamed"])
    upload(m, skill_md("release", "Tag the commit and upload the wheel.\n"))
    assert sorted(searched(m)) == ["clean-build", "release", "tidy-build"]

    revoke(m, "clean-build")

    assert searched(m) == ["release"]
    assert statuses(m) == [
        (REPO, "clean-build", "revoked"),
        (REPO, "release", "active"),
        (REPO, "tidy-build", "revoked"),
    ]


def test_a_new_version_with_other_instructions_is_active_again(memory: Memory) -> None:
    upload(memory, COPIES["renamed"])
    fixed = upload(memory, skill_md("tidy-build", BODY.replace("~/.cache/shop", "./build")))
    assert (fixed.version, fixed.status) == (2, "active")
    assert not any("revoked" in w for w in fixed.warnings)
    assert searched(memory) == ["tidy-build"]


def test_other_instructions_and_blank_bodies_are_not_caught(memory: Memory) -> None:
    upload(memory, skill_md("describe-only", ""))
    revoke(memory, "describe-only")
    assert skill_text.instructions_hash("  \n\t") is None
    other_blank = upload(memory, skill_md("also-blank", "\n\n", description="Something else entirely"))
    case_differs = upload(memory, skill_md("shouting", BODY.upper()))  # commands are case-sensitive
    assert (other_blank.status, case_differs.status) == ("active", "active")
    assert not any("revoked" in w for w in other_blank.warnings + case_differs.warnings)


def test_a_copy_in_another_repository_is_flagged_to_callers_who_see_the_revocation_only(
    memory: Memory,
) -> None:
    team_b = Caller(agent_id="b", repositories=(OTHER,))
    both = Caller(agent_id="ab", repositories=(REPO, OTHER))

    unseen = upload(memory, COPIES["renamed"], OTHER, team_b)
    seen = upload(memory, COPIES["one more newline"], THIRD, ADMIN)

    assert (unseen.status, seen.status) == ("active", "active")
    assert not any("revoked" in w or REPO in w for w in unseen.warnings)
    (warning,) = [w for w in seen.warnings if "clean-build" in w]
    assert REPO in warning and REASON in warning and "another repository" in warning
    assert not any("revoked" in w for w in read(memory, "tidy-build", OTHER, team_b).warnings)
    flagged = read(memory, "tidy-build", OTHER, both).warnings
    assert any("clean-build" in w and REPO in w and REASON in w for w in flagged)


def test_rebuild_and_reopen_give_the_same_statuses_searches_and_warnings(
    memory: Memory, open_memory: Callable[[], Memory]
) -> None:
    upload(memory, COPIES["renamed"])
    upload(memory, COPIES["renamed"], THIRD)
    upload(memory, skill_md("release", "Tag the commit.\n"))
    revoke(memory, "release")
    memory.delete_skill(ADMIN, parse(DeleteSkillInput, {"repository": REPO, "skill_id": "clean-build"}))

    def answers(m: Memory) -> Any:
        return (
            statuses(m),
            searched(m),
            searched(m, THIRD),
            read(m, "tidy-build").warnings,
            read(m, "tidy-build", THIRD).warnings,
        )

    before = answers(memory)
    assert before[0][:2] == [(REPO, "release", "revoked"), (REPO, "tidy-build", "revoked")]
    memory.rebuild()
    assert answers(memory) == before
    assert answers(open_memory()) == before


# ---------------------------------------------------------------- a store from before


def downgrade_to_before_instructions(settings: Settings, memory: Memory) -> None:
    """Make the store what the previous Mentis left: no instruction tables, a revocation body
    without ``instructions_hashes`` and the copy's status as the content-hash rule derived it."""
    memory.close()
    sqlite = not settings.uses_postgres
    for table in ("skill_instructions", "skill_revoked_instructions"):
        run_sql(settings, f"DROP TABLE {table}")
    run_sql(settings, "UPDATE skill_idx SET status = 'active' WHERE skill_id = 'tidy-build'")
    run_sql(settings, f"UPDATE meta SET value = '{4 if sqlite else 8}' WHERE key = 'schema_version'")


def test_a_store_written_before_the_instructions_key_gets_it_when_it_opens(
    settings: Settings, open_memory: Callable[[], Memory]
) -> None:
    m = open_memory()
    upload(m, skill_md("clean-build"))
    upload(m, COPIES["renamed"])
    # the previous Mentis wrote revocations without instruction hashes
    history = m.store.skill_history(REPO, "clean-build")
    entry, version = history[-1]
    body = SkillStatusBody(
        repository=REPO,
        skill_id="clean-build",
        op="revoke",
        version_id=entry.id,
        version=version.version,
        content_hashes=[version.content_hash],
        agent_id="operator",
        at="2026-01-01T00:00:00.000000Z",
        reason=REASON,
    )
    m.store.append_skill_status(body, Seal(id="status-1"))
    downgrade_to_before_instructions(settings, m)

    upgraded = open_memory()

    assert searched(upgraded) == []
    assert [s for s in statuses(upgraded) if s[1] == "tidy-build"] == [(REPO, "tidy-build", "revoked")]
    version_row = run_sql(settings, "SELECT value FROM meta WHERE key = 'schema_version'")
    newest = postgres_schema.SCHEMA_VERSION if settings.uses_postgres else sqlite.SCHEMA_VERSION
    assert int(str(version_row[0][0])) == newest  # the derived rows' checksums came after
    assert upload(upgraded, COPIES["one more newline"], skill_id="third-copy").status == "revoked"
    before = statuses(upgraded)
    upgraded.rebuild()
    assert statuses(upgraded) == before
