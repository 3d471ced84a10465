"""The skill registry's pure parts: diffs that apply byte for byte, the SKILL.md front matter rules,
the ledger's rules for skill entries, and signature states with real Ed25519 keys.

Format followed: the Agent Skills specification (agentskills.io/specification, its 2025-11 rules as
implementations quote them) that Claude Code loads from ``.claude/skills/<name>/SKILL.md``
(code.claude.com/docs/en/skills, "Extend Claude with skills", read 2026-12-02):
``name`` 1-64 lowercase letters, digits and single hyphens; ``description`` 1-1,024 characters.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from mentis.api.skill_text import apply_diff, make_diff, parse_skill
from mentis.errors import IntegrityError, SkillTextError
from mentis.ledger import signing
from mentis.ledger.canonical import canonical, sha256_hex
from mentis.ledger.chain import verify_rows
from mentis.ledger.entry import Entry, seal
from mentis.service.skills import signature_state

LINES = st.lists(
    st.sampled_from(
        ["", "a", "b", "step 1", "  indented", "ünï", "--", "@@ -1 +1 @@", "+x", "-y", " z", "\\"]
    ),
    max_size=30,
)


@st.composite
def texts(draw: st.DrawFn) -> str:
    text = "\n".join(draw(LINES))
    return text + draw(st.sampled_from(["", "\n", "\n\n"]))


@settings(max_examples=400, deadline=None)
@given(old=texts(), new=texts())
def test_a_diff_turns_the_old_text_into_the_new_byte_for_byte(old: str, new: str) -> None:
    assert apply_diff(old, make_diff(old, new)) == new


@settings(max_examples=50, deadline=None)
@given(chain=st.lists(texts(), min_size=20, max_size=20))
def test_twenty_versions_rebuild_from_the_first_and_nineteen_diffs(chain: list[str]) -> None:
    diffs = [make_diff(a, b) for a, b in itertools.pairwise(chain)]
    text = chain[0]
    for want, diff in zip(chain[1:], diffs, strict=True):
        text = apply_diff(text, diff)
        assert text.encode() == want.encode()


def test_a_diff_against_other_text_does_not_apply_and_says_where() -> None:
    diff = make_diff("one\ntwo\nthree\n", "one\n2\nthree\n")
    with pytest.raises(SkillTextError) as err:
        apply_diff("one\nTWO\nthree\n", diff)
    assert err.value.field == "diff" and "does not apply" in str(err.value)


@pytest.mark.parametrize(
    "text,message",
    [
        ("---\nname: a\ndescription: [x\n---\n", "not valid YAML (line"),
        ("---\n- a\n- b\n---\n", "mapping"),
        ("---\nname: a\ndescription: d\n", "closing"),
        ("---\nname: " + "a" * 65 + "\ndescription: d\n---\n", "64"),
        ("---\nname: -a\ndescription: d\n---\n", "hyphen"),
        ("---\nname: a--b\ndescription: d\n---\n", "single hyphens"),
        ("---\nname: a\ndescription: " + "d" * 1025 + "\n---\n", "1,024"),
        ("---\nname: 7\ndescription: d\n---\n", "string"),
        ("---\nname: a\ndescription: d\ntriggers: [1, 2]\n---\n", "triggers"),
        ("[1, 2]", "front matter"),
        ("{oops", "JSON"),
    ],
)
def test_front_matter_that_breaks_a_rule_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(SkillTextError) as err:
        parse_skill(text)
    assert message in str(err.value) and err.value.field == "content"


def test_front_matter_keeps_other_harness_keys_in_the_text() -> None:
    text = "---\nname: review\ndescription: Review a PR\nallowed-tools: Read, Grep\ntags: ci\n---\nBody\n"
    doc = parse_skill(text)
    assert (doc.name, doc.tags, doc.format, doc.body) == ("review", ["ci"], "markdown", "Body\n")


# ---------------------------------------------------------------- the ledger's rules


def _chain(bodies: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[Any, ...]]:
    rows, prev = [], ""
    for seq, (kind, id_, body) in enumerate(bodies):
        raw = canonical(body)
        e = seal(chain="r", seq=seq, prev=prev, kind=kind, id=id_, at="t", agent="a", body=raw)
        rows.append((e.v, e.chain, e.seq, e.kind, e.id, e.at, e.agent, e.prev, e.body_hash, e.key_id, e.sig,
                     e.hash, raw))  # fmt: skip
        prev = e.hash
    return rows


def _version(skill: str, n: int, id_: str, base: str | None = None) -> tuple[str, str, dict[str, Any]]:
    body: dict[str, Any] = {"version_id": id_, "repository": "r", "skill_id": skill, "version": n}
    body |= {"content": "x"} if base is None else {"diff": "", "base_id": base}
    return "skill", id_, body


def _status(skill: str, n: int, target: str) -> tuple[str, str, dict[str, Any]]:
    body = {"repository": "r", "skill_id": skill, "op": "revoke", "version_id": target, "version": n}
    return "skill_status", f"s-{target}", body


def test_the_ledger_accepts_versions_statuses_and_a_tombstone_that_name_their_own_skill() -> None:
    tomb = {"repository": "r", "skill_id": "a", "version_id": "a2", "version": 2, "erased": [0, 1]}
    rows = _chain([_version("a", 1, "a1"), _version("a", 2, "a2", "a1"), _status("a", 2, "a2"),
                   ("forget", "t", tomb)])  # fmt: skip
    rows[0] = (*rows[0][:12], None)
    rows[1] = (*rows[1][:12], None)
    (report,) = verify_rows(rows)
    assert (report.entries, report.bodies_erased) == (4, 2)


@pytest.mark.parametrize(
    "bodies,why",
    [
        ([_version("a", 1, "a1"), _version("b", 2, "b2", "a1")], "not version 1 of skill 'b'"),
        ([_version("a", 1, "a1"), _version("a", 3, "a3", "a1")], "not version 2 of skill 'a'"),
        ([_version("a", 2, "a2", "nowhere")], "no earlier record"),
        ([_version("a", 1, "a1"), _status("b", 1, "a1")], "not version 1 of skill 'b'"),
        ([_status("a", 1, "later"), _version("a", 1, "later")], "no earlier record"),
    ],
)
def test_the_ledger_refuses_a_skill_entry_naming_another_skills_version(
    bodies: list[tuple[str, str, dict[str, Any]]], why: str
) -> None:
    with pytest.raises(IntegrityError) as err:
        verify_rows(_chain(bodies))
    assert why in err.value.message


# ---------------------------------------------------------------- signatures


def _signed_entry(key: Ed25519PrivateKey) -> Entry:
    signer = signing.Signer(key, "agent-a")
    body_hash = sha256_hex(b"{}")
    key_id, sig = signer.sign(signing.Unsigned("r", "skill", "v1", "t", "agent-a", body_hash))
    return seal(chain="r", seq=0, prev="", kind="skill", id="v1", at="t", agent="agent-a",
                body_hash=body_hash, key_id=key_id, sig=sig)  # fmt: skip


def test_a_signed_version_verifies_only_with_its_own_key() -> None:
    key = Ed25519PrivateKey.generate()
    entry = _signed_entry(key)
    assert signature_state(entry, key.public_key()) == "verified"
    assert signature_state(entry, Ed25519PrivateKey.generate().public_key()) == "invalid"
    assert signature_state(entry, None) == "unknown_key"
    forged = dataclasses.replace(entry, agent="agent-b")  # the same signature over another author
    assert signature_state(forged, key.public_key()) == "invalid"
    unsigned = seal(chain="r", seq=0, prev="", kind="skill", id="v1", at="t", agent="a", body=b"{}")
    assert signature_state(unsigned, key.public_key()) == "unsigned"
