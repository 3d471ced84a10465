"""The dashboard's security rules over plain HTTP: sessions, CSRF, scopes, bad input."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

from mentis.api.attempts import RecallInput
from mentis.api.common import parse
from mentis.dashboard import build_dashboard
from mentis.dashboard.session import COOKIE, Signer
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore
from tests.dashboard.conftest import SECRET, csrf_of, login, make_token
from tests.dashboard.seed import BILLING, LOGIN_TASK, SECRET_REPO, SHOP, Seeded


def _ledger(memory: Memory) -> list[str]:
    return [e.hash for e, _ in memory.store.iter_ledger()]


def _pages(seeded: Seeded, repo: str = SHOP) -> list[str]:
    return [
        "/dashboard/",
        f"/dashboard/tasks?{urlencode({'repository': repo})}",
        f"/dashboard/task?{urlencode({'repository': SHOP, 'task_id': LOGIN_TASK})}",
        "/dashboard/search?q=users+logged+out+early",
        "/dashboard/search?q=rotating+the+vault+keys",
        "/dashboard/thoughts",
        "/dashboard/thoughts?include_invalidated=1&q=vault+keys+rotate",
        f"/dashboard/thought?id={seeded.superseding}",
        f"/dashboard/thought?id={seeded.thought}",
    ]


# ---------------------------------------------------------------- sessions


def test_every_page_redirects_to_login_without_a_session(client: TestClient, seeded: Seeded) -> None:
    for url in [*_pages(seeded), "/dashboard/admin"]:
        response = client.get(url, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, "/dashboard/login"), url


def test_login_sets_an_httponly_strict_signed_cookie_that_holds_no_secret(
    client: TestClient, tokens: TokenStore
) -> None:
    token = make_token(tokens, "read", (SHOP,))
    login(client, token)
    value = client.cookies[COOKIE]
    assert token.split("_", 2)[2] not in value and token.split("_")[1] == value.split(".")[0]
    page = client.get("/dashboard/login")  # signed in: the login page sends you on
    assert page.url.path == "/dashboard/"
    fresh = TestClient(client.app, base_url="http://127.0.0.1")
    response = fresh.post(
        "/dashboard/login",
        data={"csrf": csrf_of(fresh.get("/dashboard/login").text), "token": token},
        follow_redirects=False,
    )
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/dashboard" in cookie
    assert "secure" not in cookie  # plain http on loopback


def test_session_cookie_is_secure_when_served_over_tls(memory: Memory, tokens: TokenStore) -> None:
    app = build_dashboard(memory, tokens, anonymous=None, secure=True, secret=SECRET)
    client = TestClient(app, base_url="https://127.0.0.1")
    assert "secure" in client.get("/login").headers["set-cookie"].lower()


def test_a_wrong_or_revoked_token_does_not_sign_in(client: TestClient, tokens: TokenStore) -> None:
    token = make_token(tokens, "read", (SHOP,))
    tokens.revoke(token.split("_")[1])
    for attempt in (token, "mentis_0123456789ab_nope", "x" * 5000):
        csrf = csrf_of(client.get("/dashboard/login").text)
        response = client.post(
            "/dashboard/login", data={"csrf": csrf, "token": attempt}, follow_redirects=False
        )
        assert response.status_code == 401
        assert "set-cookie" not in response.headers
        assert client.get("/dashboard/", follow_redirects=False).status_code == 303


def test_revoking_the_token_ends_its_session_on_the_next_request(
    client: TestClient, tokens: TokenStore
) -> None:
    token = make_token(tokens, "read", (SHOP,))
    login(client, token)
    assert client.get("/dashboard/").status_code == 200
    tokens.revoke(token.split("_")[1])
    response = client.get("/dashboard/", follow_redirects=False)
    assert response.headers["location"] == "/dashboard/login?why=revoked"


def test_an_expired_cookie_goes_back_to_login(client: TestClient, tokens: TokenStore) -> None:
    token_id = make_token(tokens, "read", (SHOP,)).split("_")[1]
    value, _ = Signer(SECRET).issue(token_id, expires=int(time.time()) - 1)
    client.cookies.set(COOKIE, value, domain="127.0.0.1", path="/dashboard")
    response = client.get("/dashboard/", follow_redirects=False)
    assert response.headers["location"] == "/dashboard/login?why=expired"
    assert "Your session or token expired" in client.get(response.headers["location"]).text


def test_an_expired_token_ends_its_session(client: TestClient, tokens: TokenStore) -> None:
    from datetime import UTC, datetime, timedelta

    token, info = tokens.create(
        scope="read", repositories=(SHOP,), expires_at=datetime.now(UTC) + timedelta(hours=1)
    )
    login(client, token)
    tokens.table._run("UPDATE tokens SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE id = ?", (info.id,))
    assert (
        client.get("/dashboard/", follow_redirects=False).headers["location"]
        == "/dashboard/login?why=expired"
    )


@pytest.mark.parametrize(
    "forge",
    [
        lambda v: v[:-1] + ("0" if v[-1] != "0" else "1"),  # signature changed
        lambda v: "0" * 12 + v[12:],  # another token id under the same signature
        lambda v: v.split(".")[0] + ".9999999999." + ".".join(v.split(".")[2:]),  # later expiry
        lambda v: Signer(b"k" * 32).issue(v.split(".")[0])[0],  # signed with another secret
        lambda v: "garbage",
        lambda v: "",
    ],
)
def test_a_forged_cookie_goes_back_to_login(
    client: TestClient, tokens: TokenStore, forge: Callable[[str], str]
) -> None:
    login(client, make_token(tokens, "admin"))
    value = client.cookies[COOKIE]
    client.cookies.clear()
    client.cookies.set(COOKIE, forge(value), domain="127.0.0.1", path="/dashboard")
    response = client.get("/dashboard/admin", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].startswith("/dashboard/login")


def test_no_auth_on_loopback_opens_the_dashboard_with_the_warning(
    client_for: Callable[..., TestClient], seeded: Seeded
) -> None:
    client = client_for(auth=False)
    page = client.get("/dashboard/")
    assert page.status_code == 200 and "Authentication is off" in page.text and SHOP in page.text
    assert client.get("/dashboard/login", follow_redirects=False).headers["location"] == "/dashboard/"


def test_the_bearer_api_still_needs_a_token(client: TestClient, tokens: TokenStore) -> None:
    login(client, make_token(tokens, "admin"))  # a dashboard session is not an API credential
    response = client.post("/v1/verify_integrity", json={})
    assert response.status_code == 401


# ---------------------------------------------------------------- CSRF and write scope


def test_a_form_without_its_csrf_token_is_refused_and_writes_nothing(
    client: TestClient, tokens: TokenStore, memory: Memory, seeded: Seeded
) -> None:
    login(client, make_token(tokens, "write", (SHOP,)))
    before = _ledger(memory)
    form = {"repository": SHOP, "task_id": LOGIN_TASK, "attempt_id": seeded.other, "reason": "replayed"}
    for csrf in (None, "", "0" * 64, Signer(SECRET).csrf(Signer(SECRET).issue()[1])):
        data = form if csrf is None else {**form, "csrf": csrf}
        response = client.post("/dashboard/outdated", data=data)
        assert response.status_code == 403 and "security token" in response.text
    assert _ledger(memory) == before


def test_an_old_csrf_token_dies_with_the_session_it_belonged_to(
    client: TestClient, tokens: TokenStore, memory: Memory, seeded: Seeded
) -> None:
    token = make_token(tokens, "write", (SHOP,))
    login(client, token)
    old = csrf_of(
        client.get(f"/dashboard/task?{urlencode({'repository': SHOP, 'task_id': LOGIN_TASK})}").text
    )
    client.cookies.clear()
    login(client, token)
    before = _ledger(memory)
    data = {"csrf": old, "repository": SHOP, "task_id": LOGIN_TASK, "attempt_id": seeded.other, "reason": "x"}
    assert client.post("/dashboard/outdated", data=data).status_code == 403
    assert _ledger(memory) == before


def test_a_read_token_sees_no_write_form_and_its_post_is_refused(
    client: TestClient, tokens: TokenStore, memory: Memory, seeded: Seeded
) -> None:
    login(client, make_token(tokens, "read", ("github.com/acme/*",)))
    for url in _pages(seeded):
        html = client.get(url).text
        for action in ("/outdated", "/forget", "/relate", "/admin/"):
            assert f'action="/dashboard{action}' not in html, (url, action)
    page = client.get(f"/dashboard/task?{urlencode({'repository': SHOP, 'task_id': LOGIN_TASK})}")
    csrf = csrf_of(page.text)  # the sign-out form's token is this session's
    before = _ledger(memory)
    posts = {
        "/dashboard/outdated": {
            "repository": SHOP,
            "task_id": LOGIN_TASK,
            "attempt_id": seeded.other,
            "reason": "r",
        },
        "/dashboard/forget": {
            "repository": SHOP,
            "task_id": LOGIN_TASK,
            "attempt_id": seeded.other,
            "confirm": "yes",
        },
        "/dashboard/relate": {
            "repository": SHOP,
            "target_id": seeded.superseding,
            "kind": "Invalidates",
            "type": "Correction",
            "content": "no",
        },
        "/dashboard/admin/tokens": {"scope": "admin"},
    }
    for url, data in posts.items():
        response = client.post(url, data={**data, "csrf": csrf})
        assert response.status_code == 403, url
    assert client.get("/dashboard/admin").status_code == 403
    assert _ledger(memory) == before


def test_a_token_for_one_repository_never_sees_another_repositorys_names(
    client: TestClient, tokens: TokenStore, seeded: Seeded
) -> None:
    login(client, make_token(tokens, "write", (SHOP,)))
    for url in _pages(seeded):
        html = client.get(url).text
        for name in (SECRET_REPO, "umbrella", "Umbrella", BILLING, "invoice"):
            assert name not in html, (url, name)
    for url in (
        f"/dashboard/tasks?{urlencode({'repository': SECRET_REPO})}",
        f"/dashboard/task?{urlencode({'repository': SECRET_REPO, 'task_id': 'vault-rotation'})}",
        f"/dashboard/search?{urlencode({'q': 'vault', 'repository': SECRET_REPO})}",
        f"/dashboard/thoughts?{urlencode({'repository': SECRET_REPO})}",
    ):
        response = client.get(url)  # refused; the page may echo the name asked for, never its content
        assert response.status_code == 403, url
        assert "Umbrella" not in response.text and "monthly" not in response.text, url


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/dashboard/tasks", 422),  # no repository
        (f"/dashboard/tasks?repository={SHOP}&page=abc", 422),
        (f"/dashboard/tasks?repository={SHOP}&page=0", 422),
        (f"/dashboard/tasks?repository={SHOP}&page=99999999999999", 422),
        (f"/dashboard/tasks?repository={SHOP}&status=sideways", 422),
        (f"/dashboard/tasks?repository={SHOP}&agent=%00", 422),
        ("/dashboard/tasks?repository=%ZZ%", 403),  # undecodable escapes are kept as text; no such repo here
        ("/dashboard/thoughts?as_of=yesterday", 422),
        ("/dashboard/thoughts?type=Feeling", 422),
        (f"/dashboard/search?q={'x' * 9000}", 422),
        ("/dashboard/task?repository=github.com/acme/shop", 422),
        ("/dashboard/thought", 422),
        ("/dashboard/forget?repository=github.com/acme/shop", 422),
    ],
)
def test_malformed_query_strings_get_a_clear_error_page(
    client: TestClient, tokens: TokenStore, url: str, status: int
) -> None:
    login(client, make_token(tokens, "write", ("github.com/acme/*",)))
    response = client.get(url)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "Traceback" not in response.text and "<h1" in response.text


@pytest.mark.parametrize(
    "url",
    [
        "/dashboard/no-such-page",
        f"/dashboard/task?{urlencode({'repository': SHOP, 'task_id': 'no-such-task'})}",
        "/dashboard/thought?id=00000000-0000-4000-8000-000000000000",
        f"/dashboard/forget?{urlencode({'repository': SHOP, 'task_id': LOGIN_TASK, 'attempt_id': 'nope'})}",
        "/dashboard/static/no-such.css",
    ],
)
def test_unknown_ids_get_a_404_page_not_a_stack_trace(
    client: TestClient, tokens: TokenStore, url: str
) -> None:
    login(client, make_token(tokens, "admin"))
    response = client.get(url)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "Not found" in response.text and "Traceback" not in response.text


def test_bad_form_input_writes_nothing(
    client: TestClient, tokens: TokenStore, memory: Memory, seeded: Seeded
) -> None:
    login(client, make_token(tokens, "admin"))
    csrf = csrf_of(client.get("/dashboard/").text)
    before = _ledger(memory)
    bad = [
        ("/dashboard/outdated", {"repository": SHOP, "task_id": LOGIN_TASK, "attempt_id": seeded.other}),
        (
            "/dashboard/outdated",
            {"repository": SHOP, "task_id": LOGIN_TASK, "attempt_id": "nope", "reason": "r"},
        ),
        ("/dashboard/forget", {"repository": SHOP, "task_id": LOGIN_TASK, "attempt_id": seeded.other}),
        (
            "/dashboard/relate",
            {
                "repository": SHOP,
                "target_id": seeded.superseding,
                "kind": "Likes",
                "type": "Finding",
                "content": "x",
            },
        ),
        (
            "/dashboard/relate",
            {
                "repository": SHOP,
                "target_id": "nope",
                "kind": "Supersedes",
                "type": "Finding",
                "content": "x",
            },
        ),
        ("/dashboard/admin/tokens", {"scope": "root", "repositories": "x"}),
        ("/dashboard/admin/tokens", {"scope": "read", "repositories": ""}),
        ("/dashboard/admin/tokens", {"scope": "read", "repositories": "x", "expires": "forever"}),
        ("/dashboard/admin/revoke", {"token_id": "nope"}),
    ]
    tokens_before = len(tokens.list())
    for url, data in bad:
        response = client.post(url, data={**data, "csrf": csrf})
        assert response.status_code in (404, 409, 422), (url, data, response.status_code)
        assert "Traceback" not in response.text
    assert _ledger(memory) == before and len(tokens.list()) == tokens_before


def test_pages_carry_a_strict_content_security_policy(client: TestClient, tokens: TokenStore) -> None:
    login(client, make_token(tokens, "admin"))
    headers = client.get("/dashboard/").headers
    assert "default-src 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "no-store"


# ---------------------------------------------------------------- curation through the forms


def test_marking_outdated_through_the_form_shows_in_the_timeline_and_in_recall(
    client: TestClient, tokens: TokenStore, memory: Memory, seeded: Seeded
) -> None:
    login(client, make_token(tokens, "write", (SHOP,)))
    url = f"/dashboard/task?{urlencode({'repository': SHOP, 'task_id': LOGIN_TASK})}"
    data = {
        "csrf": csrf_of(client.get(url).text),
        "repository": SHOP,
        "task_id": LOGIN_TASK,
        "attempt_id": seeded.other,
        "reason": "volatile-lru still evicts sessions without a TTL",
    }
    response = client.post("/dashboard/outdated", data=data)
    assert response.status_code == 200 and "volatile-lru still evicts sessions without a TTL" in response.text
    history = memory.recall(
        Caller(agent_id="t"), parse(RecallInput, {"repository": SHOP, "task_id": LOGIN_TASK})
    )
    by_id = {row[0]: row[-1] for row in history.rows}
    assert [c["reason"] for c in by_id[seeded.other]] == [data["reason"]]
    assert [c["agent_id"] for c in by_id[seeded.other]] == ["write-person"]


def test_forgetting_needs_the_confirmation_and_leaves_a_tombstone(
    client: TestClient, tokens: TokenStore, memory: Memory, seeded: Seeded
) -> None:
    login(client, make_token(tokens, "write", (SHOP,)))
    query = urlencode({"repository": SHOP, "task_id": LOGIN_TASK, "attempt_id": seeded.other})
    confirm = client.get(f"/dashboard/forget?{query}")
    assert "What is erased" in confirm.text and "What the ledger keeps" in confirm.text
    data = {
        "csrf": csrf_of(confirm.text),
        "repository": SHOP,
        "task_id": LOGIN_TASK,
        "attempt_id": seeded.other,
        "reason": "wrong repository",
    }
    assert client.post("/dashboard/forget", data=data).status_code == 422
    timeline = client.post("/dashboard/forget", data={**data, "confirm": "yes"})
    assert timeline.status_code == 200
    assert "wrong repository" in timeline.text and "Idle sessions now survive" not in timeline.text
    assert timeline.text.count('class="card tombstone"') == 2


def test_superseding_a_thought_hides_it_from_default_reads(
    client: TestClient, tokens: TokenStore, seeded: Seeded
) -> None:
    login(client, make_token(tokens, "write", (SHOP,)))
    page = client.get(f"/dashboard/thought?id={seeded.superseding}")
    assert 'action="/dashboard/relate"' in page.text
    data = {
        "csrf": csrf_of(page.text),
        "repository": SHOP,
        "target_id": seeded.superseding,
        "kind": "Invalidates",
        "type": "Correction",
        "content": "Redis was fine; the load balancer dropped sticky sessions",
    }
    new = client.post("/dashboard/relate", data=data)
    assert new.status_code == 200 and "load balancer dropped sticky sessions" in new.text
    assert "Invalidates" in new.text and "<svg" in new.text
    default = client.get("/dashboard/thoughts").text
    assert "Redis evicts their keys" not in default
    assert "Redis evicts their keys" in client.get("/dashboard/thoughts?include_invalidated=1").text


def test_admin_creates_a_token_shown_once_and_revokes_it(client: TestClient, tokens: TokenStore) -> None:
    login(client, make_token(tokens, "admin"))
    csrf = csrf_of(client.get("/dashboard/admin").text)
    created = client.post(
        "/dashboard/admin/tokens",
        data={
            "csrf": csrf,
            "scope": "read",
            "repositories": "github.com/acme/*, x/y",
            "agent": "ci",
            "expires": "7d",
        },
    )
    assert created.status_code == 200
    secret = created.text.split('id="new-token" class="mono grow" readonly value="')[1].split('"')[0]
    info = tokens.lookup(secret)
    assert info is not None and (info.scope, info.repositories, info.agent) == (
        "read",
        ("github.com/acme/*", "x/y"),
        "ci",
    )
    assert secret not in client.get("/dashboard/admin").text
    revoked = client.post("/dashboard/admin/revoke", data={"csrf": csrf, "token_id": info.id})
    assert revoked.status_code == 200 and tokens.lookup(secret).status() == "revoked"  # type: ignore[union-attr]


def test_verify_now_reports_the_chains_this_caller_may_read(client: TestClient, tokens: TokenStore) -> None:
    login(client, make_token(tokens, "read", (SHOP,)))
    page = client.post("/dashboard/verify", data={"csrf": csrf_of(client.get("/dashboard/").text)})
    assert page.status_code == 200 and "every chain below checked" in page.text
    assert page.text.count(">verified</span>") == 2  # the summary and the one readable chain


def test_dashboard_requests_are_rate_limited_apart_from_the_api(memory: Memory, tokens: TokenStore) -> None:
    from mentis.http import HttpConfig, build_app

    app = build_app(memory, tokens, HttpConfig(session_secret=SECRET, rate_per_second=0.001, rate_burst=2))
    client = TestClient(app, base_url="http://127.0.0.1")
    assert [client.get("/dashboard/login").status_code for _ in range(3)] == [200, 200, 429]
    assert client.get("/dashboard/static/dashboard.css").status_code == 200  # assets are not counted
    bearer = {"Authorization": f"Bearer {make_token(tokens)}"}
    assert client.post("/v1/verify_integrity", json={}, headers=bearer).status_code == 200
