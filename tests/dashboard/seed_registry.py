"""Agents and skills for the dashboard's registry pages, written with real Ed25519 keys.

- ``skill-author`` is registered with a key; ``helper-agent`` is not (it writes unsigned).
- ``run-tests`` in SHOP: version 1 signed by skill-author, version 2 unsigned by helper-agent,
  version 3 signed by skill-author; each signature verifies.
- ``cut-release`` in SHOP: one unsigned version (the one tests deprecate and revoke).
- ``deploy`` in TOOLS: one version signed by skill-author whose signature is then replaced in the
  SQLite file by another entry's (:func:`tamper_signature`), so it no longer verifies.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mentis.api.agents import AddAgentKeyInput, RegisterAgentInput
from mentis.api.common import parse
from mentis.api.skills import SkillVersionsInput, UploadSkillInput
from mentis.ledger import signing
from mentis.service.memory import Caller, Memory
from tests.dashboard.seed import SHOP
from tests.signing_support import sign_and_write

TOOLS = "github.com/acme/tools"
AUTHOR = "skill-author"
HELPER = "helper-agent"
ADMIN = Caller(agent_id="registry-admin", admin=True)


def skill_text(name: str, steps: list[str], description: str = "") -> str:
    body = "".join(f"{i}. {s}\n" for i, s in enumerate(steps, 1))
    return f"---\nname: {name}\ndescription: {description or name + ' procedure'}\n---\n# {name}\n\n{body}"


RUN_TESTS = [
    ["Run pytest -q", "Read the first failure"],
    ["Run pytest -q -x", "Read the first failure", "Fix it before the next run"],
    ["Run pytest -q -x -n 1", "Read the first failure", "Fix it before the next run"],
]


@dataclass
class SeededRegistry:
    author_key: Ed25519PrivateKey
    author_key_id: str
    tampered_version_id: str


def _signed_upload(memory: Memory, signer: signing.Signer, repository: str, content: str) -> None:
    sign_and_write(
        memory,
        Caller(agent_id=signer.agent),
        signer,
        "upload_skill",
        {"repository": repository, "content": content},
    )


def seed_registry(memory: Memory) -> SeededRegistry:
    key = Ed25519PrivateKey.generate()
    memory.register_agent(
        ADMIN, parse(RegisterAgentInput, {"agent_id": AUTHOR, "display_name": "Skill author"})
    )
    public = signing.public_text(key.public_key())
    memory.add_agent_key(ADMIN, parse(AddAgentKeyInput, {"agent_id": AUTHOR, "public_key": public}))
    signer = signing.Signer(key, AUTHOR)
    _signed_upload(memory, signer, SHOP, skill_text("run-tests", RUN_TESTS[0], "How to run the test suite"))
    memory.upload_skill(
        Caller(agent_id=HELPER),
        parse(
            UploadSkillInput,
            {
                "repository": SHOP,
                "content": skill_text("run-tests", RUN_TESTS[1], "How to run the test suite"),
            },
        ),
    )
    _signed_upload(memory, signer, SHOP, skill_text("run-tests", RUN_TESTS[2], "How to run the test suite"))
    memory.upload_skill(
        Caller(agent_id=HELPER),
        parse(
            UploadSkillInput,
            {"repository": SHOP, "content": skill_text("cut-release", ["Tag the commit", "Push the tag"])},
        ),
    )
    _signed_upload(
        memory, signing.Signer(key, AUTHOR), TOOLS, skill_text("deploy", ["Build the image", "Roll it out"])
    )
    versions = memory.skill_versions(
        ADMIN, parse(SkillVersionsInput, {"repository": TOOLS, "skill_id": "deploy"})
    )
    return SeededRegistry(key, signing.key_id_of(key.public_key()), versions.versions[0].version_id)


def tamper_signature(db: Path, entry_id: str) -> None:
    """Give the entry ``entry_id`` another signed entry's signature, behind Mentis's back (the
    entry hash does not cover ``sig``, so reads still load it; its signature no longer verifies)."""
    with closing(sqlite3.connect(db)) as con, con:
        other = con.execute("SELECT sig FROM entries WHERE sig IS NOT NULL AND id != ? LIMIT 1", (entry_id,))
        (sig,) = other.fetchone()
        changed = con.execute("UPDATE entries SET sig = ? WHERE id = ?", (sig, entry_id)).rowcount
        assert changed == 1
