"""The agents and skills pages over plain HTTP on the whole app and a real SQLite store: every
form's bad input names its field and writes nothing, CSRF guards every new form, the registry's
forms need admin scope and a skill's status needs write scope (the service's refusal is shown),
and a scoped token sees only its repositories' skills."""

from __future__ import annotations

import html
import sqlite3
from contextlib import closing
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.testclient import TestClient

from mentis.api.agents import ShowAgentInput
from mentis.api.common import parse
from mentis.api.skills import SkillVersionsInput
from mentis.ledger import signing
from mentis.service.memory import Memory
from mentis.service.tokens import TokenStore
from tests.dashboard.conftest import csrf_of, login, make_token
from tests.dashboard.seed import SHOP
from tests.dashboard.seed_registry import ADMIN, AUTHOR, TOOLS, SeededRegistry, seed_registry

RUN_TESTS = f"/dashboard/skill?{urlencode({'repository': SHOP, 'skill_id': 'run-tests'})}"


@pytest.fixture
def registry(memory: Memory) -> SeededRegistry:
    return seed_registry(memory)


def _ledger(memory: Memory) -> list[str]:
    return [e.hash for e, _ in memory.store.iter_ledger()]


def _public() -> str:
    return signing.public_text(Ed25519PrivateKey.generate().public_key())


def _forms(registry: SeededRegistry) -> list[tuple[str, dict[str, str]]]:
    """One valid submission of every new form."""
    return [
        ("/dashboard/agents/register", {"agent_id": "new-bot", "display_name": "New bot"}),
        ("/dashboard/agents/key", {"agent_id": AUTHOR, "public_key": _public()}),
        (
            "/dashboard/agents/revoke-key",
            {"agent_id": AUTHOR, "key_id": registry.author_key_id, "reason": "lost"},
        ),
        ("/dashboard/agents/disable", {"agent_id": AUTHOR, "reason": "retired", "confirm": "yes"}),
        ("/dashboard/skills/deprecate", {"repository": SHOP, "skill_id": "cut-release"}),
        (
            "/dashboard/skills/revoke",
            {"repository": SHOP, "skill_id": "cut-release", "reason": "x", "confirm": "yes"},
        ),
    ]


def test_the_pages_list_agents_keys_skills_and_each_versions_signature(
    client: TestClient, tokens: TokenStore, registry: SeededRegistry
) -> None:
    login(client, make_token(tokens, "admin"))
    agents = client.get("/dashboard/agents").text
    assert (
        "Skill author" in agents and "must sign" in agents and 'action="/dashboard/agents/register"' in agents
    )
    agent = client.get(f"/dashboard/agent?{urlencode({'id': AUTHOR})}").text
    assert registry.author_key_id in agent
    assert signing.public_text(registry.author_key.public_key()) in agent
    skills = client.get("/dashboard/skills").text
    for name in ("run-tests", "cut-release", "deploy"):
        assert name in skills
    page = html.unescape(client.get(RUN_TESTS).text)
    badges = [part.split('">')[1].split("<")[0] for part in page.split('class="badge badge-sig-')[1:]]
    assert badges == ["signature verifies", "unsigned", "signature verifies"]  # versions 3, 2, 1
    assert "<del>-1. Run pytest -q -x</del><ins>+1. Run pytest -q -x -n 1</ins>" in page
    assert "<ins>+3. Fix it before the next run</ins>" in page


def test_a_skill_unknown_or_out_of_scope_is_a_404_and_the_list_leaves_it_out(
    client: TestClient, tokens: TokenStore, registry: SeededRegistry
) -> None:
    login(client, make_token(tokens, "read", (SHOP,)))
    assert "deploy" not in client.get("/dashboard/skills").text
    assert TOOLS not in client.get("/dashboard/skills").text
    for url in (
        f"/dashboard/skill?{urlencode({'repository': TOOLS, 'skill_id': 'deploy'})}",
        f"/dashboard/skill?{urlencode({'repository': SHOP, 'skill_id': 'no-such-skill'})}",
    ):
        response = client.get(url)
        assert response.status_code in (403, 404), url
        assert "Build the image" not in response.text
    assert client.get("/dashboard/agent?id=nobody").status_code == 404
    bad = client.get("/dashboard/skills?status=gone")
    assert bad.status_code == 422 and "status parameter" in bad.text


