"""The dashboard in a real browser (headless chromium) against a real server on 127.0.0.1, with
the real embedding model: sign in, find a task by a paraphrase, read its corrections, curate, and
check scopes, bad cookies, keyboard use, contrast and a 375 px wide screen. Every request the
browser makes is checked: none may leave 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, Page, expect

from mentis.api.attempts import RecallInput
from mentis.api.common import parse
from mentis.dashboard.session import COOKIE, Signer
from mentis.providers.embed import Embedder
from mentis.service.memory import Caller
from tests.dashboard.browser import Guarded, shoot
from tests.dashboard.conftest import SECRET
from tests.dashboard.seed import BILLING, LOGIN_TASK, SECRET_REPO, SHOP, Seeded, seed
from tests.http_support import LiveServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TIMELINE = f"/dashboard/task?{urlencode({'repository': SHOP, 'task_id': LOGIN_TASK})}"
CONTRAST_JS = """
() => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = c => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = el => {
    for (; el; el = el.parentElement) {
      const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const worst = [];
  for (const el of document.querySelectorAll('body *')) {
    const text = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!text || el.closest('svg') || !el.getClientRects().length) continue;
    const fg = rgb(getComputedStyle(el).color).slice(0, 3);
    const [a, b] = [lum(fg), lum(background(el))].sort((x, y) => y - x);
    const ratio = (a + 0.05) / (b + 0.05);
    if (ratio < 4.5) worst.push(`${el.tagName}.${el.className}: ${ratio.toFixed(2)}`);
  }
  return worst;
}
"""


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, real_embedder: Embedder
) -> Iterator[tuple[LiveServer, Seeded]]:
    db: Path = tmp_path_factory.mktemp("dashboard") / "mentis.db"
    server = LiveServer(
        db, embedder=real_embedder, session_secret=SECRET, rate_per_second=1000.0, rate_burst=1000
    )
    seeded = seed(server.memory)
    with server:
        yield server, seeded


def _sign_in(page: Page, live: LiveServer, token: str) -> None:
    page.goto(f"{live.url}/dashboard/")
    expect(page).to_have_url(f"{live.url}/dashboard/login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{live.url}/dashboard/")


def test_find_a_task_by_paraphrase_and_read_its_correction(
    live: tuple[LiveServer, Seeded], guard: Guarded
) -> None:
    server, seeded = live
    page = guard.page()
    page.goto(f"{server.url}/dashboard/")
    shoot(page, "login")
    _sign_in(page, server, server.token("admin", agent="reviewer"))
    expect(page.get_by_role("heading", name="Repositories")).to_be_visible()
    expect(page.get_by_role("link", name=SHOP)).to_be_visible()
    shoot(page, "repositories")
    page.get_by_role("button", name="Verify now").click()
    expect(page.locator("#integrity-status")).to_contain_text("every chain below checked")
    page.get_by_role("link", name="Search").click()
    page.get_by_label("Describe the problem").fill(
        "people get signed out when they are idle for a few minutes"
    )
    page.get_by_role("button", name="Search").click()
    first = page.locator("ol.results > li").first
    expect(first).to_contain_text("Users are logged out after five minutes")
    expect(first.locator("table.scores")).to_contain_text("Fused")
    shoot(page, "search")
    first.get_by_role("link", name="Users are logged out after five minutes").click()
    corrected = page.locator(f"#a-{seeded.corrected}")
    expect(corrected.locator(".corrections")).to_contain_text("Redis was evicting session keys")
    expect(corrected.locator(".badge-outdated")).to_be_visible()
    expect(page.locator(".tombstone")).to_contain_text("held a credential")
    shoot(page, "task-timeline")
    page.goto(f"{server.url}{TIMELINE}&commit={'b' * 40}")
    expect(corrected.locator(".stale-note")).to_contain_text("src/app.py")


def test_mark_an_attempt_outdated_through_the_form(live: tuple[LiveServer, Seeded], guard: Guarded) -> None:
    server, seeded = live
    page = guard.page()
    _sign_in(page, server, server.token("write", (SHOP,), agent="curator"))
    page.goto(f"{server.url}{TIMELINE}")
    other = page.locator(f"#a-{seeded.other}")
    expect(other.locator(".badge-outdated")).to_have_count(0)
    other.get_by_text("Curate this attempt").click()
    other.get_by_label("Why is this conclusion outdated?").fill(
        "volatile-lru still evicts keys that have no TTL"
    )
    other.get_by_role("button", name="Mark outdated").click()
    expect(other.locator(".corrections")).to_contain_text("volatile-lru still evicts keys that have no TTL")
    expect(other.locator(".badge-outdated")).to_be_visible()
    history = server.memory.recall(
        Caller(agent_id="check"), parse(RecallInput, {"repository": SHOP, "task_id": LOGIN_TASK})
    )
    corrections = {row[0]: row[-1] for row in history.rows}[seeded.other]
    assert [(c["reason"], c["agent_id"]) for c in corrections] == [
        ("volatile-lru still evicts keys that have no TTL", "curator")
    ]
    page.goto(f"{server.url}/dashboard/tasks?{urlencode({'repository': SHOP})}")
    shoot(page, "tasks")
    page.get_by_label("With an attempt that is").select_option("outdated")
    expect(page.locator("ul.tasks > li")).to_have_count(1)
    query = urlencode({"repository": SHOP, "task_id": LOGIN_TASK, "attempt_id": seeded.corrected})
    page.goto(f"{server.url}/dashboard/forget?{query}")
    expect(page.get_by_role("heading", name="Forget this attempt?")).to_be_visible()
    shoot(page, "forget-confirmation")


def test_thoughts_and_the_relation_graph(live: tuple[LiveServer, Seeded], guard: Guarded) -> None:
    server, _ = live
    page = guard.page()
    _sign_in(page, server, server.token("write", (SHOP,)))
    page.get_by_role("link", name="Thoughts").click()
    expect(page.locator("ul.results")).to_contain_text("Redis evicts their keys")
    expect(page.locator("ul.results")).not_to_contain_text("cookie max-age is too short")
    page.get_by_label("Include superseded and invalidated").check()
    page.get_by_role("button", name="Apply").click()
    expect(page.locator("ul.results")).to_contain_text("cookie max-age is too short")
    shoot(page, "thoughts")
    page.get_by_role("link", name="Sessions expire because Redis evicts").click()
    graph = page.locator("svg.graph")
    expect(graph).to_contain_text("Supersedes")
    expect(graph).to_contain_text("Hypothesis")
    shoot(page, "thought")


def test_a_read_only_token_sees_no_write_form_and_its_direct_post_is_refused(
    live: tuple[LiveServer, Seeded], guard: Guarded
) -> None:
    server, seeded = live
    page = guard.page()
    _sign_in(page, server, server.token("read", (SHOP,)))
    writes = (
        "form[action$='/outdated'], form[action$='/forget'], form[action$='/relate'], form[action*='/admin']"
    )
    for url in (TIMELINE, f"/dashboard/thought?id={seeded.superseding}", "/dashboard/"):
        page.goto(f"{server.url}{url}")
        expect(page.locator(writes)).to_have_count(0)
    expect(page.get_by_role("link", name="Admin")).to_have_count(0)
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    before = [e.hash for e, _ in server.memory.store.iter_ledger()]
    response = page.request.post(
        f"{server.url}/dashboard/outdated",
        form={"csrf": csrf or "", "repository": SHOP, "task_id": LOGIN_TASK, "attempt_id": seeded.other,
              "reason": "a read token tries to write"},
    )  # fmt: skip
    assert response.status == 403
    assert [e.hash for e, _ in server.memory.store.iter_ledger()] == before


def test_a_token_for_one_repository_never_shows_another_repositorys_names(
    live: tuple[LiveServer, Seeded], guard: Guarded
) -> None:
    server, seeded = live
    page = guard.page()
    _sign_in(page, server, server.token("read", (SHOP,)))
    urls = [
        "/dashboard/",
        f"/dashboard/tasks?{urlencode({'repository': SHOP})}",
        TIMELINE,
        "/dashboard/search?q=rotating+the+vault+keys",
        "/dashboard/search?q=invoices+render+empty",
        "/dashboard/thoughts",
        "/dashboard/thoughts?include_invalidated=1",
        f"/dashboard/thought?id={seeded.superseding}",
    ]
    for url in urls:
        page.goto(f"{server.url}{url}")
        html = page.content()
        for name in (SECRET_REPO, "Umbrella", "umbrella", BILLING, "Invoice PDFs"):
            assert name not in html, (url, name)


def test_an_expired_or_forged_cookie_goes_back_to_login(
    live: tuple[LiveServer, Seeded], guard: Guarded
) -> None:
    server, _ = live
    token_id = server.token("read", (SHOP,)).split("_")[1]
    expired, _ = Signer(SECRET).issue(token_id, expires=int(time.time()) - 60)
    forged, _ = Signer(b"f" * 32).issue(token_id)
    for value, note in (
        (expired, "Your session or token expired"),
        (forged, "The session cookie was not valid"),
    ):
        guard.context.clear_cookies()
        guard.context.add_cookies(
            [
                {
                    "name": COOKIE,
                    "value": value,
                    "url": f"{server.url}/dashboard/",
                    "httpOnly": True,
                    "sameSite": "Strict",
                }
            ]
        )
        page = guard.page()
        page.goto(f"{server.url}/dashboard/")
        expect(page).to_have_url(
            f"{server.url}/dashboard/login?why={'expired' if value == expired else 'forged'}"
        )
        expect(page.locator(".notice")).to_contain_text(note)


def test_unknown_ids_show_a_404_page(live: tuple[LiveServer, Seeded], guard: Guarded) -> None:
    server, _ = live
    page = guard.page()
    _sign_in(page, server, server.token("admin"))
    response = page.goto(f"{server.url}/dashboard/thought?id=00000000-0000-4000-8000-000000000000")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    shoot(page, "not-found")
    response = page.goto(f"{server.url}/dashboard/tasks?{urlencode({'repository': SHOP, 'page': 'abc'})}")
    assert response is not None and response.status == 422
    expect(page.locator("main")).to_contain_text("page parameter must be a whole number")


def test_admin_creates_and_revokes_a_token(live: tuple[LiveServer, Seeded], guard: Guarded) -> None:
    server, _ = live
    page = guard.page()
    _sign_in(page, server, server.token("admin", agent="owner"))
    page.get_by_role("link", name="Admin").click()
    page.get_by_label("Scope").select_option("read")
    page.get_by_label("Repositories").fill("github.com/acme/*")
    page.get_by_label("Agent name").fill("nightly-ci")
    page.get_by_role("button", name="Create").click()
    secret = page.get_by_label("The new token").input_value()
    info = server.tokens.lookup(secret)
    assert info is not None and info.agent == "nightly-ci" and info.scope == "read"
    shoot(page, "admin")
    page.get_by_role("button", name=f"Revoke token {info.id}").click()
    expect(page.locator("tbody")).to_contain_text("revoked")
    assert server.tokens.lookup(secret).status() == "revoked"  # type: ignore[union-attr]


def test_the_dashboard_works_by_keyboard(live: tuple[LiveServer, Seeded], guard: Guarded) -> None:
    server, _ = live
    page = guard.page()
    page.goto(f"{server.url}/dashboard/login")
    assert page.evaluate("document.activeElement.id") == "token"  # the field has focus
    page.keyboard.type(server.token("read", (SHOP,)))
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{server.url}/dashboard/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")  # past the navigation, into the page
    for _ in range(12):  # tab through to the first repository link and open it with Enter
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == SHOP:
            break
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name=SHOP)).to_be_visible()


def test_text_contrast_is_at_least_4_5_to_1(live: tuple[LiveServer, Seeded], guard: Guarded) -> None:
    server, _ = live
    page = guard.page()
    _sign_in(page, server, server.token("admin"))
    for url in (
        "/dashboard/",
        TIMELINE,
        "/dashboard/search?q=sessions",
        "/dashboard/thoughts?include_invalidated=1",
        "/dashboard/admin",
    ):
        page.goto(f"{server.url}{url}")
        page.locator("details").evaluate_all("els => els.forEach(d => d.open = true)")
        assert page.evaluate(CONTRAST_JS) == [], url


def test_every_page_fits_a_375_px_wide_screen(live: tuple[LiveServer, Seeded], browser: Browser) -> None:
    server, seeded = live
    guard = Guarded(browser, width=375, height=812)
    try:
        page = guard.page()
        _sign_in(page, server, server.token("admin"))
        pages = {
            "repositories": "/dashboard/",
            "tasks": f"/dashboard/tasks?{urlencode({'repository': SHOP})}",
            "task-timeline": TIMELINE,
            "search": "/dashboard/search?q=sessions+end+early",
            "thoughts": "/dashboard/thoughts",
            "thought": f"/dashboard/thought?id={seeded.superseding}",
            "admin": "/dashboard/admin",
        }
        for name, url in pages.items():
            page.goto(f"{server.url}{url}")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 375, (name, width)
            shoot(page, f"mobile-{name}")
    finally:
        guard.close()
    assert guard.outside == []
