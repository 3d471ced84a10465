"""The webhook pages over plain HTTP on the whole app and a real SQLite store: the create form's
bad input names its field and writes nothing, the secret is shown once, CSRF guards every form,
a non-admin session gets the service's refusal, delete needs its tick, and a dead delivery (to a
real loopback receiver answering 500) is listed with its error and redelivered."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

from mentis.api.webhooks import DeliveriesInput, ListWebhooksInput
from mentis.service.memory import Memory
from mentis.service.tokens import TokenStore
from tests.dashboard.conftest import csrf_of, login, make_token
from tests.dashboard.seed_webhooks import OPS, dead_letter, deliver, subscribe
from tests.webhooks.conftest import Receiver

LOOPBACK = "http://127.0.0.1:9/hook"
"""A loopback URL (allowed); nothing is delivered to it in these tests except where said."""


@pytest.fixture
def failing() -> Iterator[Receiver]:
    r = Receiver(fail=1_000)  # always 500
    yield r
    r.close()


def _hooks(memory: Memory) -> list[str]:
    return [h.url for h in memory.list_webhooks(OPS, ListWebhooksInput()).webhooks]


def _admin(client: TestClient, tokens: TokenStore) -> str:
    login(client, make_token(tokens, "admin"))
    return csrf_of(client.get("/dashboard/webhooks").text)


def _create(client: TestClient, csrf: str, token_id: str, **fields: str) -> str:
    data = {"csrf": csrf, "url": LOOPBACK, "event:attempt.recorded": "on", "token_id": token_id, **fields}
    return client.post("/dashboard/webhooks/create", data=data).text


def test_creating_a_webhook_shows_its_secret_once_and_lists_it(
    client: TestClient, tokens: TokenStore, memory: Memory
) -> None:
    csrf = _admin(client, tokens)
    _, token = tokens.create(scope="read", repositories=("github.com/acme/*",), agent="hook-reader")
    page = client.get("/dashboard/webhooks").text
    assert f'<option value="{token.id}">' in page and 'name="event:thought.appended"' in page
    data = {
        "csrf": csrf,
        "url": LOOPBACK,
        "event:attempt.recorded": "on",
        "event:thought.appended": "on",
        "token_id": token.id,
        "repository": "github.com/acme/*",
        "status": "failed",
        "thought_type": "Decision",
        "ids_only": "yes",
    }
    response = client.post("/dashboard/webhooks/create", data=data)
    assert response.status_code == 200
    (hook,) = memory.list_webhooks(OPS, ListWebhooksInput()).webhooks
    assert (hook.url, hook.events, hook.token_id) == (
        LOOPBACK,
        ["attempt.recorded", "thought.appended"],
        token.id,
    )
    assert (hook.repository, hook.status, hook.thought_type, hook.ids_only) == (
        "github.com/acme/*",
        "failed",
        "Decision",
        True,
    )
    shown = html.unescape(response.text)
    assert "it will not be shown again" in shown and "whsec_" in shown
    secret = shown.split('id="new-secret" class="mono grow" readonly value="')[1].split('"')[0]
    assert secret.startswith("whsec_")
    again = html.unescape(client.get("/dashboard/webhooks").text)
    assert secret not in again and "whsec_" not in again  # once only
    assert hook.webhook_id in again and LOOPBACK in again and "ids only" in again
    assert "status failed" in again and "thought type Decision" in again


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"url": "http://93.184.216.34/hook"}, "url"),  # plain http to a public address
        ({"url": "https://10.1.2.3/hook"}, "url"),  # a private address
        ({"url": "ftp://127.0.0.1/hook"}, "url"),
        (
            {"event:attempt.recorded": ""},
            "events",
        ),  # no event ticked (the field posted blank is dropped below)
        ({"event:nothing.happened": "on"}, "events"),
        ({"status": "sometimes"}, "status"),
        ({"thought_type": "Musing"}, "thought_type"),
        ({"token_id": "000000000000"}, "token_id"),
        ({"token_id": "not a token"}, "token_id"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(
    client: TestClient, tokens: TokenStore, memory: Memory, fields: dict[str, str], names: str
) -> None:
    csrf = _admin(client, tokens)
    _, token = tokens.create(scope="read", repositories=("*",))
    data = {"csrf": csrf, "url": LOOPBACK, "event:attempt.recorded": "on", "token_id": token.id, **fields}
    data = {k: v for k, v in data.items() if v != "" or not k.startswith("event:")}
    response = client.post("/dashboard/webhooks/create", data=data)
    assert response.status_code == 422, response.text
    assert names in html.unescape(response.text)
    assert "whsec_" not in response.text
    assert _hooks(memory) == []


def test_every_form_without_its_csrf_token_is_refused(
    client: TestClient, tokens: TokenStore, memory: Memory, failing: Receiver
) -> None:
    dead = dead_letter(memory, tokens, failing)
    _admin(client, tokens)
    _, token = tokens.create(scope="read", repositories=("*",))
    forms = [
        (
            "/dashboard/webhooks/create",
            {"url": LOOPBACK, "event:attempt.recorded": "on", "token_id": token.id},
        ),
        ("/dashboard/webhooks/delete", {"webhook_id": dead.webhook_id, "confirm": "yes"}),
        ("/dashboard/webhooks/redeliver", {"delivery_id": dead.delivery_id}),
    ]
    for action, data in forms:
        response = client.post(action, data=data)
        assert response.status_code == 403 and "security token is missing" in response.text, action
    assert _hooks(memory) == [failing.url]
    (still,) = memory.webhook_deliveries(OPS, DeliveriesInput()).deliveries
    assert still.state == "dead"


@pytest.mark.parametrize("scope", ["read", "write"])
def test_a_non_admin_session_sees_the_services_refusal_and_nothing_changes(
    client: TestClient, tokens: TokenStore, memory: Memory, failing: Receiver, scope: str
) -> None:
    dead = dead_letter(memory, tokens, failing)
    login(client, make_token(tokens, scope, ("*",)))
    home = client.get("/dashboard/").text
    assert "/dashboard/webhooks" not in home  # no nav link
    csrf = csrf_of(home)
    for url in ("/dashboard/webhooks", f"/dashboard/webhook?{urlencode({'id': dead.webhook_id})}"):
        page = client.get(url)
        assert page.status_code == 403 and "admin" in page.text and failing.url not in page.text
    _, token = tokens.create(scope="read", repositories=("*",))
    for action, data in [
        (
            "/dashboard/webhooks/create",
            {"url": LOOPBACK, "event:attempt.recorded": "on", "token_id": token.id},
        ),
        ("/dashboard/webhooks/delete", {"webhook_id": dead.webhook_id, "confirm": "yes"}),
        ("/dashboard/webhooks/redeliver", {"delivery_id": dead.delivery_id}),
    ]:
        response = client.post(action, data={"csrf": csrf, **data})
        assert response.status_code == 403 and "admin" in response.text, action
    assert _hooks(memory) == [failing.url]
    assert memory.webhook_deliveries(OPS, DeliveriesInput()).deliveries[0].state == "dead"


def test_delete_needs_its_tick_and_then_removes_the_subscription(
    client: TestClient, tokens: TokenStore, memory: Memory
) -> None:
    csrf = _admin(client, tokens)
    webhook_id = subscribe(memory, tokens, LOOPBACK)
    untick = client.post("/dashboard/webhooks/delete", data={"csrf": csrf, "webhook_id": webhook_id})
    assert untick.status_code == 422 and "confirm" in untick.text and _hooks(memory) == [LOOPBACK]
    bad = client.post(
        "/dashboard/webhooks/delete", data={"csrf": csrf, "webhook_id": "wh_x", "confirm": "yes"}
    )
    assert bad.status_code == 422 and "webhook_id" in bad.text and _hooks(memory) == [LOOPBACK]
    gone = client.post(
        "/dashboard/webhooks/delete",
        data={"csrf": csrf, "webhook_id": "wh_0000000000000000", "confirm": "yes"},
    )
    assert gone.status_code == 404 and _hooks(memory) == [LOOPBACK]
    done = client.post(
        "/dashboard/webhooks/delete",
        data={"csrf": csrf, "webhook_id": webhook_id, "confirm": "yes"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == "/dashboard/webhooks"
    assert _hooks(memory) == []
    assert "No webhook yet" in client.get("/dashboard/webhooks").text


def test_a_dead_delivery_is_listed_with_its_error_and_redelivered(
    client: TestClient, tokens: TokenStore, memory: Memory, failing: Receiver
) -> None:
    dead = dead_letter(memory, tokens, failing)
    csrf = _admin(client, tokens)
    url = f"/dashboard/webhook?{urlencode({'id': dead.webhook_id})}"
    listed = html.unescape(client.get("/dashboard/webhooks").text)
    assert f'href="{url}&state=dead">1 dead letter</a>' in listed
    page = html.unescape(client.get(url).text)
    assert dead.delivery_id in page and "last error: HTTP 500" in page and ">dead<" in page
    assert "last answer HTTP 500" in page and "attempt.recorded" in page
    assert dead.delivery_id in client.get(url + "&state=dead").text
    assert "No delivery here in state delivered" in client.get(url + "&state=delivered").text
    assert client.get(url + "&state=gone").status_code == 422
    assert client.get("/dashboard/webhook?id=wh_0000000000000000").status_code == 404
    bad = client.post("/dashboard/webhooks/redeliver", data={"csrf": csrf, "delivery_id": "nope"})
    assert bad.status_code == 422 and "delivery_id" in bad.text
    response = client.post(
        "/dashboard/webhooks/redeliver",
        data={"csrf": csrf, "delivery_id": dead.delivery_id, "webhook_id": dead.webhook_id},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == f"{url}#d-{dead.delivery_id}"
    (again,) = memory.webhook_deliveries(OPS, DeliveriesInput()).deliveries
    assert (again.state, again.attempts) == ("pending", 0)
    assert ">pending<" in client.get(url).text
    failing.fail = 0  # the receiver is mended: the redelivery arrives
    deliver(memory, tokens)
    (done,) = memory.webhook_deliveries(OPS, DeliveriesInput()).deliveries
    assert (done.state, done.last_status) == ("delivered", 204) and len(failing.requests) == 2
    assert "delivered 20" in client.get(url).text
    assert "dead letter" not in client.get("/dashboard/webhooks").text


def test_without_auth_the_token_is_typed_and_the_webhook_is_created(
    client_for: Callable[..., TestClient], tokens: TokenStore, memory: Memory
) -> None:
    client = client_for(auth=False)
    page = client.get("/dashboard/webhooks").text
    assert '<input id="token_id" name="token_id"' in page  # no token list to choose from
    _, token = tokens.create(scope="read", repositories=("*",))
    shown = html.unescape(_create(client, csrf_of(page), token.id))
    assert "it will not be shown again" in shown and "whsec_" in shown
    assert _hooks(memory) == [LOOPBACK]
