"""Ed25519 keys, signed statements, envelopes and the signer of one process's stream.

A signed ledger entry carries ``key_id`` (hashed into the entry) and ``sig``, an *envelope*::

    s1.<stream: 32 hex>.<n: decimal>.<prev: 64 hex, or "-" when n = 0>.<signature: base64url>

The signature is Ed25519 over the canonical JSON of the :class:`Statement` ``{v, chain, kind, id,
at, agent, body_hash, key_id, stream, n, prev}``. Every field is known before the store assigns the
entry's ``seq`` and ``prev``, so writers that race for a chain's head never invalidate a signature.
``stream`` is random per signing process, ``n`` counts its statements from 0 and ``prev`` is the
:meth:`Statement.digest` of statement ``n - 1``: a stream is a hash chain of its own, so the signature
of its last statement vouches for every earlier one whose links check. A signer never reuses
``(stream, n)``; after a write that failed (or whose outcome it cannot know) it starts a new stream.

A write is signed through the :class:`mentis.store.seal.Seal` the service passes to the store: its
:data:`Sign` callable is asked for the entry's ``(key_id, envelope)`` inside the write transaction.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mentis.errors import ConfigError, InvalidInput
from mentis.ledger.canonical import canonical
from mentis.ledger.links import AGENTS_CHAIN as AGENTS_CHAIN
from mentis.ledger.links import RESERVED_PREFIX as RESERVED_PREFIX

STATEMENT_VERSION = 1
ENVELOPE_PREFIX = "s1"
SKEW_S = 300
"""How far (seconds) a client-chosen ``at`` may be from the server's clock."""
SIGNATURE_CHARS = 86
"""base64url of the 64 signature bytes, without padding."""

_ENVELOPE = re.compile(r"^s1\.([0-9a-f]{32})\.(0|[1-9][0-9]{0,15})\.(-|[0-9a-f]{64})\.([A-Za-z0-9_-]{86})$")


# ---------------------------------------------------------------- keys


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str, what: str, size: int) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{what} is not base64url", field=what) from None
    if len(raw) != size:
        raise InvalidInput(f"{what} must be {size} bytes, found {len(raw)}", field=what)
    return raw


def public_raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_text(public: Ed25519PublicKey) -> str:
    """The public key as the registry stores it: base64url of its 32 raw bytes."""
    return _b64(public_raw(public))


def parse_public(text: str) -> Ed25519PublicKey:
    """A public key from :func:`public_text`; InvalidInput (field ``public_key``) otherwise."""
    if not isinstance(text, str):
        raise InvalidInput("public_key must be a string", field="public_key")
    return Ed25519PublicKey.from_public_bytes(_unb64(text, "public_key", 32))


def key_id_of(public: Ed25519PublicKey) -> str:
    """``ed25519:`` and the first 32 hex digits of the SHA-256 of the raw public key."""
    return "ed25519:" + hashlib.sha256(public_raw(public)).hexdigest()[:32]


