"""The dashboard's thought pages show a thought's provenance (issue 27): what it is about (its
entity type) and where it came from (its source episode), and the list filters by both."""

from __future__ import annotations

import html
from urllib.parse import urlencode

from starlette.testclient import TestClient

from mentis.api.common import parse
from mentis.api.entity_types import UpsertEntityTypeInput
from mentis.api.thoughts import AppendThoughtInput
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore
from tests.dashboard.conftest import login, make_token
from tests.dashboard.seed import SHOP

WRITER = Caller(agent_id="seed-agent")
EPISODE = {"transcript": "/sessions/s-7.jsonl", "session_id": "s-7", "from_line": 3, "to_line": 11}


def test_the_thought_page_and_list_show_and_filter_by_entity_type_and_source(
    client: TestClient, tokens: TokenStore, memory: Memory
) -> None:
    memory.upsert_entity_type(
        WRITER, parse(UpsertEntityTypeInput, {"name": "queue", "description": "a queue"})
    )
    about = {"repository": SHOP, "type": "Finding", "entity_type": "queue", "source_episode": EPISODE}
    kept = memory.append_thought(
        WRITER, parse(AppendThoughtInput, {**about, "content": "consumer lag at night"})
    )
    plain = {"repository": SHOP, "type": "Finding", "content": "an unrelated finding"}
    memory.append_thought(WRITER, parse(AppendThoughtInput, plain))
    login(client, make_token(tokens, "read", (SHOP,)))
    page = html.unescape(client.get(f"/dashboard/thought?{urlencode({'id': kept.thought_id})}").text)
    assert "<dt>About</dt>" in page and ">queue</a>" in page
    assert "/sessions/s-7.jsonl</span> · lines 3–11 · session" in page
    listed = html.unescape(client.get("/dashboard/thoughts?entity_type=queue").text)
    assert "consumer lag at night" in listed and "about queue" in listed
    assert "an unrelated finding" not in listed
    by_session = html.unescape(client.get("/dashboard/thoughts?source_session=s-7").text)
    assert "consumer lag at night" in by_session and "an unrelated finding" not in by_session
