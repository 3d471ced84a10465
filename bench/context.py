"""What Mentis's MCP surface costs an agent's context, in tokens: ``tools/list`` per tool profile
and the text of typical answers.

    .venv/bin/python bench/context.py [--json]

Tokens are counted with OpenAI's ``o200k_base`` vocabulary (the ``bpe-openai`` package, offline);
Claude's tokenizer is not public, so o200k_base is the one measured, and characters are given
too. Three sizes of a ``tools/list``:

- ``wire``: the ``tools/list`` result as the server sends it (compact JSON: names, descriptions,
  input and output schemas, annotations), through the official client in memory;
- ``spaced``: the same, written by ``json.dumps`` with its default separators (how issue 29's
  "before" figures were counted);
- ``model``: the part a harness hands the model: name, description and input schema (Claude Code
  drops the output schema, anthropics/claude-code#54197; so do function-calling formats).

The answers are those of a store filled by :func:`fill` (realistic attempt texts, some failed,
outdated and stale) with the deterministic hash embedder: a search of 5 and of 10 tasks, recall of
a task with 10 attempts, search_thoughts, a context bundle and a skill search. ``text`` is the text
block the agent reads (:mod:`mentis.mcp.render`), ``before`` the indented JSON the SDK wrote in its
place, ``structured`` the structured content (compact JSON).
"""

from __future__ import annotations

import json
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.server.mcpserver.utilities.func_metadata import _convert_to_content
from mcp_types import TextContent

from mentis.api.attempts import CodeContext, MarkOutdatedInput, RecordAttemptInput
from mentis.api.skills import UploadSkillInput
from mentis.api.thoughts import AppendThoughtInput
from mentis.config import Settings
from mentis.mcp.server import build_server
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory
from mentis.service.operations import BY_NAME
from mentis.service.profiles import PROFILES, parse_profile

ENCODING = "o200k_base"
REPO = "github.com/acme/shop"
OWNER = Caller(agent_id="claude-code")

BEFORE_TOOLS = {
    "commit": "92624cd",
    "tools": 32,
    "wire": (85_588, 21_334),
    "spaced": (92_908, 27_150),
    "model": (28_500, 7_110),
}
"""tools/list before issue 29 (every tool, no profile): (characters, tokens), measured with this
script's method on ``main`` at that commit (the last before the profiles), in a checkout of its
``src/`` (bench/README.md gives the command). Issue 29's brief measured 92,650 characters and 27,082
tokens the ``spaced`` way on an earlier commit."""

TARGETS = {"default": 2_500, "core": 1_500, "all": 12_000, "search_5": 500, "search_10": 900}
"""Issue 29's targets, in tokens: tools/list per profile, and a search's text."""

with warnings.catch_warnings():  # bpe-openai 0.1.4 reads its vocabularies with a deprecated importlib call
    warnings.simplefilter("ignore", DeprecationWarning)
    import bpe_openai

    _encoding = bpe_openai.get_encoding(ENCODING)


def tokens(text: str) -> int:
    return len(_encoding.encode(text))


def size(text: str) -> dict[str, int]:
    return {"chars": len(text), "tokens": tokens(text)}


# ---------------------------------------------------------------- a store that looks used

TOPICS = [
    (
        "cart-rounding",
        "Cart total is off by a cent",
        ["shop/cart.py", "tests/test_cart.py"],
        "each line is rounded before the sum, so the total drifts by a cent",
    ),
    (
        "login-redirect",
        "Login redirects to / instead of the page asked for",
        ["shop/auth/views.py"],
        "the next parameter is dropped when the form posts back",
    ),
    (
        "flaky-checkout",
        "test_checkout_concurrent fails one run in five",
        ["tests/test_checkout.py"],
        "two workers reserve the same stock row without a lock",
    ),
    (
        "slow-search",
        "Product search takes 3 s on the staging data",
        ["shop/search/query.py"],
        "the ILIKE filter cannot use the trigram index",
    ),
    (
        "migration-0042",
        "Migration 0042 locks the orders table for minutes",
        ["shop/migrations/0042.py"],
        "adding the column with a default rewrites the whole table",
    ),
    (
        "tz-invoices",
        "Invoices dated a day early for customers east of UTC",
        ["shop/billing/invoice.py"],
        "the date is taken from a naive UTC datetime",
    ),
    (
        "image-upload",
        "Large image uploads fail with 413 behind nginx",
        ["deploy/nginx.conf"],
        "client_max_body_size is 1m in the proxy, not in the app",
    ),
    (
        "cache-stale",
        "Prices stay stale for an hour after an update",
        ["shop/cache.py", "shop/prices.py"],
        "the price key is not deleted on save, only on expiry",
    ),
    (
        "email-encoding",
        "Order emails show mojibake for accented names",
        ["shop/mail/templates.py"],
        "the template is read as latin-1",
    ),
    (
        "api-pagination",
        "The orders API repeats items across pages",
        ["shop/api/orders.py"],
        "the ordering is not unique, so offsets shift between pages",
    ),
    (
        "docker-build",
        "Docker build re-installs every dependency on each change",
        ["Dockerfile"],
        "the source is copied before the lock file, which busts the layer cache",
    ),
    (
        "webhook-retry",
        "Payment webhooks are processed twice after a timeout",
        ["shop/payments/hooks.py"],
        "the handler is not idempotent on the event id",
    ),
]
ACTIONS = [
    ("Ran the focused test with -x -vv to see the first failure", "the assertion shows {a} != {b}"),
    ("Added logging around {f} and reproduced it locally", "the log shows the value changes between calls"),
    ("Switched the computation in {f} to Decimal and quantized once at the end", "{a} now, as expected"),
    ("Wrapped the write in a transaction with SELECT ... FOR UPDATE", "no duplicate after 50 runs"),
    ("Bisected between the last release tag and HEAD", "the first bad commit touches {f}"),
    ("Read the framework's docs for the setting and changed the default", "no effect on {b}"),
]