def test_every_new_form_without_its_csrf_token_is_refused_and_writes_nothing(
    client: TestClient, tokens: TokenStore, memory: Memory, registry: SeededRegistry
) -> None:
    login(client, make_token(tokens, "admin"))
    before = _ledger(memory)
    for url, data in _forms(registry):
        for csrf in (None, "0" * 64):
            response = client.post(url, data=data if csrf is None else {**data, "csrf": csrf})
            assert response.status_code == 403 and "security token" in response.text, url
    assert _ledger(memory) == before


@pytest.mark.parametrize("scope", ["read", "write"])
def test_a_non_admin_token_sees_no_registry_form_and_its_posts_are_refused(
    client: TestClient, tokens: TokenStore, memory: Memory, registry: SeededRegistry, scope: str
) -> None:
    login(client, make_token(tokens, scope, ("*",)))
    for url in ("/dashboard/agents", f"/dashboard/agent?{urlencode({'id': AUTHOR})}"):
        page = client.get(url).text
        assert 'action="/dashboard/agents/' not in page, url
    csrf = csrf_of(client.get("/dashboard/agents").text)
    before = _ledger(memory)
    for url, data in _forms(registry)[:4]:
        response = client.post(url, data={**data, "csrf": csrf})
        assert response.status_code == 403, url
        assert "managing agents, keys and tokens needs admin scope" in html.unescape(response.text)
    assert _ledger(memory) == before
    author = memory.show_agent(ADMIN, parse(ShowAgentInput, {"agent_id": AUTHOR}))
    assert author.disabled_at is None and [k.revoked_at for k in author.keys] == [None]


def test_a_read_token_sees_no_skill_status_form_and_its_posts_are_refused(
    client: TestClient, tokens: TokenStore, memory: Memory, registry: SeededRegistry
) -> None:
    login(client, make_token(tokens, "read", (SHOP,)))
    page = client.get(RUN_TESTS).text
    assert 'action="/dashboard/skills/' not in page
    csrf = csrf_of(page)
    before = _ledger(memory)
    for url, data in _forms(registry)[4:]:
        response = client.post(url, data={**data, "csrf": csrf})
        assert response.status_code == 403 and "may only read" in response.text, url
    assert _ledger(memory) == before


def test_a_write_token_cannot_change_a_skill_outside_its_repositories(
    client: TestClient, tokens: TokenStore, memory: Memory, registry: SeededRegistry
) -> None:
    login(client, make_token(tokens, "write", (SHOP,)))
    csrf = csrf_of(client.get(RUN_TESTS).text)
    before = _ledger(memory)
    data = {"csrf": csrf, "repository": TOOLS, "skill_id": "deploy", "reason": "x", "confirm": "yes"}
    for url in ("/dashboard/skills/deprecate", "/dashboard/skills/revoke"):
        response = client.post(url, data=data)
        assert response.status_code == 403 and "may not write" in html.unescape(response.text), url
    assert _ledger(memory) == before


BAD: list[tuple[str, dict[str, str], str]] = [
    ("/dashboard/agents/register", {"agent_id": ""}, "agent_id"),
    ("/dashboard/agents/register", {"agent_id": "has spaces and / slashes"}, "agent_id"),
    ("/dashboard/agents/register", {"agent_id": "ok-bot", "aliases": "bad alias!"}, "aliases"),
    ("/dashboard/agents/register", {"agent_id": AUTHOR}, "agent"),  # already registered
    ("/dashboard/agents/key", {"agent_id": AUTHOR, "public_key": ""}, "public_key"),
    ("/dashboard/agents/key", {"agent_id": AUTHOR, "public_key": "not-a-key"}, "public_key"),
    ("/dashboard/agents/key", {"agent_id": "nobody", "public_key": "PUBLIC"}, "nobody"),
    ("/dashboard/agents/revoke-key", {"agent_id": AUTHOR, "key_id": "KEY", "reason": ""}, "reason"),
    ("/dashboard/agents/revoke-key", {"agent_id": AUTHOR, "key_id": "ed25519:zz", "reason": "r"}, "key_id"),
    (
        "/dashboard/agents/revoke-key",
        {"agent_id": AUTHOR, "key_id": "ed25519:" + "0" * 32, "reason": "r"},
        "key",
    ),
    ("/dashboard/agents/disable", {"agent_id": AUTHOR, "reason": "", "confirm": "yes"}, "reason"),
    ("/dashboard/agents/disable", {"agent_id": AUTHOR, "reason": "retired"}, "confirm"),
    ("/dashboard/skills/deprecate", {"repository": SHOP, "skill_id": ""}, "skill_id"),
    ("/dashboard/skills/deprecate", {"repository": SHOP, "skill_id": "no-such-skill"}, "no-such-skill"),
    (
        "/dashboard/skills/revoke",
        {"repository": SHOP, "skill_id": "cut-release", "reason": "", "confirm": "yes"},
        "reason",
    ),
    (
        "/dashboard/skills/revoke",
        {"repository": SHOP, "skill_id": "cut-release", "reason": "unsafe"},
        "confirm",
    ),
    (
        "/dashboard/skills/revoke",
        {"repository": "", "skill_id": "cut-release", "reason": "r", "confirm": "yes"},
        "repository",
    ),
]


