"""Two `mentis serve --http` processes on one store (one SQLite file, or one PostgreSQL database)
share their tokens: a token made anywhere works on both, and a revocation made anywhere is refused
by both at their next request."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mentis.config import Settings
from tests.conftest import MENTIS
from tests.dashboard.conftest import csrf_of
from tests.pg_server import Cluster
from tests.test_http_cli import _serve_until_banner

PROBE = "/v1/verify_integrity"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _env(settings: Settings, machine: str) -> dict[str, str]:
    """The environment of a process on ``machine``: on PostgreSQL each has a home of its own (as
    replicas on separate hosts do), so nothing local can carry a token from one to another."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MENTIS_")}
    env.update(MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="test-agent")
    if settings.database_url:
        home = settings.home / machine
        home.mkdir()
        env.update(MENTIS_DATABASE_URL=settings.database_url, MENTIS_HOME=str(home))
    else:
        env.update(MENTIS_HOME=str(settings.home), MENTIS_DB=str(settings.db_path))
    return env


def _token_cli(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [*MENTIS, "token", *args, "--json"], env=env, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    return dict(json.loads(done.stdout))


@asynccontextmanager
async def _server(env: dict[str, str]) -> AsyncIterator[str]:
    process, url, _ = await _serve_until_banner(env, "127.0.0.1:0")
    async with process:
        try:
            yield url
        finally:
            process.send_signal(signal.SIGTERM)
            await process.wait()


async def _statuses(token: str, *urls: str) -> list[int]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        return [(await http.post(url + PROBE, json={})).status_code for url in urls]


async def _dashboard_admin(url: str, admin_token: str) -> tuple[httpx2.AsyncClient, str]:
    """A client signed in to ``url``'s dashboard, and the admin page's CSRF token."""
    http = httpx2.AsyncClient(base_url=url, timeout=30)
    page = await http.get("/dashboard/login")
    signed = await http.post("/dashboard/login", data={"csrf": csrf_of(page.text), "token": admin_token})
    assert signed.status_code == 303, signed.text
    return http, csrf_of((await http.get("/dashboard/admin")).text)


@pytest.mark.anyio
async def test_two_servers_on_one_store_share_tokens_and_refuse_a_revoked_one_at_once(
    settings: Settings,
) -> None:
    env, env_one, env_two = (_env(settings, machine) for machine in ("cli", "one", "two"))
    admin = _token_cli(env, "create", "--scope", "admin", "--agent", "root")
    writer = _token_cli(env, "create", "--scope", "write", "--repo", "github.com/acme/*", "--agent", "ci")
    with anyio.fail_after(180):
        async with AsyncExitStack() as stack:
            one = await stack.enter_async_context(_server(env_one))
            two = await stack.enter_async_context(_server(env_two))
            assert await _statuses(writer["token"], one, two) == [200, 200]

            dash, csrf = await _dashboard_admin(one, admin["token"])
            stack.push_async_callback(dash.aclose)
            revoked = await dash.post(
                "/dashboard/admin/revoke", data={"csrf": csrf, "token_id": writer["id"]}
            )
            assert (revoked.status_code, revoked.headers["location"]) == (303, "/dashboard/admin")
            assert await _statuses(writer["token"], two, one) == [401, 401]

            made = await dash.post(
                "/dashboard/admin/tokens",
                data={"csrf": csrf, "scope": "read", "repositories": "github.com/acme/*", "agent": "ro"},
            )
            assert made.status_code == 200
            new = made.text.split('id="new-token" class="mono grow" readonly value="')[1].split('"')[0]
            assert await _statuses(new, two, one) == [200, 200]
            await anyio.to_thread.run_sync(_token_cli, env, "revoke", new.split("_")[1])
            refused = await _statuses(new, one, two)
    assert refused == [401, 401]


@pytest.mark.anyio
async def test_a_first_server_on_postgresql_writes_its_admin_token_into_a_new_home(
    pg_cluster: Cluster, tmp_path: Path
) -> None:
    home = tmp_path / "not" / "yet"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MENTIS_")}
    env.update(MENTIS_EMBEDDER="hash", MENTIS_HOME=str(home), MENTIS_DATABASE_URL=pg_cluster.new_database())
    with anyio.fail_after(120):
        async with _server(env) as url:
            token = (home / "admin.token").read_text().strip()
            assert await _statuses(token, url) == [200]
    assert stat.S_IMODE((home / "admin.token").stat().st_mode) == 0o600
    assert not (home / "mentis.db").exists()
