"""The webhook pages in a real browser (headless chromium) against a real server on 127.0.0.1 and
its SQLite store: create a subscription (its secret shown once, not after a reload), list it,
see a dead delivery to a real loopback receiver answering 500 with its error and redeliver it,
delete with the tick, a non-admin refused by the service, creating by keyboard alone, 375 px wide.
No request may leave 127.0.0.1 (the deliveries are sent by the test's deliverer, not the browser)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, expect

from mentis.api.webhooks import DeliveriesInput, ListWebhooksInput
from tests.dashboard.browser import Guarded, shoot, sign_in, tab_to
from tests.dashboard.seed import seed
from tests.dashboard.seed_webhooks import OPS, dead_letter, deliver, subscribe
from tests.dashboard.test_browser import CONTRAST_JS
from tests.http_support import LiveServer
from tests.webhooks.conftest import Receiver

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db: Path = tmp_path_factory.mktemp("webhooks") / "mentis.db"
    server = LiveServer(db, rate_per_second=1000.0, rate_burst=1000)
    seed(server.memory)
    with server:
        yield server


@pytest.fixture
def failing() -> Iterator[Receiver]:
    r = Receiver(fail=1_000)  # always 500
    yield r
    r.close()


def _hook_url(webhook_id: str) -> str:
    return f"/dashboard/webhook?{urlencode({'id': webhook_id})}"


def _urls(server: LiveServer) -> list[str]:
    return [h.url for h in server.memory.list_webhooks(OPS, ListWebhooksInput()).webhooks]


def test_creating_shows_the_secret_once_and_lists_the_subscription(live: LiveServer, guard: Guarded) -> None:
    page = guard.page()
    sign_in(page, live.url, live.token("admin", agent="ops-ann"))
    _, reader = live.tokens.create(scope="read", repositories=("github.com/acme/*",), agent="hook-reader")
    page.get_by_role("link", name="Webhooks").click()
    expect(page).to_have_url(f"{live.url}/dashboard/webhooks")
    url = "http://127.0.0.1:9/created-in-the-browser"
    page.get_by_label("URL").fill(url)
    page.get_by_label("attempt.recorded").check()
    page.get_by_label("skill.status").check()
    page.get_by_label("Token").select_option(reader.id)
    page.get_by_label("Repository").fill("github.com/acme/*")
    page.get_by_label("Attempt status").select_option("failed")
    page.get_by_label("Ids only").check()
    page.get_by_role("button", name="Create webhook").click()
    created = page.locator("#created")
    expect(created).to_contain_text("it will not be shown again")
    secret = page.locator("#new-secret").input_value()
    assert secret.startswith("whsec_")
    hook = next(h for h in live.memory.list_webhooks(OPS, ListWebhooksInput()).webhooks if h.url == url)
    assert (hook.events, hook.token_id, hook.repository, hook.status, hook.ids_only) == (
        ["attempt.recorded", "skill.status"],
        reader.id,
        "github.com/acme/*",
        "failed",
        True,
    )
    row = page.locator(f"#h-{hook.webhook_id}")
    expect(row).to_contain_text(url)
    expect(row).to_contain_text("ids only")
    expect(row).to_contain_text(f"token {reader.id}")
    expect(row).to_contain_text("by ops-ann")
    shoot(page, "webhooks-created")
    page.goto(f"{live.url}/dashboard/webhooks")  # reload: the secret is gone for good
    expect(page.locator("#created")).to_have_count(0)
    assert secret not in page.content()
    expect(page.locator(f"#h-{hook.webhook_id}")).to_contain_text(url)
    shoot(page, "webhooks")


def test_bad_input_is_named_and_nothing_is_created(live: LiveServer, guard: Guarded) -> None:
    page = guard.page()
    sign_in(page, live.url, live.token("admin"))
    _, reader = live.tokens.create(scope="read", repositories=("*",))
    before = _urls(live)
    for url, tick, field in (
        ("http://93.184.216.34/hook", True, "url"),  # plain http to a public address
        ("https://192.168.1.20/hook", True, "url"),  # a private address
        ("http://127.0.0.1:9/no-events", False, "events"),
    ):
        page.goto(f"{live.url}/dashboard/webhooks")
        page.get_by_label("URL").fill(url)
        if tick:
            page.get_by_label("thought.appended").check()
        page.get_by_label("Token").select_option(reader.id)
        page.get_by_role("button", name="Create webhook").click()
        expect(page.get_by_role("heading", name="Invalid input")).to_be_visible()
        expect(page.locator("main")).to_contain_text(field)
    shoot(page, "webhooks-bad-input")
    assert _urls(live) == before


def test_a_dead_letter_is_shown_with_its_error_and_redelivered(
    live: LiveServer, guard: Guarded, failing: Receiver
) -> None:
    dead = dead_letter(live.memory, live.tokens, failing)
    page = guard.page()
    sign_in(page, live.url, live.token("admin"))
    page.goto(f"{live.url}/dashboard/webhooks")
    page.locator(f"#h-{dead.webhook_id} a.task-link").click()
    expect(page).to_have_url(f"{live.url}{_hook_url(dead.webhook_id)}")
    page.wait_for_load_state("domcontentloaded")  # its deferred script attached the listener
    page.get_by_label("State").select_option("dead")  # applies at once (data-autosubmit)
    expect(page).to_have_url(re.compile(r"state=dead"))
    page.goto(f"{live.url}/dashboard/webhooks")
    page.locator(f"#h-{dead.webhook_id}").get_by_role("link", name="1 dead letter").click()
    expect(page).to_have_url(f"{live.url}{_hook_url(dead.webhook_id)}&state=dead")
    row = page.locator(f"[id='d-{dead.delivery_id}']")
    expect(row.locator(".state")).to_have_text("dead")
    expect(row).to_contain_text("last error: HTTP 500")
    expect(row).to_contain_text("attempt.recorded")
    shoot(page, "webhook-dead-letter")
    page.get_by_label("State").select_option("delivered")
    expect(page.locator("#no-deliveries")).to_contain_text("No delivery here in state delivered")
    page.goto(f"{live.url}{_hook_url(dead.webhook_id)}&state=dead")
    row.get_by_role("button", name=re.compile("Redeliver")).click()
    expect(page).to_have_url(re.compile(re.escape(_hook_url(dead.webhook_id)) + "#d-"))
    expect(row.locator(".state")).to_have_text("pending")
    expect(row).to_contain_text("due 20")
    shoot(page, "webhook-redelivered")
    failing.fail = 0  # the receiver is mended; the test's deliverer sends it
    deliver(live.memory, live.tokens)
    page.reload()
    expect(row.locator(".state")).to_have_text("delivered")
    expect(row).to_contain_text("last answer HTTP 204")
    (done,) = live.memory.webhook_deliveries(OPS, DeliveriesInput(webhook_id=dead.webhook_id)).deliveries
    assert done.state == "delivered" and len(failing.requests) == 2


def test_delete_needs_the_tick(live: LiveServer, guard: Guarded) -> None:
    webhook_id = subscribe(live.memory, live.tokens, "http://127.0.0.1:9/to-delete")
    page = guard.page()
    sign_in(page, live.url, live.token("admin"))
    page.goto(f"{live.url}{_hook_url(webhook_id)}")
    page.get_by_role("button", name="Delete webhook").click()  # the tick is required: nothing sent
    expect(page).to_have_url(f"{live.url}{_hook_url(webhook_id)}")
    assert "http://127.0.0.1:9/to-delete" in _urls(live)
    page.get_by_label("I understand this webhook will receive nothing more").check()
    page.get_by_role("button", name="Delete webhook").click()
    expect(page).to_have_url(f"{live.url}/dashboard/webhooks")
    expect(page.locator(f"#h-{webhook_id}")).to_have_count(0)
    assert "http://127.0.0.1:9/to-delete" not in _urls(live)


def test_a_write_token_has_no_link_and_is_refused_by_the_service(live: LiveServer, guard: Guarded) -> None:
    page = guard.page()
    sign_in(page, live.url, live.token("write", ("*",)))
    expect(page.get_by_role("link", name="Webhooks")).to_have_count(0)
    page.goto(f"{live.url}/dashboard/webhooks")
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.locator("main")).to_contain_text("admin")
    expect(page.locator("form[action*='/webhooks/']")).to_have_count(0)
    shoot(page, "webhooks-refused")


def test_a_webhook_is_created_by_keyboard_alone(live: LiveServer, guard: Guarded) -> None:
    page = guard.page()
    sign_in(page, live.url, live.token("admin"))
    _, reader = live.tokens.create(scope="read", repositories=("*",), agent="keyboard-reader")
    tab_to(page, "a[href$='/dashboard/webhooks']", 120)
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{live.url}/dashboard/webhooks")
    tab_to(page, "#url", 120)
    page.keyboard.type("http://127.0.0.1:9/keyboard")
    tab_to(page, "input[name='event:thought.appended']", 120)
    page.keyboard.press("Space")
    tab_to(page, "#token_id", 120)
    for _ in range(40):  # down the list to the reader's token
        if page.evaluate("() => document.activeElement.value") == reader.id:
            break
        page.keyboard.press("ArrowDown")
    assert page.evaluate("() => document.activeElement.value") == reader.id
    tab_to(page, "button.primary", 120)
    page.keyboard.press("Enter")
    expect(page.locator("#created")).to_contain_text("it will not be shown again")
    hook = next(
        h for h in live.memory.list_webhooks(OPS, ListWebhooksInput()).webhooks if h.url.endswith("/keyboard")
    )
    assert (hook.events, hook.token_id) == (["thought.appended"], reader.id)


def test_text_contrast_on_the_webhook_pages_is_at_least_4_5_to_1(
    live: LiveServer, guard: Guarded, failing: Receiver
) -> None:
    dead = dead_letter(live.memory, live.tokens, failing)
    page = guard.page()
    sign_in(page, live.url, live.token("admin"))
    for url in ("/dashboard/webhooks", _hook_url(dead.webhook_id)):
        page.goto(f"{live.url}{url}")
        assert page.evaluate(CONTRAST_JS) == [], url


def test_every_webhook_page_fits_a_375_px_wide_screen(
    live: LiveServer, browser: Browser, failing: Receiver
) -> None:
    dead = dead_letter(live.memory, live.tokens, failing)
    guard = Guarded(browser, width=375, height=812)
    try:
        page = guard.page()
        sign_in(page, live.url, live.token("admin"))
        _, reader = live.tokens.create(scope="read", repositories=("*",))
        page.goto(f"{live.url}/dashboard/webhooks")
        page.get_by_label("URL").fill("http://127.0.0.1:9/narrow-screen-with-a-rather-long-path/for/wrapping")
        page.get_by_label("branch.merged").check()
        page.get_by_label("Token").select_option(reader.id)
        page.get_by_role("button", name="Create webhook").click()
        expect(page.locator("#created")).to_be_visible()
        for name, go in (
            ("webhooks-created", None),
            ("webhooks", "/dashboard/webhooks"),
            ("webhook", _hook_url(dead.webhook_id)),
        ):
            if go:
                page.goto(f"{live.url}{go}")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 375, (name, width)
            shoot(page, f"mobile-{name}")
    finally:
        guard.close()
    assert guard.outside == []
