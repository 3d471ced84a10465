"""``mentis checkpoint --post URL``: a checkpoint sent to a witness that keeps what it receives.

One HTTPS POST of the checkpoint's JSON, signed as Standard Webhooks 1.0.0 says: ``webhook-id``
(``msg_`` and a random id), ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``
(``v1,`` and the base64 HMAC-SHA256 of ``<id>.<timestamp>.<body>`` under the secret, given as
``whsec_<base64>``, the base64-decoded part being the key). The URL must be ``https``, or ``http``
to a loopback address. A reply other than 2xx is an error naming the status.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from mentis.errors import ConfigError, InvalidInput, RemoteUnavailable
from mentis.providers.http import loopback_host
from mentis.service.webhook_rules import sign

TIMEOUT_S = 10.0
SECRET_PREFIX = "whsec_"


@dataclass(frozen=True)
class Delivery:
    url: str
    message_id: str
    status: int


def check_url(url: str) -> str:
    """``url`` when it is https, or http to a loopback host; InvalidInput (field ``post``) otherwise."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "https" and host:
        return url
    if parts.scheme == "http" and loopback_host(host):
        return url
    raise InvalidInput(
        f"--post {url!r}: a witness URL must be https:// (http:// only to a loopback address)", field="post"
    )


def secret_key(secret: str | None) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret; ConfigError without one, InvalidInput (field
    ``secret``) when it is malformed."""
    if not secret:
        raise ConfigError(
            "posting a checkpoint needs the witness's webhook secret (whsec_…): set "
            "MENTIS_CHECKPOINT_SECRET or pass --post-secret-file"
        )
    text = secret.strip()
    if not text.startswith(SECRET_PREFIX):
        raise InvalidInput(f"the webhook secret must start with {SECRET_PREFIX}", field="secret")
    try:
        key = base64.b64decode(text[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(
            f"the webhook secret is {SECRET_PREFIX} and base64; this is not", field="secret"
        ) from None
    if len(key) < 24:
        raise InvalidInput("the webhook secret's key must be at least 24 bytes", field="secret")
    return key


def post(url: str, body: bytes, secret: str | None) -> Delivery:
    """POST ``body`` to ``url`` with the Standard Webhooks headers signed with ``secret``."""
    check_url(url)
    secret_key(secret)  # refuses a missing or malformed secret before anything is sent
    message_id = "msg_" + secrets.token_hex(16)
    timestamp = int(time.time())
    headers = {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign((secret or "").strip(), message_id, timestamp, body),
    }
    try:
        with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False) as client:
            reply = client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        raise RemoteUnavailable(
            f"could not post the checkpoint to {url}: {type(exc).__name__}: {exc}"
        ) from None
    if not 200 <= reply.status_code < 300:
        raise RemoteUnavailable(
            f"the witness {url} answered {reply.status_code}; the checkpoint was not taken"
        )
    return Delivery(url, message_id, reply.status_code)


__all__ = ["Delivery", "check_url", "post", "secret_key"]
