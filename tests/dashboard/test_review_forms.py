"""The review queue's pages over plain HTTP on the whole app and a real SQLite store: the queue
and its filters, accepting (only the changed fields are edits) and rejecting through the forms,
bad input naming its field and writing nothing, CSRF, a read token refused by the service, a
conflict when a proposal was decided meanwhile, scopes, and the nav's pending count."""

from __future__ import annotations

import html
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

from mentis.api.attempts import RecallInput
from mentis.api.review import ListProposalsInput, RejectProposalInput, ShowProposalInput
from mentis.api.thoughts import GetThoughtInput
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore
from tests.dashboard.conftest import csrf_of, login, make_token
from tests.dashboard.seed import BILLING, SHOP
from tests.dashboard.seed_review import IN_BILLING, THOUGHT, THOUGHT_CONTENT, observation, seed_review
from tests.review.test_queue import draft

ME = Caller(agent_id="test-reader", admin=True)


@pytest.fixture
def ids(memory: Memory) -> dict[int, str]:
    return seed_review(memory)


def _url(proposal_id: str) -> str:
    return f"/dashboard/proposal?{urlencode({'id': proposal_id})}"


def _ledger(memory: Memory) -> list[str]:
    return [e.hash for e, _ in memory.store.iter_ledger()]


def _status(memory: Memory, proposal_id: str) -> str:
    return memory.show_proposal(ME, ShowProposalInput(proposal_id=proposal_id)).status


def _prefilled(page: str) -> dict[str, str]:
    """The accept form's fields as the page fills them."""
    form = html.unescape(page.split('action="/dashboard/review/accept"')[1].split("</form>")[0])
    fields: dict[str, str] = {}
    for name in ("proposal_id", "task_id", "task_title", "tags"):
        fields[name] = form.split(f'name="{name}"')[1].split('value="')[1].split('"')[0]
    for name in ("action", "observation", "inference"):
        fields[name] = form.split(f'name="{name}"')[1].split(">", 1)[1].split("</textarea>")[0]
    return fields


def _attempts(memory: Memory) -> list[tuple[str, str, str, str]]:
    sql = (
        "select attempt_id, task_id, agent_id, observation from attempts "
        "where observation like '%invoice rounding%' order by created_at"
    )
    rows = memory.recall(ME, RecallInput(sql=sql)).rows
    return [(str(a), str(b), str(c), str(d)) for a, b, c, d in rows]


def test_the_queue_lists_pending_proposals_and_filters_by_status_and_repository(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "write", ("*",)))
    page = html.unescape(client.get("/dashboard/review").text)
    for n, proposal_id in ids.items():
        assert (THOUGHT_CONTENT if n == THOUGHT else observation(n)) in page and _url(proposal_id) in page
    assert "thought · LLMExtracted" in page
    assert "pytest -q" in page and "/t/s.jsonl" in page and "lines 1–4" in page
    assert "by mentis-propose" in page and BILLING in page
    assert ">10 proposals, oldest first" in page
    only_billing = client.get(f"/dashboard/review?{urlencode({'repository': BILLING})}").text
    assert observation(IN_BILLING) in only_billing and observation(1) not in only_billing
    csrf = csrf_of(client.get(_url(ids[1])).text)
    client.post("/dashboard/review/reject", data={"csrf": csrf, "proposal_id": ids[1], "reason": "flaky"})
    assert observation(1) not in html.unescape(client.get("/dashboard/review").text)
    rejected = html.unescape(client.get("/dashboard/review?status=rejected").text)
    assert (
        observation(1) in rejected
        and observation(2) not in rejected
        and "rejected " in rejected
        and "by write-person" in rejected
    )
    every = html.unescape(client.get("/dashboard/review?status=all").text)
    assert all(observation(n) in every for n in ids if n != THOUGHT) and THOUGHT_CONTENT in every
    bad = client.get("/dashboard/review?status=gone")
    assert bad.status_code == 422 and "status parameter" in bad.text
    bad = client.get("/dashboard/review?" + urlencode({"repository": "a\x01b"}))
    assert bad.status_code == 422 and "repository" in bad.text


