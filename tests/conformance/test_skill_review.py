"""``review_skill`` (the dashboard's skill page) on both stores: every version's text, the diff
from the version before, who wrote it and whether its signature verifies, with real Ed25519 keys;
a signature changed in the database behind Mentis's back reads as ``invalid``; scope applies."""

from __future__ import annotations

import pytest

from mentis.api.common import parse
from mentis.api.skill_text import apply_diff
from mentis.api.skills import SkillVersionsInput
from mentis.config import Settings
from mentis.errors import Forbidden, NotFound
from mentis.ledger import signing
from mentis.service.memory import Caller, Memory
from mentis.store.seal import Seal
from tests.conformance.conftest import run_sql
from tests.conformance.test_signing import ADMIN, ALICE, add_key, register
from tests.conformance.test_skills import REPO, skill_md, upload

BOB = Caller(agent_id="bob")
REF = {"repository": REPO, "skill_id": "run-tests"}
TEXTS = [
    skill_md("run-tests", "Run the test suite", "1. Run `make test`.\n"),
    skill_md("run-tests", "Run the test suite", "1. Run `make test`.\n2. Read the first failure.\n"),
    skill_md("run-tests", "Run the test suite", "1. Run `make test -x`.\n2. Read the first failure.\n"),
]


def _seed(memory: Memory) -> signing.Signer:
    register(memory, "alice")
    signer = signing.Signer(add_key(memory, "alice"), "alice")
    upload(memory, ALICE, TEXTS[0], seal=Seal(sign=signer.sign))
    upload(memory, BOB, TEXTS[1])
    upload(memory, ALICE, TEXTS[2], seal=Seal(sign=signer.sign))
    return signer


def test_review_gives_each_versions_text_diff_author_and_signature_state(memory: Memory) -> None:
    signer = _seed(memory)
    review = memory.review_skill(ADMIN, parse(SkillVersionsInput, REF))
    assert [v.text for v in review.versions] == TEXTS
    assert [(v.out.version, v.out.agent_id, v.out.key_id, v.out.signature) for v in review.versions] == [
        (1, "alice", signer.key_id, "verified"),
        (2, "bob", None, "unsigned"),
        (3, "alice", signer.key_id, "verified"),
    ]
    first, *later = review.versions
    assert first.diff is None
    for before, after in zip(review.versions, later, strict=False):
        assert after.diff is not None and apply_diff(before.text, after.diff) == after.text
    assert "-1. Run `make test`.\n+1. Run `make test -x`.\n" in (later[1].diff or "")
    assert (review.skill.version, review.skill.status, review.revoked) == (3, "active", None)


def test_a_signature_changed_in_the_database_reads_as_invalid(memory: Memory, settings: Settings) -> None:
    _seed(memory)
    versions = memory.review_skill(ADMIN, parse(SkillVersionsInput, REF)).versions
    first, third = versions[0].out.version_id, versions[2].out.version_id
    run_sql(
        settings,
        f"UPDATE entries SET sig = (SELECT sig FROM entries WHERE id = '{first}') WHERE id = '{third}'",
    )
    review = memory.review_skill(ADMIN, parse(SkillVersionsInput, REF))
    assert [v.out.signature for v in review.versions] == ["verified", "unsigned", "invalid"]


def test_review_keeps_to_the_callers_repositories(memory: Memory) -> None:
    _seed(memory)
    elsewhere = Caller(agent_id="scoped", repositories=("github.com/acme/other",))
    with pytest.raises(Forbidden):
        memory.review_skill(elsewhere, parse(SkillVersionsInput, REF))
    with pytest.raises(NotFound):
        memory.review_skill(ADMIN, parse(SkillVersionsInput, {**REF, "skill_id": "no-such-skill"}))
