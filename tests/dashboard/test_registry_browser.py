"""The agents and skills pages in a real browser (headless chromium) against a real server on
127.0.0.1 and its SQLite store, with real Ed25519 keys: register an agent, add a key, revoke it,
disable the agent; read a skill's versions with their diffs and whether each signature verifies
(one version's signature is tampered with in the file); deprecate and revoke a skill. A token
without the scope gets the service's refusal and nothing changes. Keyboard alone, 375 px wide.
No request may leave 127.0.0.1."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from playwright.sync_api import Browser, Page, expect

from mentis.api.agents import ShowAgentInput
from mentis.api.common import parse
from mentis.api.skills import SkillVersionsInput
from mentis.ledger import signing
from tests.dashboard.browser import Guarded, shoot, sign_in, tab_to
from tests.dashboard.seed import SHOP, seed
from tests.dashboard.seed_registry import (
    ADMIN,
    AUTHOR,
    TOOLS,
    SeededRegistry,
    seed_registry,
    tamper_signature,
)
from tests.dashboard.test_browser import CONTRAST_JS
from tests.http_support import LiveServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _skill(repository: str, skill_id: str) -> str:
    return f"/dashboard/skill?{urlencode({'repository': repository, 'skill_id': skill_id})}"


RUN_TESTS = _skill(SHOP, "run-tests")
DEPLOY = _skill(TOOLS, "deploy")
AUTHOR_PAGE = f"/dashboard/agent?{urlencode({'id': AUTHOR})}"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, SeededRegistry]]:
    db: Path = tmp_path_factory.mktemp("registry") / "mentis.db"
    server = LiveServer(db, rate_per_second=1000.0, rate_burst=1000)
    seed(server.memory)
    seeded = seed_registry(server.memory)
    tamper_signature(db, seeded.tampered_version_id)
    with server:
        yield server, seeded


def _public() -> str:
    return signing.public_text(Ed25519PrivateKey.generate().public_key())


def _submit_forged_form(page: Page, action: str, fields: dict[str, str]) -> None:
    """Post a form the page does not offer, with the session's CSRF token, as a person crafting it would."""
    page.evaluate(
        """([action, fields]) => {
          const form = document.createElement('form');
          form.method = 'post';
          form.action = action;
          const all = {...fields, csrf: document.querySelector('input[name=csrf]').value};
          for (const [name, value] of Object.entries(all)) {
            const input = document.createElement('input');
            input.type = 'hidden'; input.name = name; input.value = value;
            form.appendChild(input);
          }
          document.body.appendChild(form);
          form.submit();
        }""",
        [action, fields],
    )


