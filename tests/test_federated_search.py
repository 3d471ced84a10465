"""Federated search over real memories: this SQLite store, a PostgreSQL store and a served one
with a token (a real `mentis serve --http` process where the test stops it, else the same app run
in this process); fused by rank, a memory that stops or refuses the
token reported while the others answer, and bad configuration refused naming the variable."""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client
from typer.testing import CliRunner

from mentis import retrieval
from mentis.api.attempts import RecordAttemptInput, SearchInput
from mentis.api.federation import FederatedSearchInput, FederatedSearchResult
from mentis.cli import app
from mentis.config import Settings
from mentis.errors import ConfigError, Forbidden, InvalidInput
from mentis.mcp.server import build_server
from mentis.providers.embed import HashEmbedder
from mentis.service import doctor
from mentis.service.access import Caller
from mentis.service.federation import RemoteMemory, parse_memories
from mentis.service.memory import Memory
from mentis.service.profiles import parse_profile
from tests.http_support import LiveServer
from tests.pg_server import Cluster
from tests.remote_support import make_token

REPO = "github.com/acme/shop"
CALLER = Caller(agent_id="fed-agent")
QUERY = "login page crashes on submit"


def _record(memory: Memory, task: str, action: str, observation: str) -> None:
    memory.record_attempt(
        CALLER,
        RecordAttemptInput(repository=REPO, task_id=task, action=action, observation=observation),
    )


def _fill(memory: Memory, prefix: str) -> None:
    _record(memory, f"{prefix}-login", "fixed the login page crash on submit", "login submit crash gone")
    _record(memory, f"{prefix}-cache", "tuned the cache size", "cache hit rate went up")
    _record(memory, "shared-task", "login crash on submit again, checked the form", "submit handler throws")


@contextmanager
def opened(settings: Settings) -> Iterator[Memory]:
    m = Memory.open(settings, HashEmbedder())
    try:
        yield m
    finally:
        m.close()


