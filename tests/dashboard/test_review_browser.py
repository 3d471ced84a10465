"""The review queue in a real browser (headless chromium) against a real server on 127.0.0.1 and
its SQLite store, the proposals queued through ``Memory.propose``: list and filter the queue,
accept a proposal with an edit and follow the link to the attempt it wrote, reject one with a
reason (offered again, it comes back as known and rejected), bad input named, a read token refused
by the service, a form without its CSRF token refused, accepting by keyboard alone, 375 px wide.
No request may leave 127.0.0.1."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, Page, expect

from mentis.api.attempts import RecallInput
from mentis.api.review import ListProposalsInput, ShowProposalInput
from mentis.service.memory import Caller
from tests.dashboard.browser import Guarded, shoot, sign_in, tab_to
from tests.dashboard.seed import BILLING, SHOP, seed
from tests.dashboard.seed_review import (
    IN_BILLING,
    PROPOSER,
    THOUGHT,
    THOUGHT_CONTENT,
    observation,
    seed_review,
)
from tests.dashboard.test_browser import CONTRAST_JS
from tests.http_support import LiveServer
from tests.review.test_queue import draft

pytestmark = [pytest.mark.browser, pytest.mark.slow]
ME = Caller(agent_id="test-reader", admin=True)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[int, str]]]:
    db: Path = tmp_path_factory.mktemp("review") / "mentis.db"
    server = LiveServer(db, rate_per_second=1000.0, rate_burst=1000)
    seed(server.memory)
    ids = seed_review(server.memory)
    with server:
        yield server, ids


def _url(proposal_id: str) -> str:
    return f"/dashboard/proposal?{urlencode({'id': proposal_id})}"


def _status(server: LiveServer, proposal_id: str) -> str:
    return server.memory.show_proposal(ME, ShowProposalInput(proposal_id=proposal_id)).status


def _task_of(server: LiveServer, attempt_id: str) -> str:
    sql = "select task_id from attempts where attempt_id = :id"
    return str(server.memory.recall(ME, RecallInput(sql=sql, params={"id": attempt_id})).rows[0][0])


def test_the_queue_lists_proposals_with_their_source_and_filters_them(
    live: tuple[LiveServer, dict[int, str]], guard: Guarded
) -> None:
    server, ids = live
    page = guard.page()
    sign_in(page, server.url, server.token("read", ("*",)))
    pending = server.memory.list_proposals(ME, ListProposalsInput())
    expect(page.locator("#pending-count")).to_have_text(str(pending.total))
    page.get_by_role("link", name="Review").click()
    expect(page).to_have_url(f"{server.url}/dashboard/review")
    first = page.locator(f"#p-{ids[1]}")
    expect(first).to_contain_text(observation(1))
    expect(first).to_contain_text("pytest -q")
    expect(first).to_contain_text("/t/s.jsonl")
    expect(first).to_contain_text("lines 1–4")
    expect(first).to_contain_text("by mentis-propose")
    expect(first).to_contain_text(SHOP)
    expect(page.locator(f"#p-{ids[THOUGHT]}")).to_contain_text(THOUGHT_CONTENT)
    expect(page.locator(f"#p-{ids[THOUGHT]}")).to_contain_text("thought · LLMExtracted")
    shoot(page, "review")
    page.wait_for_load_state("domcontentloaded")  # its deferred script attached the listener
    page.get_by_label("Repository").select_option(BILLING)  # applies at once (data-autosubmit)
    expect(page).to_have_url(re.compile(r"repository=github.com%2Facme%2Fbilling"))
    expect(page.locator("ul.proposals > li")).to_have_count(1)
    expect(page.locator("ul.proposals")).to_contain_text(observation(IN_BILLING))
    page.get_by_label("Status").select_option("rejected")
    expect(page).to_have_url(re.compile(r"status=rejected"))
    expect(page.locator("ul.proposals")).to_have_count(0)
    expect(page.locator("main")).to_contain_text("No proposal here with status rejected")
    page.goto(f"{server.url}/dashboard/review")
    page.get_by_role("link", name=observation(1)).click()
    expect(page).to_have_url(f"{server.url}{_url(ids[1])}")
    expect(page.locator("#check-output")).to_have_text("E assert")
    expect(page.locator("#read-only")).to_contain_text("may only read")
    expect(page.locator("form[action*='/review/']")).to_have_count(0)
    shoot(page, "proposal-read-only")


def test_accepting_with_an_edit_writes_the_edited_attempt_and_links_to_it(
    live: tuple[LiveServer, dict[int, str]], guard: Guarded
) -> None:
    server, ids = live
    page = guard.page()
    sign_in(page, server.url, server.token("write", (SHOP,), agent="reviewer-ann"))
    page.goto(f"{server.url}{_url(ids[2])}")
    expect(page.get_by_label("Observation")).to_have_value(observation(2))
    expect(page.get_by_label("Task id")).to_have_value("main-5f0c2a9e")
    expect(page.get_by_label("Tags")).to_have_value("transcript, claude-code")
    shoot(page, "proposal")
    page.get_by_label("Task id").fill("invoice-rounding")
    page.get_by_label("Inference").fill("rounding happens per line, not per invoice")
    page.get_by_role("button", name="Accept").click()
    expect(page.locator("#proposal-status")).to_have_text("accepted")
    expect(page.locator("#decision")).to_contain_text("by reviewer-ann")
    expect(page.locator("form[action*='/review/']")).to_have_count(0)
    shown = server.memory.show_proposal(ME, ShowProposalInput(proposal_id=ids[2]))
    assert (shown.status, shown.decided_by) == ("accepted", "reviewer-ann") and shown.record_id
    expect(page.locator("#record-link")).to_have_text(shown.record_id)
    shoot(page, "proposal-accepted")
    assert _task_of(server, shown.record_id) == "invoice-rounding"
    page.locator("#record-link").click()
    attempt = page.locator(f"#a-{shown.record_id}")
    expect(attempt).to_contain_text(observation(2))
    expect(attempt).to_contain_text("rounding happens per line, not per invoice")
    expect(attempt).to_contain_text("reviewer-ann")


def test_rejecting_with_a_reason_is_remembered_when_proposed_again(
    live: tuple[LiveServer, dict[int, str]], guard: Guarded
) -> None:
    server, ids = live
    page = guard.page()
    sign_in(page, server.url, server.token("write", (SHOP,), agent="reviewer-bo"))
    page.goto(f"{server.url}{_url(ids[3])}")
    page.get_by_label("Why reject it?").fill("a flaky run, not a finding")
    page.get_by_role("button", name="Reject").click()
    expect(page.locator("#proposal-status")).to_have_text("rejected")
    expect(page.locator("#decision")).to_contain_text("a flaky run, not a finding")
    expect(page.locator("#decision")).to_contain_text("by reviewer-bo")
    expect(page.locator("form[action*='/review/']")).to_have_count(0)
    shoot(page, "proposal-rejected")
    again = server.memory.propose(PROPOSER, [draft(3, SHOP)])
    assert again.queued == [] and [(k.proposal_id, k.status) for k in again.known] == [(ids[3], "rejected")]
    page.goto(f"{server.url}/dashboard/review?status=rejected")
    expect(page.locator(f"#p-{ids[3]}")).to_contain_text("rejected")


def test_bad_input_names_the_field_and_writes_nothing(
    live: tuple[LiveServer, dict[int, str]], guard: Guarded
) -> None:
    server, ids = live
    page = guard.page()
    sign_in(page, server.url, server.token("write", (SHOP,)))
    before = server.ledger()
    page.goto(f"{server.url}{_url(ids[4])}")
    page.get_by_label("Why reject it?").fill("   ")  # blank once trimmed
    page.get_by_role("button", name="Reject").click()
    expect(page.get_by_role("heading", name="Invalid input")).to_be_visible()
    expect(page.locator("main")).to_contain_text("reason")
    page.goto(f"{server.url}{_url(ids[4])}")
    page.get_by_label("Observation").fill("")
    page.get_by_role("button", name="Accept").click()
    expect(page.get_by_role("heading", name="Invalid input")).to_be_visible()
    expect(page.locator("main")).to_contain_text("edits.observation")
    shoot(page, "proposal-bad-edit")
    page.goto(f"{server.url}{_url('prop-nope')}")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.locator("main")).to_contain_text("proposal_id: no proposal 'prop-nope'")
    assert server.ledger() == before and _status(server, ids[4]) == "pending"


def _submit_form(page: Page, action: str, fields: dict[str, str], csrf: bool = True) -> None:
    """Post a form the page does not offer, with (or without) the session's CSRF token."""
    page.evaluate(
        """([action, fields, csrf]) => {
          const form = document.createElement('form');
          form.method = 'post';
          form.action = action;
          const all = csrf ? {...fields, csrf: document.querySelector('input[name=csrf]').value} : fields;
          for (const [name, value] of Object.entries(all)) {
            const input = document.createElement('input');
            input.type = 'hidden'; input.name = name; input.value = value;
            form.appendChild(input);
          }
          document.body.appendChild(form);
          form.submit();
        }""",
        [action, fields, csrf],
    )