def _attempt(topic: int, n: int) -> RecordAttemptInput:
    task_id, title, files, cause = TOPICS[topic % len(TOPICS)]
    action, seen = ACTIONS[(topic + n) % len(ACTIONS)]
    values = {"f": files[0], "a": f"{19 + n}.99", "b": f"{20 + n}.00"}
    status = ("failed", "passed", None)[(topic + n) % 3]
    check = None
    if status is not None:
        check = {
            "command": f"pytest {files[-1]} -x -q",
            "status": status,
            "exit_code": 0 if status == "passed" else 1,
        }
    return RecordAttemptInput.model_validate(
        {
            "repository": REPO,
            "task_id": task_id,
            "task_title": title,
            "action": action.format(**values) + f" (try {n + 1}).",
            "files": files,
            "observation": f"After the change {seen.format(**values)}; {title.lower()} still shows on the "
            "second request, and the other tests in the module pass.",
            "inference": f"{cause.capitalize()} ({files[0]}); fixing it in the caller would only hide it.",
            "check": check,
            "code_context": CodeContext(commit=f"{topic:02x}{n:02x}" * 10, file_hashes={files[0]: "ab" * 20}),
            "tags": ["bug", task_id.split("-")[0]],
        }
    )


def fill(memory: Memory) -> None:
    """Twelve tasks of 2 to 10 attempts (the first has 10), all but the first attempt of a third of
    them marked outdated; twenty thoughts; three skills."""
    for topic in range(len(TOPICS)):
        ids = [
            memory.record_attempt(OWNER, _attempt(topic, n)).attempt_id
            for n in range(10 if topic == 0 else 2 + topic % 3)
        ]
        if topic % 3 == 0:
            reason = "The fix moved to the serializer in a later commit; this conclusion no longer holds."
            for attempt_id in ids[1:]:
                memory.mark_conclusion_outdated(
                    OWNER, MarkOutdatedInput(repository=REPO, attempt_id=attempt_id, reason=reason)
                )
    kinds = ["Decision", "Finding", "Constraint", "LessonLearned", "Hypothesis"]
    for i in range(20):
        _, title, files, cause = TOPICS[i % len(TOPICS)]
        memory.append_thought(
            OWNER,
            AppendThoughtInput.model_validate(
                {
                    "repository": REPO,
                    "type": kinds[i % len(kinds)],
                    "content": f"{title}: {cause}. Keep the fix in {files[0]} and cover it with a test "
                    f"(note {i}).",
                    "tags": ["money"] if i % 2 else ["auth"],
                    "concepts": [files[0].split("/")[-1]],
                    "importance": "0.7",
                }
            ),
        )
    for name, what in (("run-tests", "run the test suite"), ("release", "cut a release"), ("db", "migrate")):
        text = f"---\nname: {name}\ndescription: How to {what} in this repository.\n---\n1. Do it.\n"
        memory.upload_skill(OWNER, UploadSkillInput(repository=REPO, content=text))


@contextmanager
def filled_memory() -> Iterator[Memory]:
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home), db_path=Path(home) / "mentis.db", embedder="hash")
        memory = Memory.open(settings, HashEmbedder())
        try:
            fill(memory)
            yield memory
        finally:
            memory.close()


# ---------------------------------------------------------------- what an agent reads