class Served:
    """`mentis serve --http 127.0.0.1:0` on its own store, its base URL read from its banner."""

    def __init__(self, db: Path) -> None:
        env = dict(os.environ, MENTIS_DB=str(db), MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="server")
        env.pop("MENTIS_FEDERATION", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mentis", "serve", "--http", "127.0.0.1:0"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        seen = ""
        for line in self.process.stderr:
            seen += line
            if "harness config:" in line:
                break
        found = re.search(r"serving HTTP on (\S+) ", seen)
        assert found, seen
        self.url = found.group(1)
        # its log goes on: drained, so a full pipe never blocks it
        self.drain = threading.Thread(target=self.process.stderr.read, daemon=True)
        self.drain.start()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
        self.process.wait(timeout=30)
        self.drain.join(timeout=30)
        assert self.process.stderr is not None
        self.process.stderr.close()


def _remote(tmp_path: Path) -> tuple[Path, str]:
    """The served store ('remote'), filled, and a read token for it."""
    remote_db = tmp_path / "remote" / "mentis.db"
    remote_db.parent.mkdir(mode=0o700)
    with opened(Settings(home=remote_db.parent, db_path=remote_db, embedder="hash")) as m:
        _fill(m, "remote")
    return remote_db, make_token(remote_db, "reader", scope="read")


@contextmanager
def _federating(
    tmp_path: Path, pg_cluster: Cluster, remote_url: str, token: str
) -> Iterator[tuple[Memory, Settings]]:
    """A local SQLite memory federating a PostgreSQL store ('team') and the served one ('remote')."""
    pg = dataclasses.replace(
        Settings(home=tmp_path, db_path=tmp_path / "unused.db", embedder="hash"),
        database_url=pg_cluster.new_database(),
    )
    with opened(pg) as m:
        _fill(m, "team")
    env = {
        "MENTIS_FEDERATION": f"team={pg.database_url},remote={remote_url}",
        "MENTIS_FEDERATION_REMOTE_TOKEN": token,
        "MENTIS_FEDERATION_TIMEOUT": "20",
    }
    local_settings = Settings(home=tmp_path, db_path=tmp_path / "mentis.db", embedder="hash", federation=env)
    with opened(local_settings) as local:
        _fill(local, "local")
        yield local, local_settings


@pytest.fixture
def three(tmp_path: Path, pg_cluster: Cluster) -> Iterator[tuple[Memory, Settings, LiveServer, str]]:
    """The local memory federating 'team' and 'remote', 'remote' served by the app `mentis serve
    --http` serves, run in this process (tests/http_support.py)."""
    remote_db, token = _remote(tmp_path)
    with (
        LiveServer(remote_db) as served,
        _federating(tmp_path, pg_cluster, served.url, token) as (local, settings),
    ):
        yield local, settings, served, token


@pytest.fixture
def three_served(tmp_path: Path, pg_cluster: Cluster) -> Iterator[tuple[Memory, Settings, Served, str]]:
    """:func:`three` with 'remote' served by a real `mentis serve --http` child (the test stops it)."""
    remote_db, token = _remote(tmp_path)
    served = Served(remote_db)
    try:
        with _federating(tmp_path, pg_cluster, served.url, token) as (local, settings):
            yield local, settings, served, token
    finally:
        served.stop()


def test_rank_fusion_is_the_sum_of_reciprocal_ranks_over_the_lists_holding_a_key() -> None:
    fused = retrieval.fuse_ranked([["a", "b", "c"], ["b", "d"], ["c"]], k=10)
    assert [(key, round(score, 9), ranks) for key, score, ranks in fused] == [
        ("b", round(1 / 12 + 1 / 11, 9), [2, 1, 0]),
        ("c", round(1 / 13 + 1 / 11, 9), [3, 0, 1]),
        ("a", round(1 / 11, 9), [1, 0, 0]),
        ("d", round(1 / 12, 9), [0, 2, 0]),
    ]


def test_a_federated_search_fuses_each_memorys_own_ranking_and_names_where_each_task_came_from(
    three: tuple[Memory, Settings, LiveServer, str],
) -> None:
    local, _, _, _ = three
    result = local.federated_search(CALLER, FederatedSearchInput(query=QUERY, limit=10))
    assert result.answered == ["local", "team", "remote"] and result.unavailable == []
    own = {
        "local": local.search(CALLER, SearchInput(query=QUERY, limit=10)),
        "team": local.federation._member(local.federation.configs()[0]).search(
            CALLER, SearchInput(query=QUERY)
        ),
        "remote": local.federation._member(local.federation.configs()[1]).search(
            CALLER, SearchInput(query=QUERY)
        ),
    }
    rank_of = {
        (name, t.repository, t.task_id): i for name, r in own.items() for i, t in enumerate(r.tasks, 1)
    }
    expected: dict[tuple[str, str], float] = {}
    for (_name, repo, task), rank in rank_of.items():
        expected[(repo, task)] = expected.get((repo, task), 0.0) + 1 / (retrieval.RRF_K + rank)
    assert len(result.tasks) == len(expected) == 7  # 2 own tasks per memory + the shared one
    for t in result.tasks:
        key = (t.task.repository, t.task.task_id)
        assert t.fused == round(expected[key], 6)
        assert {(r.memory, r.rank) for r in t.ranks} == {
            (n, rank_of[(n, *key)]) for n in own if (n, *key) in rank_of
        }
        assert t.memory == min(t.ranks, key=lambda r: r.rank).memory
        if t.task.task_id != "shared-task":
            assert t.task.task_id.split("-")[0] == t.memory  # each memory's own tasks, named by it
    assert [t.fused for t in result.tasks] == sorted((t.fused for t in result.tasks), reverse=True)
    shared = next(t for t in result.tasks if t.task.task_id == "shared-task")
    assert {r.memory for r in shared.ranks} == {"local", "team", "remote"}
    assert result.tasks[0] == shared  # found in all three, so fused first


def test_a_memory_that_stops_or_hangs_is_reported_and_the_others_still_answer(
    three_served: tuple[Memory, Settings, Served, str],
) -> None:
    local, settings, served, _ = three_served
    first = local.federated_search(CALLER, FederatedSearchInput(query=QUERY))
    assert "remote" in first.answered
    served.process.send_signal(signal.SIGSTOP)  # it hangs: its connection accepted, no answer
    fast = dataclasses.replace(
        settings, federation={**settings.federation, "MENTIS_FEDERATION_REMOTE_TIMEOUT": "1"}
    )
    with opened(fast) as hurried:
        hung = hurried.federated_search(CALLER, FederatedSearchInput(query=QUERY))
        assert hung.answered == ["local", "team"]
        assert [(d.memory, d.reason) for d in hung.unavailable] == [("remote", "did not answer within 1 s")]
    served.stop()  # now it is down
    down = local.federated_search(CALLER, FederatedSearchInput(query=QUERY))
    assert down.answered == ["local", "team"]
    assert [d.memory for d in down.unavailable] == ["remote"]
    assert "could not connect" in down.unavailable[0].reason, down.unavailable
    assert {t.memory for t in down.tasks} == {"local", "team"} and len(down.tasks) == 5


def test_rest_answers_a_federated_search_with_the_servers_own_memory(
    three: tuple[Memory, Settings, LiveServer, str],
) -> None:
    _, _, served, token = three
    reply = httpx.post(
        f"{served.url}/v1/federated_search",
        json={"query": QUERY, "limit": 2},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    answer = FederatedSearchResult.model_validate(reply.json())
    assert answer.answered == ["local"] and [t.memory for t in answer.tasks] == ["local", "local"]
    bad = httpx.post(
        f"{served.url}/v1/federated_search",
        json={"query": QUERY, "memories": ["team"]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "memories"


def test_a_wrong_token_is_reported_as_refused(three: tuple[Memory, Settings, LiveServer, str]) -> None:
    _, settings, _, _ = three
    wrong = dataclasses.replace(
        settings, federation={**settings.federation, "MENTIS_FEDERATION_REMOTE_TOKEN": "mentis_wrong"}
    )
    with opened(wrong) as m:
        result = m.federated_search(CALLER, FederatedSearchInput(query=QUERY, memories=["remote", "local"]))
    assert result.answered == ["local"]
    (down,) = result.unavailable
    assert down.memory == "remote" and "HTTP 401" in down.reason and "refused the token" in down.reason
    assert "mentis_wrong" not in down.reason


def test_a_caller_limited_to_some_repositories_is_not_given_a_remote_answer(
    three: tuple[Memory, Settings, LiveServer, str],
) -> None:
    local, _, _, _ = three
    scoped = Caller(agent_id="t", repositories=("github.com/acme/*",))
    result = local.federated_search(scoped, FederatedSearchInput(query=QUERY))
    assert result.answered == ["local", "team"]
    assert [d.memory for d in result.unavailable] == ["remote"]
    assert "token configured for it" in result.unavailable[0].reason
    with pytest.raises(Forbidden):  # a repository outside its scope: refused before any memory is asked
        local.federated_search(scoped, FederatedSearchInput(query=QUERY, repository="github.com/other/x"))


def test_the_tool_and_the_cli_answer_with_each_memory_named(
    three: tuple[Memory, Settings, LiveServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    local, settings, _, _ = three

    async def called() -> tuple[str, dict[str, object]]:
        async with Client(build_server(local, parse_profile("federation"))) as client:
            got = await client.call_tool("federated_search", {"query": QUERY, "limit": 3})
            assert not got.is_error, got.content
            return got.content[0].text, got.structured_content or {}

    text, structured = anyio.run(called)
    assert FederatedSearchResult.model_validate(structured).answered == ["local", "team", "remote"]
    assert "memory=" in text and "ranks local #" in text.replace("remote #", "local #")
    for key, value in {**settings.federation, "MENTIS_EMBEDDER": "hash"}.items():
        monkeypatch.setenv(key, value)
    cli = CliRunner().invoke(
        app,
        [
            "search",
            QUERY,
            "--federated",
            "-m",
            "local",
            "-m",
            "team",
            "--db",
            str(settings.db_path),
            "--json",
        ],
    )
    assert cli.exit_code == 0, cli.output
    answer = FederatedSearchResult.model_validate_json(cli.stdout)
    assert answer.answered == ["local", "team"] and answer.unavailable == []


def test_bad_federation_input_is_refused_naming_the_field(tmp_path: Path, memory: Memory) -> None:
    for env, words in [
        ({"MENTIS_FEDERATION": "team=http://mentis.example.com"}, "plain http"),
        ({"MENTIS_FEDERATION": "team=ftp://x"}, "postgresql://"),
        ({"MENTIS_FEDERATION": "Local=postgresql://x/y"}, "NAME=URL"),
        ({"MENTIS_FEDERATION": "team=https://mentis.example.com"}, "MENTIS_FEDERATION_TEAM_TOKEN"),
        ({"MENTIS_FEDERATION": "a=postgresql://x/y,a=postgresql://x/z"}, "named twice"),
        ({"MENTIS_FEDERATION": "a=postgresql://x/y", "MENTIS_FEDERATION_TIMEOUT": "-1"}, "TIMEOUT"),
    ]:
        with pytest.raises(ConfigError) as caught:
            parse_memories(env)
        assert "MENTIS_FEDERATION" in caught.value.message and words in caught.value.message, caught.value
    loopback = parse_memories(
        {"MENTIS_FEDERATION": "me=http://127.0.0.1:9471/mcp", "MENTIS_FEDERATION_ME_TOKEN": "t"}
    )
    assert [(m.name, m.url, m.remote) for m in loopback] == [("me", "http://127.0.0.1:9471", True)]
    with pytest.raises(InvalidInput) as unknown:
        memory.federated_search(CALLER, FederatedSearchInput(query=QUERY, memories=["nowhere"]))
    assert unknown.value.field == "memories"
    cli = CliRunner().invoke(app, ["search", QUERY, "-m", "team", "--db", str(tmp_path / "x.db")])
    assert cli.exit_code == 2 and "--memory" in cli.output


NEWER_ANSWER = {
    "tasks": [
        {
            "repository": REPO,
            "task_id": "t1",
            "score": 0.5,
            "score_parts": {"fused": 0.5},
            "attempt": {
                "attempt_id": "a1",
                "action": "did",
                "observation": "saw",
                "status": "passed",
                "files": [],
                "created_at": "2026-12-06T00:00:00Z",
                "agent_id": "x",
                "visibility": "repository",
            },
            "matched_attempt_ids": ["a1"],
            "attempt_count": 1,
            "branch": "main",
        }
    ],
    "ranking": "fused",
}
"""What a newer server might answer: fields this version does not know, in a task and its attempt."""


def test_the_query_sent_to_a_remote_memory_is_scrubbed_and_its_unknown_fields_are_dropped() -> None:
    """A real HTTP exchange with a listener that keeps what it was sent and answers as a newer
    server might."""
    received: list[dict[str, object]] = []

    class Listener(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            body = json.dumps(NEWER_ANSWER).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    try:
        (config,) = parse_memories(
            {
                "MENTIS_FEDERATION": f"box=http://127.0.0.1:{server.server_address[1]}",
                "MENTIS_FEDERATION_BOX_TOKEN": "t",
            }
        )
        remote = RemoteMemory(config)
        try:
            answer = remote.search(CALLER, SearchInput(query=f"clone fails with token {secret}"))
        finally:
            remote.close()
    finally:
        server.shutdown()
        server.server_close()
    (sent,) = received
    assert secret not in json.dumps(sent) and str(sent["query"]).startswith("clone fails with token ")
    assert [(t.task_id, t.attempt.attempt_id) for t in answer.tasks] == [("t1", "a1")]


def test_doctor_reports_the_federation_or_the_setting_that_is_wrong(settings: Settings) -> None:
    good = {"MENTIS_FEDERATION": "team=postgresql://db/mentis"}
    bad = {"MENTIS_FEDERATION": "team=http://mentis.example.com"}
    found = {
        name: [
            f for f in doctor.run(dataclasses.replace(settings, federation=env)) if f.check == "federation"
        ]
        for name, env in (("none", {}), ("good", good), ("bad", bad))
    }
    assert [(f.status, f.detail) for f in found["none"]] == [
        ("ok", "no other memory configured (MENTIS_FEDERATION)")
    ]
    assert [(f.status, f.detail) for f in found["good"]] == [
        ("ok", "federated search reads local and team (PostgreSQL)")
    ]
    (failed,) = found["bad"]
    assert failed.status == "fail" and "MENTIS_FEDERATION" in failed.detail and "plain http" in failed.detail