def test_accepting_with_an_edit_records_the_edited_attempt_and_the_proposal_links_to_it(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "write", (SHOP,)))
    page = client.get(_url(ids[2])).text
    fields = _prefilled(page)
    assert fields["observation"] == observation(2) and fields["tags"] == "transcript, claude-code"
    assert fields["task_id"] == "main-5f0c2a9e" and fields["inference"] == ""
    fields["task_id"] = "invoice-rounding"
    fields["action"] = fields["action"] + "\r\n"  # a browser's textarea line end; unchanged once trimmed
    done = client.post("/dashboard/review/accept", data={**fields, "csrf": csrf_of(page)})
    assert done.url.path == "/dashboard/proposal"
    [(attempt_id, task_id, agent, obs)] = _attempts(memory)
    assert (task_id, agent, obs) == ("invoice-rounding", "write-person", observation(2))
    shown = memory.show_proposal(ME, ShowProposalInput(proposal_id=ids[2]))
    assert (shown.status, shown.decided_by, shown.record_id) == ("accepted", "write-person", attempt_id)
    text = html.unescape(done.text)
    assert 'id="proposal-status">accepted' in text and "by write-person" in text
    link = f"/dashboard/task?{urlencode({'repository': SHOP, 'task_id': 'invoice-rounding'})}#a-{attempt_id}"
    assert f'href="{link}"' in text
    assert 'action="/dashboard/review/' not in text  # decided: no forms
    timeline = html.unescape(client.get(link.split("#")[0]).text)
    assert f'id="a-{attempt_id}"' in timeline and observation(2) in timeline
    row = memory.recall(
        ME, RecallInput(sql="select tags from attempts where attempt_id = :id", params={"id": attempt_id})
    ).rows[0][0]
    assert f"proposal:{ids[2]}" in str(row) and "claude-code" in str(row)


def test_an_accept_with_nothing_changed_sends_no_edits(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "write", (SHOP,)))
    page = client.get(_url(ids[3])).text
    client.post("/dashboard/review/accept", data={**_prefilled(page), "csrf": csrf_of(page)})
    [(_, task_id, _, obs)] = _attempts(memory)
    assert (task_id, obs) == ("main-5f0c2a9e", observation(3))
    sql = "select inference, task_title from attempts where task_id = 'main-5f0c2a9e'"
    assert memory.recall(ME, RecallInput(sql=sql)).rows == [[None, None]]  # blanks stayed unset


def test_a_thought_proposal_is_accepted_with_its_content_edited_and_links_to_the_thought(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "write", (SHOP,)))
    page = html.unescape(client.get(_url(ids[THOUGHT])).text)
    assert "Proposed thought" in page and "LLMExtracted" in page and THOUGHT_CONTENT in page
    assert 'name="content"' in page and 'name="observation"' not in page and "<dd>20–24</dd>" in page
    csrf = csrf_of(page)
    before = _ledger(memory)
    wrong = client.post(
        "/dashboard/review/accept",
        data={"csrf": csrf, "proposal_id": ids[THOUGHT], "observation": "an attempt's field"},
    )
    assert wrong.status_code == 422 and "edits.observation: a thought has no observation" in wrong.text
    assert _ledger(memory) == before
    edited = "Round totals once, at the end (Decimal, ROUND_HALF_UP)."
    done = client.post(
        "/dashboard/review/accept",
        data={"csrf": csrf, "proposal_id": ids[THOUGHT], "content": edited, "task_id": "main-5f0c2a9e"},
    )
    shown = memory.show_proposal(ME, ShowProposalInput(proposal_id=ids[THOUGHT]))
    assert shown.status == "accepted" and shown.record_id
    thought = memory.get_thought(ME, GetThoughtInput(thought_id=shown.record_id))
    assert (thought.content, thought.agent_id) == (edited, "write-person")
    assert f"proposal:{ids[THOUGHT]}" in thought.tags
    link = f"/dashboard/thought?{urlencode({'id': shown.record_id})}"
    assert f'href="{link}"' in done.text and 'action="/dashboard/review/' not in done.text
    shown_page = html.unescape(client.get(link).text)
    assert edited in shown_page
    # its provenance: the proposal's source episode, inside the thought's hash, on its page
    assert thought.source_episode == {
        "transcript": "/t/s.jsonl",
        "session_id": "5f0c2a9e",
        "from_line": 20,
        "to_line": 24,
    }
    assert "<dt>Source</dt>" in shown_page and "/t/s.jsonl</span> · lines 20–24 · session" in shown_page
    listed = html.unescape(client.get("/dashboard/thoughts?source_session=5f0c2a9e").text)
    assert edited in listed and 'value="5f0c2a9e"' in listed
    assert edited not in html.unescape(client.get("/dashboard/thoughts?source_session=other").text)