def test_a_read_token_and_a_form_without_csrf_are_refused_and_nothing_changes(
    live: tuple[LiveServer, dict[int, str]], guard: Guarded
) -> None:
    server, ids = live
    page = guard.page()
    sign_in(page, server.url, server.token("read", (SHOP,), agent="just-looking"))
    before = server.ledger()
    page.goto(f"{server.url}{_url(ids[5])}")
    expect(page.locator("form[action*='/review/']")).to_have_count(0)
    _submit_form(page, f"{server.url}/dashboard/review/accept", {"proposal_id": ids[5], "task_id": "sneaky"})
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.locator("main")).to_contain_text("this caller may only read")
    shoot(page, "proposal-refused")
    page.goto(f"{server.url}{_url(ids[5])}")
    _submit_form(page, f"{server.url}/dashboard/review/reject", {"proposal_id": ids[5], "reason": "no"})
    expect(page.locator("main")).to_contain_text("this caller may only read")
    guard.context.clear_cookies()
    sign_in(page, server.url, server.token("write", (SHOP,)))
    page.goto(f"{server.url}{_url(ids[5])}")
    _submit_form(page, f"{server.url}/dashboard/review/reject", {"proposal_id": ids[5], "reason": "x"}, False)
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.locator("main")).to_contain_text("security token is missing")
    assert server.ledger() == before and _status(server, ids[5]) == "pending"