def test_admin_registers_an_agent_adds_a_real_key_revokes_it_and_disables_the_agent(
    live: tuple[LiveServer, SeededRegistry], guard: Guarded
) -> None:
    server, _ = live
    page = guard.page()
    sign_in(page, server.url, server.token("admin", agent="owner"))
    page.get_by_role("link", name="Agents").click()
    expect(page.locator("ul.agents")).to_contain_text("Skill author")
    expect(page.locator("ul.agents")).to_contain_text("must sign")
    shoot(page, "agents")
    page.get_by_label("Agent id").fill("ci-bot")
    page.get_by_label("Display name").fill("CI bot")
    page.get_by_label("Aliases").fill("nightly, ci")
    page.get_by_role("button", name="Register").click()
    expect(page).to_have_url(f"{server.url}/dashboard/agent?id=ci-bot")
    expect(page.get_by_role("heading", name="CI bot")).to_be_visible()
    key = Ed25519PrivateKey.generate()
    key_id = signing.key_id_of(key.public_key())
    page.get_by_label("Add a public key").fill(signing.public_text(key.public_key()))
    page.get_by_role("button", name="Add key").click()
    expect(page.locator("ul.keys")).to_contain_text(key_id)
    shoot(page, "agent")
    agent = server.memory.show_agent(ADMIN, parse(ShowAgentInput, {"agent_id": "nightly"}))
    assert (agent.agent_id, agent.aliases, agent.registered_by) == ("ci-bot", ["nightly", "ci"], "owner")
    assert [(k.key_id, k.public_key, k.revoked_at) for k in agent.keys] == [
        (key_id, signing.public_text(key.public_key()), None)
    ]
    assert agent.must_sign
    page.get_by_text("Revoke this key").click()
    page.get_by_label("Why is it revoked?").fill("the CI runner image leaked it")
    page.get_by_role("button", name="Revoke key").click()
    expect(page.locator("ul.keys .reason")).to_contain_text("the CI runner image leaked it")
    page.get_by_label("Reason", exact=True).fill("the nightly job moved elsewhere")
    page.get_by_label("I understand this agent can write nothing more").check()
    page.get_by_role("button", name="Disable agent").click()
    expect(page.locator("#agent-status")).to_contain_text("disabled")
    expect(page.locator("#agent-status")).to_contain_text("the nightly job moved elsewhere")
    expect(page.locator("form[action$='/agents/key'], form[action$='/agents/disable']")).to_have_count(0)
    agent = server.memory.show_agent(ADMIN, parse(ShowAgentInput, {"agent_id": "ci-bot"})).model_copy()
    assert agent.keys[0].reason == "the CI runner image leaked it" and agent.keys[0].revoked_at
    assert agent.disabled_reason == "the nightly job moved elsewhere"


def test_a_skills_versions_show_their_diffs_signers_and_whether_each_signature_verifies(
    live: tuple[LiveServer, SeededRegistry], guard: Guarded
) -> None:
    server, seeded = live
    page = guard.page()
    sign_in(page, server.url, server.token("read", (SHOP, TOOLS)))
    page.get_by_role("link", name="Skills").click()
    for name in ("run-tests", "deploy"):
        expect(page.locator("ul.skills")).to_contain_text(name)
    shoot(page, "skills")
    page.get_by_role("link", name="run-tests").click()
    expect(page).to_have_url(f"{server.url}{RUN_TESTS}")
    states = {v: page.locator(f"#v{v} .attempt-head .badge") for v in (1, 2, 3)}
    expect(states[1]).to_have_text("signature verifies")
    expect(states[2]).to_have_text("unsigned")
    expect(states[3]).to_have_text("signature verifies")
    expect(page.locator("#v1")).to_contain_text(seeded.author_key_id)
    expect(page.locator("#v2")).to_contain_text("helper-agent")
    page.locator("#v1").get_by_role("link", name=AUTHOR).click()  # who signed it, in the registry
    expect(page.locator("ul.keys")).to_contain_text(seeded.author_key_id)
    page.go_back()
    expect(page.locator("#v3 pre.diff del")).to_have_text(["-1. Run pytest -q -x"])
    expect(page.locator("#v3 pre.diff ins")).to_have_text(["+1. Run pytest -q -x -n 1"])
    expect(page.locator("#v2 pre.diff ins")).to_have_text(
        ["+1. Run pytest -q -x", "+3. Fix it before the next run"]
    )
    expect(page.locator("#v1 pre.diff")).to_have_count(0)  # the first version has nothing before it
    shoot(page, "skill")
    page.goto(f"{server.url}{DEPLOY}")
    expect(page.locator("#v1 .attempt-head .badge")).to_have_text("signature does not verify")
    expect(page.locator("#v1")).to_contain_text(seeded.author_key_id)
    shoot(page, "skill-tampered-signature")
    # the service says the same: it is the signature check, not the page, that fails
    versions = server.memory.skill_versions(
        ADMIN, parse(SkillVersionsInput, {"repository": TOOLS, "skill_id": "deploy"})
    )
    assert [v.signature for v in versions.versions] == ["invalid"]


