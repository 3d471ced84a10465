"""The branch page and private records in a real browser (headless chromium) against a real
server on 127.0.0.1 and its SQLite store: the branch page reached from the repositories page, a
branch merged by keyboard alone with its conflict shown, a bad name refused with the field named
and nothing written, 375 px wide; a private attempt's badge seen by its writer, who publishes it,
after which another agent reads it. No request may leave 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.dashboard.browser import Guarded, shoot, sign_in, tab_to
from tests.dashboard.seed import SHOP, seed
from tests.dashboard.test_branch_forms import ALICE, _conflicting_branch
from tests.dashboard.test_scope_forms import TASK, _private_attempt
from tests.http_support import LiveServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db: Path = tmp_path_factory.mktemp("branches") / "mentis.db"
    server = LiveServer(db, rate_per_second=1000.0, rate_burst=1000)
    seed(server.memory)
    _conflicting_branch(server.memory)
    _private_attempt(server.memory)
    with server:
        yield server


def test_a_branch_is_merged_by_keyboard_and_its_conflict_shown(live: LiveServer, guard: Guarded) -> None:
    page = guard.page()
    sign_in(page, live.url, live.token("admin"))
    page.get_by_role("link", name="branches (1)").click()
    expect(page.get_by_role("heading", name=f"Branches of {SHOP}")).to_be_visible()
    expect(page.locator("#branches")).to_contain_text("not merged")
    shoot(page, "branches")
    tab_to(page, "#merge-confirm")
    page.keyboard.press("Space")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(page.locator("#merged")).to_contain_text(f"Merged fix/cart into {SHOP}")
    expect(page.locator("#conflicts")).to_contain_text("cart.py rewritten")
    expect(page.locator("#branches")).to_contain_text(SHOP)
    shoot(page, "branches-merged")
    assert [b.merged_into for b in live.memory.list_branches(ALICE, SHOP)] == [[SHOP]]


def test_a_bad_branch_name_is_named_and_nothing_is_written(live: LiveServer, guard: Guarded) -> None:
    page = guard.page()
    sign_in(page, live.url, live.token("admin"))
    before = [e.hash for e, _ in live.memory.store.iter_ledger()]
    page.goto(f"{live.url}/dashboard/branches?repository={SHOP}")
    page.get_by_label("Name").fill("feature..x")
    page.get_by_role("button", name="Fork").click()
    expect(page.get_by_role("heading", name="Invalid input")).to_be_visible()
    expect(page.locator("main")).to_contain_text("branch")
    shoot(page, "branches-bad-name")
    assert [e.hash for e, _ in live.memory.store.iter_ledger()] == before


def test_the_branch_page_fits_a_375_px_wide_screen(live: LiveServer, browser: Browser) -> None:
    guard = Guarded(browser, width=375, height=812)
    try:
        page = guard.page()
        sign_in(page, live.url, live.token("admin"))
        page.goto(f"{live.url}/dashboard/branches?repository={SHOP}")
        expect(page.locator("#branches")).to_be_visible()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 375, width
        shoot(page, "mobile-branches")
    finally:
        guard.close()
    assert guard.outside == []


def test_a_private_attempt_is_published_by_its_writer_and_then_read_by_another_agent(
    live: LiveServer, guard: Guarded, browser: Browser
) -> None:
    other = Guarded(browser)  # bob signs in in a context of his own
    alice, bob = guard.page(), other.page()
    sign_in(alice, live.url, live.token("write", agent="alice-agent"))
    sign_in(bob, live.url, live.token("write", agent="bob-agent"))
    bob.goto(f"{live.url}{TASK}")
    expect(bob.get_by_role("heading", name="Not found")).to_be_visible()
    alice.goto(f"{live.url}{TASK}")
    expect(alice.locator(".badge-private")).to_have_text("private: agent")
    alice.get_by_label("Make visible to").select_option("repository")
    alice.get_by_role("button", name="Publish").click()
    expect(alice.locator(".badge-private")).to_have_count(0)
    shoot(alice, "task-published")
    bob.goto(f"{live.url}{TASK}")
    expect(bob.locator("main")).to_contain_text("p95 fell from 900 ms to 120 ms")
    other.close()
    assert other.outside == []
