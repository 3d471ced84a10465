"""Headless chromium for the browser tests: Debian's /usr/bin/chromium driven by playwright.

``playwright install`` cannot download browsers here, so the system package is launched by path.
Without it the tests are skipped with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Route, expect, sync_playwright

CHROMIUM = Path(os.environ.get("MENTIS_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
LOCAL_HOSTS = frozenset({"127.0.0.1"})
TIMEOUT_MS = 10_000


def launch() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: apt-get install chromium (the browser tests need it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # chromium refuses root without it
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=args)
        try:
            yield browser
        finally:
            browser.close()


class Guarded:
    """A browser context whose every request is checked: anything not for 127.0.0.1 is aborted
    and recorded, so a test can assert that nothing left the machine."""

    def __init__(self, browser: Browser, width: int = 1280, height: int = 900) -> None:
        self.outside: list[str] = []
        self.context: BrowserContext = browser.new_context(
            viewport={"width": width, "height": height}, service_workers="block"
        )
        self.context.set_default_timeout(TIMEOUT_MS)
        self.context.route("**/*", self._check)

    def _check(self, route: Route) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if parts.scheme in ("data", "blob", "about") or (parts.hostname or "") in LOCAL_HOSTS:
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def page(self) -> Page:
        return self.context.new_page()

    def close(self) -> None:
        self.context.close()


def shoot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def sign_in(page: Page, url: str, token: str) -> None:
    """Sign in to the dashboard at ``url`` with ``token`` through its login form."""
    page.goto(f"{url}/dashboard/login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{url}/dashboard/")


def tab_to(page: Page, selector: str, limit: int = 80) -> None:
    """Press Tab until the focused element matches ``selector``."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("s => document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")