def tools_list(memory: Memory, profile: str) -> dict[str, Any]:
    """The three sizes of ``tools/list`` under ``profile``, and its instructions."""

    async def listed() -> tuple[Any, str | None]:
        async with Client(build_server(memory, parse_profile(profile))) as client:
            return await client.list_tools(), client.instructions

    result, instructions = anyio.run(listed)
    wire = result.model_dump_json(by_alias=True, exclude_none=True)
    tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in result.tools]
    spaced = json.dumps({"tools": tools})
    model = json.dumps(
        [{k: t[k] for k in ("name", "description", "inputSchema")} for t in tools], separators=(",", ":")
    )
    outputs = json.dumps([t.get("outputSchema") for t in tools], separators=(",", ":"))
    return {
        "tools": len(tools),
        "wire": size(wire),
        "spaced": size(spaced),
        "model": size(model),
        "output_schemas": size(outputs),
        "instructions": size(instructions or ""),
    }


CHANGED = {topic[2][0]: "cd" * 20 for topic in TOPICS[::2]}
"""Current file hashes a search passes: half the tasks' files changed since their attempts."""
QUERY = "cart total rounding is wrong by a cent"
ANSWERS: dict[str, tuple[str, dict[str, Any]]] = {
    "search_5": ("search", {"query": QUERY, "limit": 5, "current_file_hashes": CHANGED}),
    "search_10": ("search", {"query": QUERY, "limit": 10, "current_file_hashes": CHANGED}),
    "recall_10_attempts": ("recall", {"repository": REPO, "task_id": "cart-rounding"}),
    "search_thoughts_10": ("search_thoughts", {"query": "money rounding decimal", "limit": 10}),
    "context_bundle_5": ("context_bundle", {"query": "money rounding decimal", "limit": 5, "related": 3}),
    "search_skills": ("search_skills", {"query": "how do I run the tests"}),
}


def answer(memory: Memory, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """An answer's text (as the agent reads it), the SDK's JSON text it replaces, its structured content."""

    async def called() -> Any:
        async with Client(build_server(memory, parse_profile("all"))) as client:
            return await client.call_tool(tool, arguments)

    result = anyio.run(called)
    assert not result.is_error, result.content
    (block,) = result.content
    assert isinstance(block, TextContent)
    op = BY_NAME[tool]
    typed = op.output.model_validate(result.structured_content)
    (before,) = _convert_to_content(typed)
    assert isinstance(before, TextContent)
    return {
        "text": size(block.text),
        "before": size(before.text),
        "structured": size(json.dumps(result.structured_content, separators=(",", ":"))),
        "items": _count(result.structured_content),
    }


def _count(content: dict[str, Any]) -> int:
    for key in ("tasks", "rows", "thoughts", "bundles", "skills"):
        if isinstance(content.get(key), list):
            return len(content[key])
    return 1


def measure() -> dict[str, Any]:
    with filled_memory() as memory:
        return {
            "encoding": ENCODING,
            "before_tools": BEFORE_TOOLS,
            "targets": TARGETS,
            "profiles": {name: tools_list(memory, name) for name in PROFILES},
            "answers": {name: answer(memory, *call) for name, call in ANSWERS.items()},
        }


def report(data: dict[str, Any]) -> str:
    lines = [
        f"tokens: {data['encoding']} (bpe-openai); before: commit {BEFORE_TOOLS['commit']}, "
        f"{BEFORE_TOOLS['tools']} tools, wire {BEFORE_TOOLS['wire'][1]:,} tokens "
        f"({BEFORE_TOOLS['wire'][0]:,} chars), spaced {BEFORE_TOOLS['spaced'][1]:,}, "
        f"model-facing {BEFORE_TOOLS['model'][1]:,}",
        "",
        "| profile | tools | wire tokens (chars) | spaced tokens | model-facing tokens | output schemas "
        "| target |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, p in data["profiles"].items():
        target = f"{TARGETS[name]:,}" if name in TARGETS else ""
        lines.append(
            f"| {name} | {p['tools']} | {p['wire']['tokens']:,} ({p['wire']['chars']:,}) | "
            f"{p['spaced']['tokens']:,} | {p['model']['tokens']:,} | {p['output_schemas']['tokens']:,} | "
            f"{target} |"
        )
    lines += [
        "",
        "| answer | items | text tokens (chars) | before: SDK JSON text | structured content | target |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, a in data["answers"].items():
        target = f"{TARGETS[name]:,}" if name in TARGETS else ""
        lines.append(
            f"| {name} | {a['items']} | {a['text']['tokens']:,} ({a['text']['chars']:,}) | "
            f"{a['before']['tokens']:,} | {a['structured']['tokens']:,} | {target} |"
        )
    return "\n".join(lines)


def main() -> None:
    data = measure()
    if "--json" in sys.argv[1:]:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(report(data) + "\n")


if __name__ == "__main__":
    main()
