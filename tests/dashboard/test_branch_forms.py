"""The branch page over plain HTTP on the whole app and a real SQLite store: it lists a
repository's branches with their fork points and merges, forks one, merges one and shows the
conflicts the merge wrote; bad input names its field and writes nothing; CSRF guards both forms;
a read token is refused by the service."""

from __future__ import annotations

import html
from urllib.parse import urlencode

from starlette.testclient import TestClient

from mentis.api.attempts import MarkOutdatedInput, RecordAttemptInput
from mentis.api.branches import BranchFromInput
from mentis.api.common import parse
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore
from tests.dashboard.conftest import csrf_of, login, make_token
from tests.dashboard.seed import SHOP

PAGE = f"/dashboard/branches?{urlencode({'repository': SHOP})}"
ALICE = Caller(agent_id="alice-agent")


def _ledger(memory: Memory) -> list[str]:
    return [e.hash for e, _ in memory.store.iter_ledger()]


def _conflicting_branch(memory: Memory) -> str:
    """Branch ``fix/cart`` of SHOP where a passed check on src/cart.py is recorded after main
    marked a passed check on that file outdated: a merge conflict of attempts."""
    check = {"command": "pytest tests/test_cart.py", "status": "passed", "exit_code": 0}
    data = {"repository": SHOP, "task_id": "cart-total", "files": ["src/cart.py"], "check": check}
    first = memory.record_attempt(
        ALICE, parse(RecordAttemptInput, {**data, "action": "rounded totals", "observation": "green"})
    ).attempt_id
    memory.branch_from(ALICE, parse(BranchFromInput, {"repository": SHOP, "branch": "fix/cart"}))
    memory.mark_conclusion_outdated(
        ALICE,
        parse(MarkOutdatedInput, {"repository": SHOP, "attempt_id": first, "reason": "cart.py rewritten"}),
    )
    memory.record_attempt(
        ALICE,
        parse(
            RecordAttemptInput,
            {**data, "branch": "fix/cart", "action": "kept rounding", "observation": "still green"},
        ),
    )
    return first


def test_the_page_lists_branches_forks_one_and_merges_one_showing_its_conflicts(
    client: TestClient, tokens: TokenStore, memory: Memory
) -> None:
    outdated = _conflicting_branch(memory)
    login(client, make_token(tokens, "write", ("github.com/acme/*",)))
    repos = client.get("/dashboard/").text
    assert "branches (1)" in repos and "branch fix/cart of github.com/acme/shop" in repos
    page = client.get(PAGE).text
    assert "fix/cart" in page and "not merged" in page

    made = client.post(
        "/dashboard/branches/create",
        data={"csrf": csrf_of(page), "repository": SHOP, "branch": "spike/cache"},
        follow_redirects=False,
    )
    assert made.status_code == 303 and made.headers["location"] == PAGE
    assert [b.branch for b in memory.list_branches(ALICE, SHOP)] == ["fix/cart", "spike/cache"]

    page = client.get(PAGE).text
    merged = client.post(
        "/dashboard/branches/merge",
        data={"csrf": csrf_of(page), "repository": SHOP, "branch": "fix/cart", "confirm": "yes"},
    )
    assert merged.status_code == 200, merged.text
    text = html.unescape(merged.text)
    assert "Merged fix/cart into github.com/acme/shop" in text
    assert "1 conflict" in text and outdated in text and "cart.py rewritten" in text
    assert [b.merged_into for b in memory.list_branches(ALICE, SHOP) if b.branch == "fix/cart"] == [[SHOP]]


def test_bad_input_names_its_field_and_writes_nothing(
    client: TestClient, tokens: TokenStore, memory: Memory
) -> None:
    _conflicting_branch(memory)
    login(client, make_token(tokens, "write", ("github.com/acme/*",)))
    before = _ledger(memory)
    for path, data, field in [
        ("/dashboard/branches/create", {"branch": "bad name"}, "branch"),
        ("/dashboard/branches/create", {"branch": "a..b"}, "branch"),
        ("/dashboard/branches/create", {"branch": "fix/cart"}, "exists"),
        ("/dashboard/branches/create", {"branch": "ok", "fork_seq": "999"}, "fork_seq"),
        ("/dashboard/branches/create", {"branch": "ok", "fork_seq": "-1"}, "fork_seq"),
        ("/dashboard/branches/create", {"branch": "ok", "parent": "nope"}, "parent"),
        ("/dashboard/branches/merge", {"branch": "fix/cart"}, "confirm"),
        ("/dashboard/branches/merge", {"branch": "nope", "confirm": "yes"}, "branch"),
        ("/dashboard/branches/merge", {"branch": "fix/cart", "into": "fix/cart", "confirm": "yes"}, "into"),
    ]:
        page = client.get(PAGE).text
        answer = client.post(path, data={"csrf": csrf_of(page), "repository": SHOP, **data})
        assert answer.status_code in (400, 404, 409, 422), (data, answer.status_code)
        assert field in html.unescape(answer.text), (data, answer.text[-600:])
    assert client.get("/dashboard/branches").status_code == 422  # the repository is required
    assert _ledger(memory) == before


def test_both_forms_need_the_csrf_token_and_write_scope(
    client: TestClient, tokens: TokenStore, memory: Memory
) -> None:
    _conflicting_branch(memory)
    login(client, make_token(tokens, "write", ("github.com/acme/*",)))
    before = _ledger(memory)
    for path, data in [
        ("/dashboard/branches/create", {"repository": SHOP, "branch": "x"}),
        ("/dashboard/branches/merge", {"repository": SHOP, "branch": "fix/cart", "confirm": "yes"}),
    ]:
        assert client.post(path, data=data).status_code == 403
        assert client.post(path, data={**data, "csrf": "0" * 64}).status_code == 403
    client.post("/dashboard/logout", data={"csrf": csrf_of(client.get(PAGE).text)})
    login(client, make_token(tokens, "read", ("github.com/acme/*",)))
    page = client.get(PAGE)
    assert page.status_code == 200 and "fix/cart" in page.text  # a reader sees the branches
    refused = client.post(
        "/dashboard/branches/merge",
        data={"csrf": csrf_of(page.text), "repository": SHOP, "branch": "fix/cart", "confirm": "yes"},
    )
    assert refused.status_code == 403
    assert _ledger(memory) == before
