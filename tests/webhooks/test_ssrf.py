"""Where a webhook may point: https to public addresses, loopback, or what the operator allows;
private, link-local, multicast and unspecified addresses are refused when a subscription is made
and again before each delivery, and a redirect is never followed. No request leaves loopback."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable

import pytest

from mentis.api.attempts import RecordAttemptInput
from mentis.api.common import parse
from mentis.api.webhooks import CreateWebhookInput, DeliveriesInput
from mentis.config import Settings
from mentis.errors import InvalidInput
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore
from mentis.service.webhook_rules import WebhookSettings, check_target
from mentis.service.webhooks import Deliverer

from .conftest import ADMIN, REPO, Receiver, drain, subscribe

REFUSED = [
    ("https://10.0.0.1/hook", "private"),
    ("https://192.168.1.20/hook", "private"),
    ("https://169.254.169.254/latest/meta-data", "link-local"),
    ("https://[fe80::1]/hook", "link-local"),
    ("https://[::ffff:10.0.0.1]/hook", "private"),
    ("https://0.0.0.0/hook", "unspecified"),
    ("https://224.0.0.1/hook", "multicast"),
    ("http://93.184.215.14/hook", "must be https"),
    ("ftp://127.0.0.1/hook", "http(s) URL"),
    ("https://user:pw@127.0.0.1/hook", "user name"),
]


@pytest.mark.parametrize(("url", "why"), REFUSED)
def test_a_url_to_a_private_link_local_or_plain_http_address_is_refused_naming_the_url(
    memory: Memory, tokens: TokenStore, url: str, why: str
) -> None:
    _, token = tokens.create(scope="admin")
    with pytest.raises(InvalidInput) as refused:
        req = parse(CreateWebhookInput, {"url": url, "events": ["attempt.recorded"], "token_id": token.id})
        memory.create_webhook(ADMIN, req)
    assert refused.value.field == "url" and why in refused.value.message
    assert memory.store.webhook_rows() == []


def test_loopback_is_allowed_over_http_and_an_operator_may_allow_a_private_network() -> None:
    default = WebhookSettings()
    assert check_target("http://127.0.0.1:8080/x", default).address == "127.0.0.1"
    assert check_target("http://localhost:8080/x", default).host == "localhost"
    with pytest.raises(InvalidInput):
        check_target("https://10.1.2.3/x", default)
    allowed = dataclasses.replace(default, allow_nets=(ipaddress.ip_network("10.0.0.0/8"),))
    target = check_target("https://10.1.2.3:8443/x?y=1", allowed)  # resolved only: nothing is sent
    assert (target.pinned_url(), target.host_header()) == ("https://10.1.2.3:8443/x?y=1", "10.1.2.3:8443")


def test_a_redirect_to_a_private_address_is_not_followed_and_counts_as_a_failure(
    memory: Memory, tokens: TokenStore, make_receiver: Callable[..., Receiver], deliverer: Deliverer
) -> None:
    receiver = make_receiver(fail=1, redirect="http://10.0.0.1/internal")
    subscribe(memory, tokens, receiver)
    memory.record_attempt(
        Caller(agent_id="w"), RecordAttemptInput(repository=REPO, task_id="t", action="a", observation="o")
    )
    drain(deliverer)
    (done,) = memory.webhook_deliveries(ADMIN, DeliveriesInput()).deliveries
    # the 302 was a failed try (its Location noted, never requested); the retry reached the receiver
    assert (done.state, done.attempts) == ("delivered", 2) and len(receiver.requests) == 2


def test_a_target_refused_at_delivery_time_is_not_contacted(
    open_memory: Callable[[], Memory], tokens: TokenStore, settings: Settings
) -> None:
    """A subscription made while its network was allowed is checked again before each delivery:
    once the operator no longer allows it, the delivery fails without a connection."""
    allowing = dataclasses.replace(
        settings, webhooks={**settings.webhooks, "MENTIS_WEBHOOK_ALLOW": "10.0.0.0/8"}
    )
    base = open_memory()
    memory = Memory(base.store, base.embedder, settings=allowing)
    _, token = tokens.create(scope="read", repositories=("*",))
    url = "https://10.9.9.9/hook"
    memory.create_webhook(ADMIN, CreateWebhookInput(url=url, events=["attempt.recorded"], token_id=token.id))
    memory.record_attempt(
        Caller(agent_id="w"), RecordAttemptInput(repository=REPO, task_id="t", action="a", observation="o")
    )
    strict = Deliverer(memory.store, tokens, WebhookSettings(max_attempts=1))
    try:
        drain(strict)
    finally:
        strict.close()
    (dead,) = memory.webhook_deliveries(ADMIN, DeliveriesInput()).deliveries
    assert dead.state == "dead" and dead.last_status is None
    assert "10.9.9.9, a private address" in (dead.last_error or "")