def test_rejecting_keeps_the_reason_and_the_same_proposal_is_not_offered_again(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "write", (SHOP,)))
    page = client.get(_url(ids[4])).text
    done = client.post(
        "/dashboard/review/reject",
        data={"csrf": csrf_of(page), "proposal_id": ids[4], "reason": "a flaky run, not a finding"},
    )
    text = html.unescape(done.text)
    assert 'id="proposal-status">rejected' in text and "a flaky run, not a finding" in text
    assert 'action="/dashboard/review/' not in text
    again = memory.propose(Caller(agent_id="mentis-propose"), [draft(4, SHOP)])
    assert again.queued == [] and [(k.proposal_id, k.status) for k in again.known] == [(ids[4], "rejected")]
    assert _attempts(memory) == []


def test_bad_input_names_the_field_and_writes_nothing(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "write", ("*",)))
    page = client.get(_url(ids[5])).text
    csrf, fields = csrf_of(page), _prefilled(page)
    before = _ledger(memory)
    bad: list[tuple[str, dict[str, str], int, str]] = [
        ("/dashboard/review/reject", {"proposal_id": ids[5], "reason": "  "}, 422, "reason"),
        ("/dashboard/review/reject", {"proposal_id": ids[5]}, 422, "reason"),
        ("/dashboard/review/reject", {"proposal_id": "prop-nope", "reason": "r"}, 404, "proposal_id"),
        ("/dashboard/review/reject", {"proposal_id": "", "reason": "r"}, 422, "proposal_id"),
        ("/dashboard/review/accept", {**fields, "observation": ""}, 422, "edits.observation"),
        ("/dashboard/review/accept", {**fields, "action": " "}, 422, "edits.action"),
        ("/dashboard/review/accept", {**fields, "task_id": "a\x01b"}, 422, "edits.task_id"),
        ("/dashboard/review/accept", {**fields, "tags": "ok, bad\x01tag"}, 422, "edits.tags"),
        ("/dashboard/review/accept", {**fields, "proposal_id": "prop-nope"}, 404, "proposal_id"),
        ("/dashboard/review/accept", {"proposal_id": ""}, 422, "proposal_id"),
    ]
    for url, data, status, field in bad:
        response = client.post(url, data={**data, "csrf": csrf})
        text = html.unescape(response.text)
        assert response.status_code == status, (url, data, response.status_code)
        assert field in text.split('<section class="card error"')[1], (url, data, text[-600:])
        assert "Traceback" not in text
    assert _ledger(memory) == before
    assert _status(memory, ids[5]) == "pending"
    assert client.get(_url("prop-nope")).status_code == 404
    assert client.get("/dashboard/proposal").status_code == 422


def test_every_review_form_without_its_csrf_token_is_refused_and_writes_nothing(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "write", ("*",)))
    before = _ledger(memory)
    forms = [
        ("/dashboard/review/accept", {"proposal_id": ids[6]}),
        ("/dashboard/review/reject", {"proposal_id": ids[6], "reason": "no"}),
    ]
    for url, data in forms:
        for csrf in (None, "0" * 64):
            response = client.post(url, data=data if csrf is None else {**data, "csrf": csrf})
            assert response.status_code == 403 and "security token" in response.text, url
    assert _ledger(memory) == before and _status(memory, ids[6]) == "pending"


