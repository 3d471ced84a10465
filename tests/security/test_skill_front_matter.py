# ruff: noqa: F811  (fixtures imported from tests.security.stores are parameters here)
"""Finding 5 of security issue 24: skill front matter is no CPU weapon, and one token's uploads do
not hold up another token's requests.

The review's attack: PyYAML's pure-Python parser spent ~8 s of CPU on 0.84 MB of front matter;
40 such uploads at once from one write token filled the worker-thread pool that token lookups
shared, and another team's search waited ~60 s; front matter nested 50,000 deep ended in an
uncaught RecursionError (HTTP 500).

Now front matter is bounded before YAML builds anything (``MAX_FRONT_MATTER_BYTES``, then an event
scan for depth and aliases, then the C loader), a token has at most ``token_concurrency`` requests
in progress (the rest wait on the event loop, holding no worker thread), and token lookups run on
a limiter of their own. The pool tests count instead of timing: they hold every worker thread of
the default pool themselves and look at who is waiting for one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
import httpx2
import pytest

from mentis.api import skill_text
from mentis.api.common import parse
from mentis.api.skill_text import parse_skill
from mentis.api.skills import UploadSkillInput
from mentis.config import Settings
from mentis.errors import InvalidInput, SkillTextError
from mentis.http import HttpConfig, build_app, middleware
from mentis.service.memory import Memory
from mentis.service.tokens import TokenStore
from tests.http_support import LiveServer
from tests.security.stores import ADMIN, settings, state  # noqa: F401

REPO, OTHER = "team-a/shop", "team-b/billing"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def front_matter(extra: str, body: str = "Run `make test`.\n") -> str:
    return f"---\nname: run-tests\ndescription: How to run the tests\n{extra}---\n{body}"


# 0.84 MB of flow mappings: the review's payload shape (~8 s of pure-Python YAML before the fix)
EXPENSIVE = front_matter("x: [" + ", ".join(["{a: [1, 2, {b: c}]}"] * 42_000) + "]\n")
DEEP_50K = front_matter("x: " + "[" * 50_000 + "]" * 50_000 + "\n")


def nested(depth: int) -> str:
    """Front matter whose ``x`` holds lists nested so the whole document is ``depth`` levels deep
    (the top-level mapping is one)."""
    return front_matter("x: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n")


# ---------------------------------------------------------------- the bounds, on both stores


def upload_error(memory: Memory, content: str) -> InvalidInput:
    before = state(memory)
    with pytest.raises(InvalidInput) as caught:
        memory.upload_skill(ADMIN, parse(UploadSkillInput, {"repository": REPO, "content": content}))
    assert state(memory) == before
    assert caught.value.field == "content"
    return caught.value


def test_front_matter_over_its_byte_limit_is_refused_before_yaml_reads_it(
    open_memory: Callable[[], Memory],
) -> None:
    assert len(EXPENSIVE.encode()) > 800_000
    error = upload_error(open_memory(), EXPENSIVE)
    assert "front matter" in error.message and f"{skill_text.MAX_FRONT_MATTER_BYTES:,}" in error.message


def test_front_matter_nested_50000_deep_is_invalid_input_not_a_recursion_error(
    open_memory: Callable[[], Memory],
) -> None:
    memory = open_memory()
    upload_error(memory, DEEP_50K)  # over the byte limit as well
    within_size = nested(5_000)
    assert len(within_size.encode()) < skill_text.MAX_FRONT_MATTER_BYTES
    assert "nest" in upload_error(memory, within_size).message  # libyaml's own bound, or ours
    error = upload_error(memory, nested(skill_text.MAX_FRONT_MATTER_DEPTH + 1))
    assert f"nests more than {skill_text.MAX_FRONT_MATTER_DEPTH} levels" in error.message


def test_front_matter_with_yaml_aliases_is_refused(open_memory: Callable[[], Memory]) -> None:
    bomb = front_matter(
        "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b]\n"
    )
    error = upload_error(open_memory(), bomb)
    assert "alias" in error.message


def test_front_matter_at_the_bounds_still_reads() -> None:
    deepest = parse_skill(nested(skill_text.MAX_FRONT_MATTER_DEPTH))
    assert deepest.name == "run-tests"
    with pytest.raises(SkillTextError, match="nests more than"):
        parse_skill(nested(skill_text.MAX_FRONT_MATTER_DEPTH + 1))
    filler = "#" * (skill_text.MAX_FRONT_MATTER_BYTES - len("name: run-tests\ndescription: d\n"))
    largest = f"---\nname: run-tests\ndescription: d\n{filler}\n---\nbody\n"
    assert parse_skill(largest).description == "d"
    with pytest.raises(SkillTextError, match="front matter is 16,385 bytes"):
        parse_skill(largest.replace("#\n", "##\n"))
    usual = parse_skill(
        front_matter(
            "tags: [ci, pytest]\ntriggers:\n  - before a commit\nallowed-tools: Read, Grep\n"
            "metadata:\n  owner: é team\n  nested: {a: [1, 2]}\n"
        )
    )
    assert (usual.tags, usual.triggers) == (["ci", "pytest"], ["before a commit"])


# ---------------------------------------------------------------- through REST, on both stores


@asynccontextmanager
async def in_process(
    settings: Settings, limits: middleware.CallerLimits | None = None
) -> AsyncIterator[tuple[Memory, TokenStore, httpx2.AsyncClient]]:
    """The real HTTP app on the test's store, served in this event loop (so the worker-thread pool
    it uses is this loop's, which the test can hold)."""
    memory = Memory.open(settings)
    tokens = TokenStore.open(settings)
    try:
        app = build_app(memory, tokens, HttpConfig(), **({} if limits is None else {"limits": limits}))
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:9471", timeout=60
        ) as http:
            yield memory, tokens, http
    finally:
        memory.close()
        tokens.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def every_worker_thread_held() -> AsyncIterator[anyio.CapacityLimiter]:
    """Borrow every token of this loop's default worker-thread limiter, so any request that needs a
    worker thread from it waits (counted by ``statistics().tasks_waiting``) until the block ends."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    holders = [object() for _ in range(int(limiter.total_tokens))]
    for holder in holders:
        await limiter.acquire_on_behalf_of(holder)
    try:
        yield limiter
    finally:
        for holder in holders:
            limiter.release_on_behalf_of(holder)


async def until(condition: Callable[[], bool]) -> None:
    """Wait (bounded by the caller's fail_after) until ``condition`` holds."""
    while not condition():
        await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_token_lookups_do_not_wait_for_the_worker_threads_requests_use(settings: Settings) -> None:
    async with in_process(settings) as (_, tokens, http):
        good, _ = tokens.create(scope="read", repositories=(OTHER,))
        revoked, info = tokens.create(scope="write", repositories=(REPO,))
        tokens.revoke(info.id)
        async with every_worker_thread_held() as pool:
            with anyio.fail_after(15):
                unknown_route = await http.post("/v1/no_such_operation", json={}, headers=bearer(good))
                wrong = await http.post("/v1/search", json={}, headers=bearer(good[:-2] + "xx"))
                refused = await http.post("/v1/search", json={}, headers=bearer(revoked))
            assert pool.statistics().tasks_waiting == 0
    assert unknown_route.status_code == 404  # authenticated, then routed: no worker thread needed
    assert [wrong.status_code, refused.status_code] == [401, 401]
    assert "revoked" in refused.json()["error"]["message"]


@pytest.mark.anyio
async def test_one_tokens_flood_takes_at_most_its_share_of_worker_threads_and_others_still_get_one(
    settings: Settings,
) -> None:
    limits = middleware.CallerLimits(per_caller=4)
    flood, answers = 40, []
    async with in_process(settings, limits) as (_, tokens, http):
        writer, writer_info = tokens.create(scope="write", repositories=(REPO,))
        reader, reader_info = tokens.create(scope="read", repositories=(OTHER,))

        async def upload(n: int) -> None:
            content = front_matter("", f"step {n}\n").replace("run-tests", f"skill-{n}")
            body = {"repository": REPO, "content": content}
            answers.append(await http.post("/v1/upload_skill", json=body, headers=bearer(writer)))

        async def search() -> None:
            body = {"query": "release", "repository": OTHER}
            answers.append(await http.post("/v1/search", json=body, headers=bearer(reader)))

        # leaving the block frees the pool first, then the task group waits for every request
        async with anyio.create_task_group() as tg, every_worker_thread_held() as pool:
            for n in range(flood):
                tg.start_soon(upload, n)
            tg.start_soon(search)
            with anyio.fail_after(20):  # every request authenticated and queued where it waits
                await until(
                    lambda: (
                        limits.waiting(writer_info.id) == flood - 4
                        and pool.statistics().tasks_waiting == 4 + 1
                    )
                )
            assert (limits.running(writer_info.id), limits.running(reader_info.id)) == (4, 1)
            assert pool.statistics().tasks_waiting == 5  # four of the flood and the other team's search
    assert sorted(a.status_code for a in answers) == [200] * (flood + 1)
    assert limits.running(writer_info.id) == limits.waiting(writer_info.id) == 0


@pytest.fixture
def live(settings: Settings) -> Iterator[LiveServer]:
    with LiveServer(settings.db_path, settings=settings) as server:
        yield server


@pytest.mark.anyio
async def test_a_flood_of_expensive_uploads_over_rest_is_refused_and_another_teams_search_answers(
    live: LiveServer,
) -> None:
    writer, reader = live.token("write", (REPO,)), live.token("read", (OTHER,))
    refused: list[httpx2.Response] = []

    async def upload(http: httpx2.AsyncClient, content: str) -> None:
        refused.append(await http.post("/v1/upload_skill", json={"repository": REPO, "content": content}))

    async with live.client(writer) as flood, live.client(reader) as other:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                for _ in range(40):
                    tg.start_soon(upload, flood, EXPENSIVE)
                tg.start_soon(upload, flood, DEEP_50K)
                search = await other.post("/v1/search", json={"query": "release", "repository": OTHER})
    assert search.status_code == 200
    assert [r.status_code for r in refused] == [422] * 41
    assert {r.json()["error"]["code"] for r in refused} == {"invalid_input"}
    assert live.ledger() == []