def test_a_write_token_deprecates_then_revokes_a_skill_through_the_forms(
    live: tuple[LiveServer, SeededRegistry], guard: Guarded
) -> None:
    server, _ = live
    page = guard.page()
    sign_in(page, server.url, server.token("write", (SHOP,), agent="release-owner"))
    page.goto(f"{server.url}{_skill(SHOP, 'cut-release')}")
    expect(page.locator("#skill-status")).to_have_text("active")
    page.get_by_label("Why deprecate it?").fill("ship-it replaces it")
    page.get_by_role("button", name="Deprecate").click()
    expect(page.locator("#skill-status")).to_have_text("deprecated")
    expect(page.get_by_role("button", name="Deprecate")).to_have_count(0)
    page.get_by_label("Why revoke it?").fill("it pushes tags to the wrong remote")
    page.get_by_label("I understand a revocation cannot be undone").check()
    page.get_by_role("button", name="Revoke").click()
    expect(page.locator("#skill-status")).to_have_text("revoked")
    expect(page.locator(".alert")).to_contain_text("it pushes tags to the wrong remote")
    expect(page.locator("form[action*='/skills/']")).to_have_count(0)
    shoot(page, "skill-revoked")
    ref = {"repository": SHOP, "skill_id": "cut-release"}
    assert server.memory.skill_versions(ADMIN, parse(SkillVersionsInput, ref)).status == "revoked"
    page.goto(f"{server.url}/dashboard/skills")
    page.wait_for_load_state("domcontentloaded")  # its deferred script attached the listener
    page.get_by_label("Status").select_option("revoked")  # applies at once (data-autosubmit)
    expect(page).to_have_url(re.compile(r"status=revoked"))
    expect(page.locator("ul.skills > li")).to_have_count(1)
    expect(page.locator("ul.skills")).to_contain_text("cut-release")


def test_a_token_without_the_scope_gets_the_services_refusal_and_nothing_changes(
    live: tuple[LiveServer, SeededRegistry], guard: Guarded
) -> None:
    server, seeded = live
    page = guard.page()
    sign_in(page, server.url, server.token("write", ("*",), agent="not-an-admin"))
    for url in ("/dashboard/agents", AUTHOR_PAGE):
        page.goto(f"{server.url}{url}")
        expect(page.locator("form[action*='/agents/']")).to_have_count(0)
    expect(page.get_by_role("link", name="Admin")).to_have_count(0)
    before = server.ledger()
    fields = {"agent_id": AUTHOR, "key_id": seeded.author_key_id, "reason": "an outsider tries"}
    _submit_forged_form(page, f"{server.url}/dashboard/agents/revoke-key", fields)
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.locator("main")).to_contain_text("managing agents, keys and tokens needs admin scope")
    shoot(page, "agent-refused")
    page.goto(f"{server.url}{AUTHOR_PAGE}")
    _submit_forged_form(page, f"{server.url}/dashboard/agents/register", {"agent_id": "sneaky-bot"})
    expect(page.locator("main")).to_contain_text("needs admin scope")
    assert server.ledger() == before
    author = server.memory.show_agent(ADMIN, parse(ShowAgentInput, {"agent_id": AUTHOR}))
    assert [k.revoked_at for k in author.keys] == [None]
    guard.context.clear_cookies()
    sign_in(page, server.url, server.token("read", (SHOP,)))
    page.goto(f"{server.url}{RUN_TESTS}")
    expect(page.locator("form[action*='/skills/']")).to_have_count(0)
    _submit_forged_form(
        page, f"{server.url}/dashboard/skills/deprecate", {"repository": SHOP, "skill_id": "run-tests"}
    )
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.locator("main")).to_contain_text("this caller may only read")
    assert server.ledger() == before