def test_a_read_token_sees_no_form_and_its_posts_get_the_services_refusal(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "read", (SHOP,)))
    page = client.get(_url(ids[7])).text
    assert 'action="/dashboard/review/' not in page and 'id="read-only"' in page
    csrf = csrf_of(page)  # the sign-out form's
    before = _ledger(memory)
    for url, data in (
        ("/dashboard/review/accept", {"proposal_id": ids[7], "task_id": "sneaky"}),
        ("/dashboard/review/reject", {"proposal_id": ids[7], "reason": "not mine to say"}),
    ):
        response = client.post(url, data={**data, "csrf": csrf})
        assert response.status_code == 403 and "may only read" in response.text, url
    assert _ledger(memory) == before and _status(memory, ids[7]) == "pending"


def test_a_proposal_decided_meanwhile_is_a_conflict_shown_on_the_proposal(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "write", ("*",)))
    page = client.get(_url(ids[8])).text  # the forms, still pending
    csrf, fields = csrf_of(page), _prefilled(page)
    other = client.post(
        "/dashboard/review/reject", data={"csrf": csrf, "proposal_id": ids[8], "reason": "dup"}
    )
    assert other.status_code == 200
    before = _ledger(memory)
    for url, data in (
        ("/dashboard/review/accept", fields),
        ("/dashboard/review/reject", {"proposal_id": ids[8], "reason": "late"}),
    ):
        response = client.post(url, data={**data, "csrf": csrf})
        text = html.unescape(response.text)
        assert response.status_code == 409, url
        assert (
            f"Nothing was changed: proposal_id: proposal '{ids[8]}' is already rejected by write-person"
            in text
        )
        assert 'id="proposal-status">rejected' in text and 'action="/dashboard/review/' not in text
    assert _ledger(memory) == before
    assert memory.show_proposal(ME, ShowProposalInput(proposal_id=ids[8])).reason == "dup"


def test_a_scoped_token_sees_only_its_repositories_proposals_and_counts_them(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "write", (BILLING,)))
    page = html.unescape(client.get("/dashboard/review?status=all").text)
    assert observation(IN_BILLING) in page and observation(1) not in page
    assert 'id="pending-count">1<' in page
    response = client.get(_url(ids[1]))
    assert response.status_code == 404 and observation(1) not in html.unescape(response.text)
    csrf = csrf_of(page)
    refused = client.post(
        "/dashboard/review/reject", data={"csrf": csrf, "proposal_id": ids[1], "reason": "x"}
    )
    assert refused.status_code == 404 and _status(memory, ids[1]) == "pending"
    assert memory.list_proposals(ME, ListProposalsInput()).total == len(ids)


def test_the_nav_counts_the_pending_proposals_the_session_may_see(
    client: TestClient, tokens: TokenStore, memory: Memory, ids: dict[int, str]
) -> None:
    login(client, make_token(tokens, "read", ("*",)))
    for url in ("/dashboard/", "/dashboard/skills", "/dashboard/review"):
        assert 'id="pending-count">10<' in client.get(url).text, url
    memory.reject_proposal(Caller(agent_id="someone"), RejectProposalInput(proposal_id=ids[1], reason="seen"))
    assert 'id="pending-count">9<' in client.get("/dashboard/").text
    empty = client.get("/dashboard/review?status=accepted").text
    assert "No proposal here with status accepted" in empty


def test_every_review_page_and_form_needs_a_session(
    client: TestClient, memory: Memory, ids: dict[int, str]
) -> None:
    for url in ("/dashboard/review", _url(ids[1])):
        response = client.get(url, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, "/dashboard/login"), url
    before = _ledger(memory)
    for url in ("/dashboard/review/accept", "/dashboard/review/reject"):
        data = {"proposal_id": ids[1], "reason": "r"}
        response = client.post(url, data=data, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, "/dashboard/login"), url
    assert _ledger(memory) == before and _status(memory, ids[1]) == "pending"
