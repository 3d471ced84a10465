"""A self-signed certificate and key for serving HTTPS on this machine (``mentis tls self-signed``).

The pair is for local use: the certificate names ``localhost``, ``127.0.0.1`` and ``::1`` (plus any
extra host given), is valid for a year, and a client trusts it by pointing at the certificate file
(e.g. ``curl --cacert cert.pem``). The key is an ECDSA P-256 key written with mode 0600.
"""

from __future__ import annotations

import ipaddress
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mentis.errors import Conflict

CERT_NAME = "cert.pem"
KEY_NAME = "key.pem"
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file only its owner can read (mode 0600), replacing any old one."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def self_signed(
    out_dir: Path, hosts: tuple[str, ...] = (), *, days: int = 365, force: bool = False
) -> tuple[Path, Path]:
    """Write ``cert.pem`` and ``key.pem`` into ``out_dir``; returns their paths."""
    cert_path, key_path = out_dir / CERT_NAME, out_dir / KEY_NAME
    existing = [p for p in (cert_path, key_path) if p.exists()]
    if existing and not force:
        raise Conflict(f"{existing[0]} already exists; pass --force to replace it or choose another --out")
    names = list(dict.fromkeys((*DEFAULT_HOSTS, *hosts)))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mentis (self-signed)")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    write_private(
        key_path,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path