def test_bad_input_in_every_new_form_names_the_field_and_writes_nothing(
    client: TestClient, tokens: TokenStore, memory: Memory, registry: SeededRegistry
) -> None:
    login(client, make_token(tokens, "admin"))
    csrf = csrf_of(client.get("/dashboard/agents").text)
    before = _ledger(memory)
    for url, data, field in BAD:
        filled = {
            k: v.replace("PUBLIC", _public()).replace("KEY", registry.author_key_id) for k, v in data.items()
        }
        response = client.post(url, data={**filled, "csrf": csrf})
        text = html.unescape(response.text)
        assert response.status_code in (404, 409, 422), (url, data, response.status_code)
        assert field in text.split('<section class="card error"')[1], (url, data, text[-600:])
        assert "Traceback" not in text
    assert _ledger(memory) == before


def test_a_deprecated_then_revoked_skill_shows_its_status_and_stays_revoked(
    client: TestClient, tokens: TokenStore, memory: Memory, registry: SeededRegistry
) -> None:
    login(
        client,
        make_token(
            tokens,
            "write",
            (SHOP,),
        ),
    )
    url = f"/dashboard/skill?{urlencode({'repository': SHOP, 'skill_id': 'cut-release'})}"
    csrf = csrf_of(client.get(url).text)
    ref = {"repository": SHOP, "skill_id": "cut-release"}
    page = client.post("/dashboard/skills/deprecate", data={**ref, "csrf": csrf, "reason": "use ship-it"})
    assert page.url.path == "/dashboard/skill" and 'id="skill-status">deprecated' in page.text
    again = client.post("/dashboard/skills/deprecate", data={**ref, "csrf": csrf})
    assert again.status_code == 409 and "already deprecated" in again.text
    revoked = client.post(
        "/dashboard/skills/revoke",
        data={**ref, "csrf": csrf, "reason": "pushes to the wrong remote", "confirm": "yes"},
    )
    assert 'id="skill-status">revoked' in revoked.text and "pushes to the wrong remote" in revoked.text
    assert 'action="/dashboard/skills/' not in revoked.text  # nothing more to change
    status = memory.skill_versions(ADMIN, parse(SkillVersionsInput, ref)).status
    assert status == "revoked"
    listed = client.get("/dashboard/skills?status=revoked").text
    assert "cut-release" in listed and "run-tests" not in listed


def test_a_version_whose_text_was_changed_in_the_file_is_reported_not_shown(
    client: TestClient, tokens: TokenStore, memory: Memory, registry: SeededRegistry
) -> None:
    login(client, make_token(tokens, "read", (SHOP,)))
    ref = {"repository": SHOP, "skill_id": "run-tests"}
    second = memory.skill_versions(ADMIN, parse(SkillVersionsInput, ref)).versions[1]
    with closing(sqlite3.connect(memory.settings.db_path)) as con, con:
        changed = con.execute(
            "UPDATE bodies SET body = "
            "CAST(replace(CAST(body AS TEXT), 'Read the first', 'Skip the first') AS BLOB) "
            "WHERE rowid = (SELECT rowid FROM entries WHERE id = ?)",
            (second.version_id,),
        ).rowcount
        assert changed == 1
    page = client.get(RUN_TESTS)
    text = html.unescape(page.text)
    assert page.status_code == 500
    assert f"ledger does not verify: chain {SHOP!r} seq {second.ledger.seq}" in text
    assert "Skip the first" not in text


def test_every_registry_page_and_form_needs_a_session(
    client: TestClient, memory: Memory, registry: SeededRegistry
) -> None:
    for url in (
        "/dashboard/agents",
        f"/dashboard/agent?{urlencode({'id': AUTHOR})}",
        "/dashboard/skills",
        RUN_TESTS,
    ):
        response = client.get(url, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, "/dashboard/login"), url
    before = _ledger(memory)
    for url, data in _forms(registry):
        response = client.post(url, data=data, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, "/dashboard/login"), url
    assert _ledger(memory) == before