def private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def parse_private_pem(data: bytes, where: str = "the key") -> Ed25519PrivateKey:
    """An Ed25519 private key from unencrypted PKCS#8 PEM; InvalidInput naming what is wrong."""
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise InvalidInput(
            f"{where} is encrypted; Mentis reads unencrypted PKCS#8 PEM", field="key"
        ) from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise InvalidInput(f"{where} is not a PEM private key ({exc})", field="key") from None
    if not isinstance(key, Ed25519PrivateKey):
        kind = type(key).__name__.removeprefix("_").replace("PrivateKey", "")
        raise InvalidInput(f"{where} is a {kind} key; Mentis signs with Ed25519 keys only", field="key")
    return key


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The private key in ``path`` (``MENTIS_SIGNING_KEY``); ConfigError when it cannot be used."""
    p = Path(path).expanduser()
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the signing key {p}: {exc.strerror or exc}") from None
    try:
        return parse_private_pem(data, f"the signing key {p}")
    except InvalidInput as exc:
        raise ConfigError(exc.message) from None


def write_private_key(key: Ed25519PrivateKey, path: str | Path) -> Path:
    """Write ``key`` as PEM to a new file of mode 0600 (never over an existing file)."""
    p = Path(path).expanduser()
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InvalidInput(f"{p} already exists; choose another --out or remove it", field="out") from None
    with os.fdopen(fd, "wb") as f:
        f.write(private_pem(key))
    return p


# ---------------------------------------------------------------- statements


class Unsigned(NamedTuple):
    """What the store knows of an entry before it is signed (its seq and prev are not part of it)."""

    chain: str
    kind: str
    id: str
    at: str
    agent: str
    body_hash: str


@dataclass(frozen=True, slots=True)
class Envelope:
    stream: str
    n: int
    prev: str
    signature: str

    def text(self) -> str:
        return f"{ENVELOPE_PREFIX}.{self.stream}.{self.n}.{self.prev or '-'}.{self.signature}"

    @classmethod
    def parse(cls, text: object) -> Envelope:
        """The envelope in ``text``; InvalidInput (field ``sig``) naming the part that is wrong."""
        if not isinstance(text, str):
            raise InvalidInput("sig must be a string", field="sig")
        m = _ENVELOPE.fullmatch(text)
        if m is None:
            parts = text.split(".")
            if len(parts) == 5 and parts[0] == ENVELOPE_PREFIX and len(parts[4]) != SIGNATURE_CHARS:
                raise InvalidInput(
                    f"sig: the signature must be {SIGNATURE_CHARS} base64url characters (64 bytes), "
                    f"found {len(parts[4])}",
                    field="sig",
                )
            raise InvalidInput(
                "sig must be s1.<stream: 32 hex>.<n>.<prev: 64 hex or ->.<signature: 86 base64url>",
                field="sig",
            )
        stream, n, prev, signature = m.groups()
        n_int = int(n)
        if (n_int == 0) != (prev == "-"):
            raise InvalidInput("sig: prev is '-' exactly when n is 0", field="sig")
        return cls(stream, n_int, "" if prev == "-" else prev, signature)


@dataclass(frozen=True, slots=True)
class Statement:
    """What a signature covers."""

    chain: str
    kind: str
    id: str
    at: str
    agent: str
    body_hash: str
    key_id: str
    stream: str
    n: int
    prev: str

    @classmethod
    def of(cls, fields: Unsigned, key_id: str, envelope: Envelope) -> Statement:
        return cls(*fields, key_id, envelope.stream, envelope.n, envelope.prev)

    def document(self) -> dict[str, Any]:
        return {
            "v": STATEMENT_VERSION,
            "chain": self.chain,
            "kind": self.kind,
            "id": self.id,
            "at": self.at,
            "agent": self.agent,
            "body_hash": self.body_hash,
            "key_id": self.key_id,
            "stream": self.stream,
            "n": self.n,
            "prev": self.prev,
        }

    def canonical(self) -> bytes:
        return canonical(self.document())

    def digest(self) -> str:
        """sha256 hex of the canonical statement: the next statement's ``prev``."""
        return hashlib.sha256(self.canonical()).hexdigest()


def verify(public: Ed25519PublicKey, statement: Statement, signature: str) -> bool:
    """True when ``signature`` (base64url) is ``public``'s signature of ``statement``."""
    try:
        raw = _unb64(signature, "sig", 64)
        public.verify(raw, statement.canonical())
    except (InvalidInput, InvalidSignature):
        return False
    return True


def verify_envelope(fields: Unsigned, key_id: str, sig: str, public: Ed25519PublicKey) -> bool:
    """True when ``sig`` (an envelope) is ``public``'s signature over the entry ``fields``."""
    try:
        env = Envelope.parse(sig)
    except InvalidInput:
        return False
    return verify(public, Statement.of(fields, key_id, env), env.signature)


# ---------------------------------------------------------------- signing


Sign = Callable[[Unsigned], tuple[str, str]]
"""Given an entry's fields, return ``(key_id, envelope text)``."""


class Signer:
    """One process's signing stream: a private key, the agent it signs for, and the stream's state.

    :meth:`sign` is thread-safe and advances the stream; call :meth:`restart` when a signed write
    failed or its outcome is unknown, so the stream never has a gap.
    """

    def __init__(self, key: Ed25519PrivateKey, agent: str) -> None:
        self.key = key
        self.agent = agent
        self.public = key.public_key()
        self.key_id = key_id_of(self.public)
        self._lock = threading.Lock()
        self.stream, self.n, self.prev = secrets.token_hex(16), 0, ""

    def restart(self) -> None:
        """Start a new stream (after a write that failed or whose outcome is unknown)."""
        with self._lock:
            self.stream, self.n, self.prev = secrets.token_hex(16), 0, ""

    def sign(self, fields: Unsigned) -> tuple[str, str]:
        with self._lock:
            stmt = Statement.of(fields, self.key_id, Envelope(self.stream, self.n, self.prev, ""))
            signature = _b64(self.key.sign(stmt.canonical()))
            self.n += 1
            self.prev = stmt.digest()
            return self.key_id, Envelope(stmt.stream, stmt.n, stmt.prev, signature).text()


def now_iso() -> str:
    """UTC timestamp with microseconds, the one time format of the ledger."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_at(at: str) -> datetime:
    try:
        return datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        raise InvalidInput(
            f"at must be a UTC time like 2026-01-02T03:04:05.000000Z, found {at!r}", field="at"
        ) from None


def check_skew(at: str, now: datetime | None = None) -> None:
    """InvalidInput unless ``at`` is within :data:`SKEW_S` of now."""
    delta = abs(((now or datetime.now(UTC)) - parse_at(at)).total_seconds())
    if delta > SKEW_S:
        raise InvalidInput(
            f"at {at} is {int(delta)} s from the server's clock (at most {SKEW_S} s); check the clocks",
            field="at",
        )