def test_bad_input_in_a_form_names_the_field_and_writes_nothing(
    live: tuple[LiveServer, SeededRegistry], guard: Guarded
) -> None:
    server, _ = live
    page = guard.page()
    sign_in(page, server.url, server.token("admin"))
    before = server.ledger()
    page.goto(f"{server.url}{AUTHOR_PAGE}")
    page.get_by_label("Add a public key").fill("not-a-key")
    page.get_by_role("button", name="Add key").click()
    expect(page.get_by_role("heading", name="Invalid input")).to_be_visible()
    expect(page.locator("main")).to_contain_text("public_key is not base64url")
    shoot(page, "agent-bad-key")
    page.goto(f"{server.url}/dashboard/agents")
    page.get_by_label("Agent id").fill("has spaces")
    page.get_by_role("button", name="Register").click()
    expect(page.locator("main")).to_contain_text("agent_id")
    page.goto(f"{server.url}{RUN_TESTS}")
    page.get_by_label("Why revoke it?").fill("   ")  # blank once trimmed
    page.get_by_label("I understand a revocation cannot be undone").check()
    page.get_by_role("button", name="Revoke").click()
    expect(page.locator("main")).to_contain_text("reason")
    assert server.ledger() == before


def test_each_page_has_an_action_that_works_by_keyboard_alone(
    live: tuple[LiveServer, SeededRegistry], guard: Guarded
) -> None:
    server, _ = live
    page = guard.page()
    sign_in(page, server.url, server.token("admin", agent="keyboard-admin"))
    # agents: register an agent
    page.goto(f"{server.url}/dashboard/agents")
    tab_to(page, "#agent_id")
    page.keyboard.type("kb-bot")
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{server.url}/dashboard/agent?id=kb-bot")
    # agent: add a key, then revoke it (the form folds under a summary opened with Enter)
    tab_to(page, "#public_key")
    page.keyboard.type(_public())
    page.keyboard.press("Enter")
    expect(page.locator("ul.keys .badge")).to_have_text(["active"])
    page.locator("main").focus()
    tab_to(page, "ul.keys summary")
    page.keyboard.press("Enter")
    tab_to(page, "ul.keys input[name=reason]")
    page.keyboard.type("rotated by keyboard")
    page.keyboard.press("Enter")
    expect(page.locator("ul.keys .reason")).to_contain_text("rotated by keyboard")
    # skills: filter by status, then open a skill
    page.goto(f"{server.url}/dashboard/skills")
    tab_to(page, "#status")
    page.keyboard.press("ArrowDown")  # "active": the filter applies at once
    expect(page).to_have_url(re.compile(r"status=active"))
    tab_to(page, "a[href*='skill_id=run-tests']")
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{server.url}{RUN_TESTS}")
    # skill: deprecate it
    tab_to(page, "#deprecate-reason")
    page.keyboard.type("superseded by the CI recipe")
    page.keyboard.press("Enter")
    expect(page.locator("#skill-status")).to_have_text("deprecated")


def test_text_contrast_on_the_registry_pages_is_at_least_4_5_to_1(
    live: tuple[LiveServer, SeededRegistry], guard: Guarded
) -> None:
    server, _ = live
    page = guard.page()
    sign_in(page, server.url, server.token("admin"))
    for url in ("/dashboard/agents", AUTHOR_PAGE, "/dashboard/skills", RUN_TESTS, DEPLOY):
        page.goto(f"{server.url}{url}")
        page.locator("details").evaluate_all("els => els.forEach(d => d.open = true)")
        assert page.evaluate(CONTRAST_JS) == [], url


def test_every_registry_page_fits_a_375_px_wide_screen(
    live: tuple[LiveServer, SeededRegistry], browser: Browser
) -> None:
    server, _ = live
    guard = Guarded(browser, width=375, height=812)
    try:
        page = guard.page()
        sign_in(page, server.url, server.token("admin"))
        pages = {
            "agents": "/dashboard/agents",
            "agent": AUTHOR_PAGE,
            "skills": "/dashboard/skills",
            "skill": RUN_TESTS,
            "skill-tampered-signature": DEPLOY,
        }
        for name, url in pages.items():
            page.goto(f"{server.url}{url}")
            page.locator("details").evaluate_all("els => els.forEach(d => d.open = true)")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 375, (name, width)
            shoot(page, f"mobile-{name}")
    finally:
        guard.close()
    assert guard.outside == []
