"""Generated requests never make the server fail: hypothesis bodies for every operation get a 2xx or
a 4xx with a clear JSON error (and a refused one writes nothing), and schemathesis, driven by
/v1/openapi.json, finds no 500 and no answer outside the published schema."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mentis.errors
from mentis.service.operations import OPERATIONS, Operation

from .http_support import LiveServer

KNOWN_CODES = {getattr(mentis.errors, name).code for name in mentis.errors.__all__} | {"malformed_json"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    db = tmp_path_factory.mktemp("fuzz") / "mentis.db"
    with LiveServer(db, rate_per_second=1e6, rate_burst=1_000_000) as server:
        yield server


@pytest.fixture(scope="module")
def http(live: LiveServer) -> Iterator[httpx2.Client]:
    headers = {"Authorization": f"Bearer {live.token('admin')}"}
    with httpx2.Client(base_url=live.url, headers=headers, timeout=30) as client:
        yield client


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def bodies(op: Operation) -> st.SearchStrategy[dict[str, Any]]:
    """Objects whose keys are mostly the operation's own fields, with values of any JSON type."""
    fields = sorted(op.input.model_fields)
    keys = (st.sampled_from(fields) | st.text(max_size=10)) if fields else st.text(max_size=10)
    return st.dictionaries(keys, JSON, max_size=len(op.input.model_fields) + 2)


@pytest.mark.parametrize("op", OPERATIONS, ids=[op.name for op in OPERATIONS])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_bodies_get_an_answer_or_a_clear_4xx_and_a_refused_one_writes_nothing(
    live: LiveServer, http: httpx2.Client, op: Operation, data: st.DataObject
) -> None:
    post_and_check(live, http, op, data.draw(bodies(op)))


def post_and_check(live: LiveServer, http: httpx2.Client, op: Operation, body: Any) -> str | None:
    """POST one body: a valid answer (returns None) or a clear 4xx that wrote nothing (returns
    its error code). The input fuzz drill (tests/drills) reuses this with schema-built bodies."""
    before = live.ledger()
    raw = json.dumps(body).encode()  # ASCII: a lone surrogate travels as its escape
    answer = http.post(f"/v1/{op.name}", content=raw, headers={"Content-Type": "application/json"})
    assert answer.status_code < 500, answer.text
    if answer.status_code == 200:
        op.output.model_validate_json(answer.content)
        return None
    assert 400 <= answer.status_code < 500
    error = answer.json()["error"]
    assert error["code"] in KNOWN_CODES, error
    assert 10 < len(error["message"]) < 4_000, error
    if error["code"] == "invalid_input":
        assert error["field"] and error["field"].split(".")[0] in error["message"], error
    assert live.ledger() == before
    return str(error["code"])


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_answer_outside_the_schema(
    live: LiveServer, http: httpx2.Client, tmp_path: Path
) -> None:
    token = str(http.headers["authorization"])
    st_cli = Path(sys.executable).with_name("st")
    command = [
        str(st_cli),
        "run",
        f"{live.url}/v1/openapi.json",
        "--header",
        f"Authorization: {token}",
        "--checks",
        "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        "15",
        "--seed",
        "7",
        "--workers",
        "4",
        "--request-timeout",
        "30",
    ]
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.search(r"\b[1-9]\d* passed", done.stdout), done.stdout[-2000:]
    verified = http.post("/v1/verify_integrity", json={}).json()
    assert verified["ok"] is True
