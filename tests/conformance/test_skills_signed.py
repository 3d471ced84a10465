"""Skill versions uploaded by an agent with a key are signed like every other write, and
``read_skill`` / ``skill_versions`` report who signed each version and that the signature verifies
against the key the agent registry holds for that agent (both stores, real Ed25519 keys)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mentis.api.common import parse
from mentis.api.skills import SkillVersionsInput
from mentis.config import Settings
from mentis.errors import Forbidden
from mentis.ledger import signing
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Memory
from mentis.store.seal import Seal
from tests.conformance.test_signing import ADMIN, ALICE, add_key, register
from tests.conformance.test_skills import REPO, read, skill_md, upload


def test_signed_skill_versions_read_as_signed_and_verified(memory: Memory) -> None:
    register(memory, "alice")
    signer = signing.Signer(add_key(memory, "alice"), "alice")
    first = skill_md("run-tests", "Run the test suite", "Run `make test`.\n")
    second = skill_md("run-tests", "Run the test suite", "Run `make test` with PostgreSQL.\n")
    upload(memory, ALICE, first, seal=Seal(sign=signer.sign))
    upload(memory, ALICE, second, seal=Seal(sign=signer.sign))
    out = read(memory, ALICE, "run-tests")
    assert [(v.version, v.agent_id, v.signed, v.key_id, v.signature) for v in out.versions] == [
        (1, "alice", True, signer.key_id, "verified"),
        (2, "alice", True, signer.key_id, "verified"),
    ]
    listed = memory.skill_versions(
        ALICE, parse(SkillVersionsInput, {"repository": REPO, "skill_id": "run-tests"})
    )
    assert {v.signature for v in listed.versions} == {"verified"}
    assert memory.verify_integrity(ADMIN, None, True).ok


def test_an_unsigned_skill_upload_by_a_keyed_agent_is_refused_and_writes_nothing(memory: Memory) -> None:
    register(memory, "alice")
    add_key(memory, "alice")
    before = len(list(memory.store.iter_ledger()))
    with pytest.raises(Forbidden, match="must be signed"):
        upload(memory, ALICE, skill_md("run-tests", "Run the test suite", "Run `make test`.\n"))
    assert len(list(memory.store.iter_ledger())) == before


def test_signed_skills_export_and_import_into_a_fresh_store(
    memory: Memory, other_settings: Settings, tmp_path: Path
) -> None:
    register(memory, "alice")
    signer = signing.Signer(add_key(memory, "alice"), "alice")
    upload(
        memory,
        ALICE,
        skill_md("run-tests", "Run the test suite", "Run `make test`.\n"),
        seal=Seal(sign=signer.sign),
    )
    out = tmp_path / "skills"
    done = memory.export_skills(ALICE, REPO, out)
    assert [Path(p).parent.name for p in done.written] == ["run-tests"]
    fresh = Memory.open(other_settings, HashEmbedder())
    try:
        fresh.import_skills(ADMIN, REPO, out)
        again = read(fresh, ADMIN, "run-tests")
        assert again.content_hash == read(memory, ALICE, "run-tests").content_hash
        assert [v.signature for v in again.versions] == ["unsigned"]  # the importer's own upload
    finally:
        fresh.close()
