"""`mentis serve --http`, `mentis token …` and `mentis tls self-signed` as a user runs them."""

from __future__ import annotations

import json
import re
import signal
import ssl
import stat
from pathlib import Path

import anyio
import httpx2
import pytest
from typer.testing import CliRunner

from mentis.cli import app
from mentis.errors import ConfigError
from mentis.http import parse_bind
from mentis.service.tokens import TokenStore

from .conftest import MENTIS
from .http_support import LiveServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _serve_until_banner(env: dict[str, str], *args: str) -> tuple[anyio.abc.Process, str, list[str]]:
    """Start `mentis serve --http …` and read stderr up to the banner's harness line."""
    process = await anyio.open_process([*MENTIS, "serve", "--http", *args], env=env)
    assert process.stderr is not None
    lines: list[str] = []
    buffer = b""
    while not any(line.startswith("harness config:") for line in lines):
        chunk = await process.stderr.receive()
        buffer += chunk
        *done, rest = buffer.split(b"\n")
        lines += [d.decode() for d in done]
        buffer = rest
    found = re.search(r"serving HTTP on (\S+) ", lines[0])
    assert found, lines
    return process, found.group(1), lines


@pytest.mark.anyio
async def test_serve_http_on_a_fresh_store_writes_a_private_admin_token_that_works(
    mentis_env: dict[str, str], db_path: Path
) -> None:
    with anyio.fail_after(60):
        process, url, lines = await _serve_until_banner(mentis_env, "127.0.0.1:0")
        async with process:
            token_file = db_path.parent / "admin.token"
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert any(str(token_file) in line for line in lines)
            token = token_file.read_text().strip()
            async with httpx2.AsyncClient(base_url=url) as http:
                refused = await http.post("/v1/verify_integrity", json={})
                allowed = await http.post(
                    "/v1/verify_integrity", json={}, headers={"Authorization": f"Bearer {token}"}
                )
            process.send_signal(signal.SIGTERM)
            assert await process.wait() in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
            assert process.stdout is not None
            assert [chunk async for chunk in process.stdout] == []  # nothing but the protocol on stdout
    assert (refused.status_code, allowed.status_code) == (401, 200)
    assert [t.scope for t in TokenStore(db_path).list()] == ["admin"]


@pytest.mark.anyio
async def test_serve_http_without_auth_on_loopback_warns_and_serves_without_a_token(
    mentis_env: dict[str, str], db_path: Path
) -> None:
    with anyio.fail_after(60):
        process, url, lines = await _serve_until_banner(mentis_env, "127.0.0.1:0", "--no-auth")
        async with process:
            async with httpx2.AsyncClient(base_url=url) as http:
                answer = await http.post("/v1/verify_integrity", json={})
            process.send_signal(signal.SIGTERM)
            await process.wait()
    assert answer.status_code == 200
    assert any("warning: --no-auth" in line for line in lines)
    assert not (db_path.parent / "admin.token").exists()


def test_serve_without_auth_on_a_public_address_is_refused_before_it_listens(
    mentis_env: dict[str, str],
) -> None:
    import subprocess

    done = subprocess.run(
        [*MENTIS, "serve", "--http", "0.0.0.0:0", "--no-auth"],
        env=mentis_env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 10
    assert b"only allowed on a loopback address" in done.stderr
    assert done.stdout == b""


def test_http_options_without_http_are_refused(db_path: Path) -> None:
    result = CliRunner().invoke(app, ["serve", "--db", str(db_path), "--no-auth"])
    assert result.exit_code == 2
    assert "need --http" in result.output


def test_a_bind_address_is_parsed_with_the_documented_defaults() -> None:
    assert parse_bind("") == ("127.0.0.1", 9471)
    assert parse_bind("0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert parse_bind("[::1]:9000") == ("::1", 9000)
    assert parse_bind("localhost") == ("localhost", 9471)
    assert parse_bind(":9472") == ("127.0.0.1", 9472)
    for bad in ("host:port", "1.2.3.4:70000", "[::1]:x"):
        with pytest.raises(ConfigError):
            parse_bind(bad)


def test_token_create_prints_the_token_once_list_never_shows_it_and_revoke_ends_it(db_path: Path) -> None:
    runner = CliRunner()
    db = ["--db", str(db_path)]
    created = runner.invoke(
        app,
        [
            "token",
            "create",
            *db,
            "--repo",
            "github.com/acme/*",
            "--scope",
            "write",
            "--agent",
            "ci-bot",
            "--expires",
            "30d",
            "--json",
        ],
    )
    assert created.exit_code == 0, created.output
    made = json.loads(created.stdout)
    assert made["token"].startswith(f"mentis_{made['id']}_")
    assert (made["scope"], made["agent"], made["repositories"]) == ("write", "ci-bot", ["github.com/acme/*"])
    listed = runner.invoke(app, ["token", "list", *db, "--json"])
    assert made["token"].split("_", 2)[2] not in listed.stdout
    assert [t["status"] for t in json.loads(listed.stdout)["tokens"]] == ["active"]
    revoked = runner.invoke(app, ["token", "revoke", *db, made["id"], "--json"])
    assert json.loads(revoked.stdout)["status"] == "revoked"
    assert TokenStore(db_path).lookup(made["token"]).status() == "revoked"  # type: ignore[union-attr]
    again = runner.invoke(app, ["token", "revoke", *db, made["id"]])
    bad = runner.invoke(app, ["token", "create", *db, "--scope", "root", "--repo", "x"])
    assert (again.exit_code, bad.exit_code) == (4, 2)


def test_a_self_signed_pair_serves_https_that_a_client_trusting_the_cert_accepts(db_path: Path) -> None:
    out = db_path.parent / "tls"
    made = CliRunner().invoke(app, ["tls", "self-signed", "--out", str(out)])
    assert made.exit_code == 0, made.output
    cert, key = out / "cert.pem", out / "key.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert CliRunner().invoke(app, ["tls", "self-signed", "--out", str(out)]).exit_code == 4
    with LiveServer(db_path, tls_cert=cert, tls_key=key) as live:
        assert live.url.startswith("https://")
        trusting = ssl.create_default_context(cafile=str(cert))
        with httpx2.Client(base_url=live.url, verify=trusting) as http:
            assert http.get("/health").status_code == 200
            assert http.post("/v1/verify_integrity", json={}).status_code == 401
        with httpx2.Client(base_url=live.url) as untrusting, pytest.raises(httpx2.ConnectError):
            untrusting.get("/health")