def test_a_proposal_decided_in_another_tab_is_a_conflict_shown_clearly(
    live: tuple[LiveServer, dict[int, str]], guard: Guarded
) -> None:
    server, ids = live
    page = guard.page()
    sign_in(page, server.url, server.token("write", (SHOP,), agent="slow-reviewer"))
    page.goto(f"{server.url}{_url(ids[6])}")  # the forms are on screen ...
    other = guard.page()  # ... while the same person rejects it in another tab
    other.goto(f"{server.url}{_url(ids[6])}")
    other.get_by_label("Why reject it?").fill("duplicate of an earlier run")
    other.get_by_role("button", name="Reject").click()
    expect(other.locator("#proposal-status")).to_have_text("rejected")
    before = server.ledger()
    page.get_by_role("button", name="Accept").click()
    expect(page.locator("#conflict")).to_contain_text(
        f"proposal '{ids[6]}' is already rejected by slow-reviewer"
    )
    expect(page.locator("#proposal-status")).to_have_text("rejected")
    expect(page.locator("form[action*='/review/']")).to_have_count(0)
    shoot(page, "proposal-conflict")
    assert server.ledger() == before


def test_a_proposal_is_accepted_by_keyboard_alone(
    live: tuple[LiveServer, dict[int, str]], guard: Guarded
) -> None:
    server, ids = live
    page = guard.page()
    sign_in(page, server.url, server.token("write", (SHOP,), agent="keyboard-reviewer"))
    tab_to(page, "a[href$='/dashboard/review']")
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{server.url}/dashboard/review")
    tab_to(page, f"a[href$='{_url(ids[7]).split('?')[1]}']")
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{server.url}{_url(ids[7])}")
    tab_to(page, "#edit-task_title")
    page.keyboard.type("Invoice rounding")
    tab_to(page, "button.primary")
    page.keyboard.press("Enter")
    expect(page.locator("#proposal-status")).to_have_text("accepted")
    record_id = server.memory.show_proposal(ME, ShowProposalInput(proposal_id=ids[7])).record_id
    assert record_id is not None
    sql = "select task_title, agent_id from attempts where attempt_id = :id"
    rows = server.memory.recall(ME, RecallInput(sql=sql, params={"id": record_id})).rows
    assert rows == [["Invoice rounding", "keyboard-reviewer"]]


def test_text_contrast_on_the_review_pages_is_at_least_4_5_to_1(
    live: tuple[LiveServer, dict[int, str]], guard: Guarded
) -> None:
    server, ids = live
    page = guard.page()
    sign_in(page, server.url, server.token("write", ("*",)))
    for url in (
        "/dashboard/review",
        "/dashboard/review?status=all",
        _url(ids[8]),
        _url(ids[2]),
        _url(ids[THOUGHT]),
    ):
        page.goto(f"{server.url}{url}")
        assert page.evaluate(CONTRAST_JS) == [], url


def test_every_review_page_fits_a_375_px_wide_screen(
    live: tuple[LiveServer, dict[int, str]], browser: Browser
) -> None:
    server, ids = live
    guard = Guarded(browser, width=375, height=812)
    try:
        page = guard.page()
        sign_in(page, server.url, server.token("write", ("*",)))
        pages = {
            "review": "/dashboard/review?status=all",
            "proposal": _url(ids[IN_BILLING]),
            "proposal-decided": _url(ids[2]),
            "proposal-thought": _url(ids[THOUGHT]),
        }
        for name, url in pages.items():
            page.goto(f"{server.url}{url}")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 375, (name, width)
            shoot(page, f"mobile-{name}")
    finally:
        guard.close()
    assert guard.outside == []
