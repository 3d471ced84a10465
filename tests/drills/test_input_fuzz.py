"""Drill: inputs built from every tool's published JSON schema, over MCP stdio and over REST.

The strategies come from the schemas the transports publish, not from our models: MCP's
``tools/list`` (a real `mentis serve` subprocess driven by the official client) and REST's
``/v1/openapi.json``. Each example is a schema-valid document (:mod:`.schema_strategies`), or one with a
mutation: a required field dropped, an unknown field added at the top or inside a nested object,
or one field given a value of any JSON type. Every call gets a valid answer (it validates against
the operation's output model) or a clear tool error ``[code] message`` with a known code; a call
that was refused leaves the ledger exactly as it was; and a dropped required field or an unknown
field is always refused.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx2
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from mentis.service.operations import OPERATIONS, Operation

from ..http_support import LiveServer
from ..test_http_fuzz import JSON, KNOWN_CODES, post_and_check
from .scale import SIZES
from .schema_strategies import from_schema

pytestmark = [pytest.mark.drill, pytest.mark.slow]

MUTATIONS = ("valid", "valid", "drop_required", "unknown_field", "unknown_nested_field", "retype")
SEEN: Counter[tuple[str, str]] = Counter()  # (transport, "answer" | error code), for the last test
MUST_REFUSE = {"drop_required", "unknown_field", "unknown_nested_field"}
ERROR = re.compile(r"^(?:Error executing tool \w+: )?\[(\w+)\] (.{10,})$", re.DOTALL)
FUZZ = settings(
    max_examples=SIZES.fuzz_examples,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


# --------------------------------------------------------------------------- strategies


def nested_objects(doc: Any) -> list[dict[str, Any]]:
    """Every object below the top level of a generated document."""
    out: list[dict[str, Any]] = []
    values = doc.values() if isinstance(doc, dict) else doc if isinstance(doc, list) else []
    for value in values:
        if isinstance(value, dict):
            out.append(value)
        out.extend(nested_objects(value))
    return out


def documents(schema: dict[str, Any]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(mutation, document) pairs from a published input schema."""
    props = set(schema.get("properties", {}))
    required = list(schema.get("required", []))
    unknown = st.text(min_size=1, max_size=12).filter(lambda k: k not in props)

    @st.composite
    def build(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
        doc: dict[str, Any] = draw(from_schema(schema))
        how = draw(st.sampled_from(MUTATIONS))
        if how == "drop_required":
            if not required:
                return "valid", doc
            doc.pop(draw(st.sampled_from(required)), None)
        elif how == "unknown_field":
            doc[draw(unknown)] = draw(JSON)
        elif how == "unknown_nested_field":
            # a record nested in the document (check, code_context, filters, a relation…); maps
            # such as file_hashes or params take any key, so they are left alone
            records = [o for o in nested_objects(doc) if o and not any("/" in k or "." in k for k in o)]
            if not records:
                return "valid", doc
            target = draw(st.sampled_from(records))
            key = draw(st.text(min_size=1, max_size=12).filter(lambda k: k not in target))
            target["zz_" + key] = draw(JSON)
        elif how == "retype":
            if not props:  # a tool with no input (list_agents)
                return "valid", doc
            doc[draw(st.sampled_from(sorted(props)))] = draw(JSON)
        return how, doc

    return build()


# --------------------------------------------------------------------------- MCP over stdio


class StdioMentis:
    """A `mentis serve` subprocess and the official client, driven from sync code via a portal."""

    def __init__(self, portal: BlockingPortal, client: Client, db: Path) -> None:
        self.portal = portal
        self.client = client
        self.db = db

    def ledger(self) -> list[str]:
        con = sqlite3.connect(self.db)
        try:
            return [h for (h,) in con.execute("SELECT hash FROM entries ORDER BY rowid")]
        finally:
            con.close()

    def call(self, name: str, args: dict[str, Any]) -> Any:
        return self.portal.call(self.client.call_tool, name, args)


@pytest.fixture(scope="module")
def stdio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StdioMentis]:
    home = tmp_path_factory.mktemp("fuzz-stdio")
    env = dict(
        os.environ, MENTIS_DB=str(home / "mentis.db"), MENTIS_EMBEDDER="hash", MENTIS_AGENT_ID="fuzz-agent"
    )
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mentis", "serve", "--tools", "all"], env=env
    )
    with ExitStack() as stack:
        err = stack.enter_context((home / "serve.err").open("w"))
        portal = stack.enter_context(start_blocking_portal("asyncio"))
        client = stack.enter_context(
            portal.wrap_async_context_manager(Client(stdio_client(params, errlog=err)))
        )
        yield StdioMentis(portal, client, home / "mentis.db")


