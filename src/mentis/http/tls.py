"""A self-signed certificate and key for serving HTTPS on this machine (``mentis tls self-signed``).

The pair is for local use: the certificate names ``localhost``, ``127.0.0.1`` and ``::1`` (plus any
extra host given), is valid for a year, and a client trusts it by pointing at the certificate file
(e.g. ``curl --cacert cert.pem``). The key is an ECDSA P-256 key written with mode 0600. Files
are created, never opened through a symbolic link (see :func:`mentis.store.shared.files.write_new`).
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
from mentis.store.shared.files import write_new

CERT_NAME = "cert.pem"
KEY_NAME = "key.pem"
DEFAULT_HOSTS = ("localhost", "127.0.0.1", "::1")


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def self_signed(
    out_dir: Path, hosts: tuple[str, ...] = (), *, days: int = 365, force: bool = False
) -> tuple[Path, Path]:
    """Write ``cert.pem`` and ``key.pem`` into ``out_dir``; returns their paths."""
    cert_path, key_path = out_dir / CERT_NAME, out_dir / KEY_NAME
    existing = [p for p in (cert_path, key_path) if os.path.lexists(p)]
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
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        write_new(key_path, key_pem, 0o600, replace=force)
        write_new(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644, replace=force)
    except FileExistsError as exc:
        raise Conflict(f"{exc.filename} appeared while writing; pass --force to replace it") from None
    return cert_path, key_path
