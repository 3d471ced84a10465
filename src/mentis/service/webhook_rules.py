"""The rules a webhook's target and delivery follow, written once: where a URL may point (SSRF),
how a delivery is signed (Standard Webhooks 1.0.0), how long to wait before the next try.

Where a URL may point: ``https`` to a public address; ``http`` or ``https`` to loopback; either to a
host or network the operator lists in ``MENTIS_WEBHOOK_ALLOW`` (comma-separated names and CIDRs).
Every other address — private, link-local, shared, multicast, unspecified, reserved — is refused
after the host name is resolved, when a subscription is created and again before each delivery,
and the delivery connects to the very address that was checked (no second lookup to rebind).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import random
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from mentis.config import Settings
from mentis.errors import ConfigError, InvalidInput

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class WebhookSettings:
    """``MENTIS_WEBHOOK_*``: what the operator allows beyond the defaults, and the retry policy."""

    allow_hosts: frozenset[str] = frozenset()
    allow_nets: tuple[Net, ...] = ()
    max_attempts: int = 8
    backoff_s: float = 2.0
    timeout_s: float = 10.0
    poll_s: float = 0.5
    keep_days: float = 30.0

    @classmethod
    def of(cls, settings: Settings) -> WebhookSettings:
        env = settings.webhooks
        hosts: set[str] = set()
        nets: list[Net] = []
        for word in (w.strip() for w in env.get("MENTIS_WEBHOOK_ALLOW", "").split(",")):
            if not word:
                continue
            try:
                nets.append(ipaddress.ip_network(word, strict=False))
            except ValueError:
                hosts.add(word.lower().rstrip("."))
        return cls(
            frozenset(hosts),
            tuple(nets),
            int(_number(env, "MENTIS_WEBHOOK_MAX_ATTEMPTS", 8, 1, 100)),
            _number(env, "MENTIS_WEBHOOK_BACKOFF_S", 2.0, 0.01, 3600),
            _number(env, "MENTIS_WEBHOOK_TIMEOUT_S", 10.0, 0.1, 120),
            _number(env, "MENTIS_WEBHOOK_POLL_S", 0.5, 0.01, 3600),
            _number(env, "MENTIS_WEBHOOK_KEEP_DAYS", 30.0, 0, 3650),
        )

    def backoff(self, attempts: int) -> float:
        """Seconds before try ``attempts + 1``: exponential from ``backoff_s``, ±50 % jitter, <= 1 h."""
        return float(min(3600.0, self.backoff_s * 2.0 ** (attempts - 1)) * random.uniform(0.5, 1.5))


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    text = env.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:
        raise ConfigError(f"{name}={text!r}: expected a number from {low:g} to {high:g}")
    return value


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (``address``) and what to call it (``host`` for Host and SNI)."""

    url: str
    scheme: str
    host: str
    port: int
    path: str
    address: str

    def pinned_url(self) -> str:
        """The URL with the checked address in place of the host name."""
        where = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{where}:{self.port}{self.path}"

    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port == default else f"{name}:{self.port}"


def _blocked(ip: IP) -> str | None:
    """Why ``ip`` is no place to send a webhook by default (None: a public address)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return _blocked(ip.ipv4_mapped)
    for test, what in (
        (ip.is_unspecified, "unspecified"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip.is_private, "private"),
        (ip.is_reserved, "reserved"),
        (not ip.is_global, "not public"),
    ):
        if test:
            return what
    return None


def check_target(url: str, rules: WebhookSettings) -> Target:
    """``url`` resolved and checked against the rules in the module docstring; InvalidInput naming
    ``url`` and the reason otherwise. Nothing is sent."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise InvalidInput(f"url {url!r}: the port is not a number from 0 to 65535", field="url") from None
    if scheme not in ("http", "https") or not host:
        raise InvalidInput(f"url {url!r}: expected https://HOST/PATH", field="url")
    if parts.username or parts.password:
        raise InvalidInput("url: must not carry a user name or password", field="url")
    port = port or (443 if scheme == "https" else 80)
    name = host.lower().rstrip(".")
    try:
        found = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise InvalidInput(f"url {url!r}: host {name!r} does not resolve ({exc})", field="url") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found))
    allowed_host = name in rules.allow_hosts
    for ip in addresses:
        allowed = allowed_host or any(ip in net for net in rules.allow_nets if net.version == ip.version)
        if allowed or ip.is_loopback:
            continue
        if scheme != "https":
            raise InvalidInput(
                f"url {url!r}: must be https (http only to loopback or a host in MENTIS_WEBHOOK_ALLOW)",
                field="url",
            )
        why = _blocked(ip)
        if why is not None:
            raise InvalidInput(
                f"url {url!r}: {name} resolves to {ip}, a {why} address; webhooks reach only public "
                "addresses and loopback unless MENTIS_WEBHOOK_ALLOW lists the host or network",
                field="url",
            )
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(url, scheme, name, port, path, str(addresses[0]))


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and the base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value: ``v1,`` + base64 HMAC-SHA256 over
    ``{msg_id}.{timestamp}.{body}`` keyed with the secret's decoded bytes (Standard Webhooks 1.0.0)."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = msg_id.encode() + b"." + str(timestamp).encode() + b"." + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


__all__ = ["Target", "WebhookSettings", "check_target", "new_secret", "sign"]