@pytest.fixture(scope="module")
def mcp_schemas(stdio: StdioMentis) -> dict[str, dict[str, Any]]:
    listed = stdio.portal.call(stdio.client.list_tools)
    return {tool.name: tool.input_schema for tool in listed.tools}


def test_every_operation_publishes_an_input_schema_on_both_transports(
    mcp_schemas: dict[str, dict[str, Any]], rest_schemas: dict[str, dict[str, Any]]
) -> None:
    assert set(mcp_schemas) == set(rest_schemas) == {op.name for op in OPERATIONS}


@pytest.mark.parametrize("op", OPERATIONS, ids=[op.name for op in OPERATIONS])
@FUZZ
@given(data=st.data())
def test_schema_built_calls_over_mcp_stdio_get_an_answer_or_a_clear_tool_error_and_refused_ones_write_nothing(
    stdio: StdioMentis, mcp_schemas: dict[str, dict[str, Any]], op: Operation, data: st.DataObject
) -> None:
    how, args = data.draw(documents(mcp_schemas[op.name]))
    before = stdio.ledger()
    result = stdio.call(op.name, args)
    if not result.is_error:
        SEEN["mcp", "answer"] += 1
        assert how not in MUST_REFUSE, (how, args)
        assert result.structured_content is not None
        op.output.model_validate(result.structured_content)
        return
    text = str(result.content[0].text)
    match = ERROR.match(text)
    assert match, text
    assert match.group(1) in KNOWN_CODES, text
    SEEN["mcp", match.group(1)] += 1
    if how in MUST_REFUSE:
        assert match.group(1) == "invalid_input", text
    assert len(text) < 4_000, text
    assert stdio.ledger() == before


# --------------------------------------------------------------------------- REST


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = tmp_path_factory.mktemp("fuzz-rest") / "mentis.db"
    with LiveServer(db, rate_per_second=1e6, rate_burst=1_000_000) as server:
        yield server


@pytest.fixture(scope="module")
def http(live: LiveServer) -> Iterator[httpx2.Client]:
    headers = {"Authorization": f"Bearer {live.token('admin')}"}
    with httpx2.Client(base_url=live.url, headers=headers, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def rest_schemas(http: httpx2.Client) -> dict[str, dict[str, Any]]:
    """Each operation's request body schema from /v1/openapi.json, with its components alongside
    so that the ``#/components/schemas/…`` references resolve."""
    doc = http.get("/v1/openapi.json").json()
    out = {}
    for path, item in doc["paths"].items():
        if not path.startswith("/v1/"):
            continue
        body = item["post"]["requestBody"]["content"]["application/json"]["schema"]
        name = body["$ref"].rsplit("/", 1)[-1]
        schema = json.loads(json.dumps(doc["components"]["schemas"][name]))
        schema["components"] = {"schemas": doc["components"]["schemas"]}
        out[path.removeprefix("/v1/")] = schema
    return out


@pytest.mark.parametrize("op", OPERATIONS, ids=[op.name for op in OPERATIONS])
@FUZZ
@given(data=st.data())
def test_schema_built_bodies_over_rest_get_an_answer_or_a_clear_4xx_and_refused_ones_write_nothing(
    live: LiveServer,
    http: httpx2.Client,
    rest_schemas: dict[str, dict[str, Any]],
    op: Operation,
    data: st.DataObject,
) -> None:
    how, body = data.draw(documents(rest_schemas[op.name]))
    code = post_and_check(live, http, op, body)
    SEEN["rest", code or "answer"] += 1
    if how in MUST_REFUSE:
        assert code == "invalid_input", (how, body)


def test_the_fuzz_reached_both_answers_and_refusals_on_both_transports(
    stdio: StdioMentis, live: LiveServer
) -> None:
    """Runs last: the generated calls were not all refused (nor all accepted), and valid writes
    really were written on both transports."""
    sys.stderr.write(f"input fuzz: {dict(sorted(SEEN.items()))}\n")
    for transport in ("mcp", "rest"):
        assert SEEN[transport, "answer"] > 0
        assert SEEN[transport, "invalid_input"] > 0
    assert len(stdio.ledger()) > 0
    assert len(live.ledger()) > 0
