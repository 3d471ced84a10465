"""The minimal-edit JSONC editor: parsing with positions, edits that keep every other byte."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mentis.errors import ConfigError
from mentis.integrations.harnesses.jsonc import Document, loads

ENTRY = {"command": "/opt/mentis/bin/mentis", "args": ["serve"], "env": {"MENTIS_AGENT_ID": "x"}}


def test_comments_trailing_commas_and_escapes_parse_like_json() -> None:
    text = '// head\n{"a": [1, 2.5e3, -0,], /* b */ "b": {"c": "q\\"\\u00e9/*x*/"}, "d": null, "e": true,}\n'
    assert loads(text) == {"a": [1, 2500.0, 0], "b": {"c": 'q"é/*x*/'}, "d": None, "e": True}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1,, "b": 2}', "line 1 column 9: expected a quoted key"),
        ('{\n"a": [1 2]}', "line 2 column 9: expected ',' or ']'"),
        ('{"a": "x\n"}', "line 1 column 7: unterminated string"),
        ("{'a': 1}", "line 1 column 2: expected a quoted key"),
        ('{"a": 1} // ok\n{}', "line 2 column 1: unexpected text"),
        ("", "holds no JSON value"),
        ('{"a": "\\x"}', "line 1 column 7: bad string"),
    ],
)
def test_malformed_text_is_reported_with_line_and_column(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        loads(text, "/etc/x.json")
    assert str(caught.value).startswith("/etc/x.json: ")
    assert message in str(caught.value)


def test_setting_an_equal_value_changes_nothing_and_a_new_value_replaces_only_it() -> None:
    text = '{\n  "mcpServers": {\n    "mentis": {"command": "old"}, // keep me\n    "z": 1\n  }\n}\n'
    doc = Document(text)
    assert doc.set(("mcpServers",), "mentis", {"command": "old"}) is False
    assert doc.text == text
    assert doc.set(("mcpServers",), "mentis", {"command": "new"}) is True
    assert doc.text == text.replace('{"command": "old"}', '{\n      "command": "new"\n    }')


def test_remove_keeps_comments_that_sit_around_the_entry() -> None:
    text = '{\n  "a": 1, // about a\n  "b": 2\n}\n'
    doc = Document(text)
    doc.remove(("b",))
    assert doc.text == '{\n  "a": 1 // about a\n}\n'
    first = Document('{\n  "a": 1,\n  /* b follows */\n  "b": 2\n}\n')
    first.remove(("a",))
    assert first.text == '{\n  /* b follows */\n  "b": 2\n}\n'


def test_a_comment_only_container_is_kept_when_pruning() -> None:
    text = '{\n  "mcpServers": {\n    // add servers here\n  }\n}\n'
    doc = Document(text)
    doc.set(("mcpServers",), "mentis", ENTRY)
    doc.remove(("mcpServers", "mentis"), prune=1)
    assert doc.text == text


json_scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.text(max_size=6).filter(lambda k: k != "mcpServers"), json_values, max_size=4),
    st.dictionaries(st.text(max_size=6).filter(lambda k: k != "mentis"), json_values, max_size=3),
    st.sampled_from([None, 1, 2, 4, "\t"]),
    st.booleans(),
)
def test_insert_then_remove_gives_back_the_original_bytes(
    other: dict[str, Any], servers: dict[str, Any], indent: int | str | None, with_servers: bool
) -> None:
    servers = servers if with_servers else {}
    data = {**other, **({"mcpServers": servers} if with_servers else {})}
    text = json.dumps(data, indent=indent, ensure_ascii=False) + "\n"
    doc = Document(text)
    doc.set(("mcpServers",), "mentis", ENTRY)
    installed = doc.text
    assert json.loads(installed) == {**data, "mcpServers": {**servers, "mentis": ENTRY}}
    again = Document(installed)
    assert again.set(("mcpServers",), "mentis", ENTRY) is False
    again.remove(("mcpServers", "mentis"), prune=1)
    expected = text if (servers or not with_servers) else None
    if expected is None:  # an empty "mcpServers": {} is pruned with the entry
        expected = json.dumps(other, indent=indent, ensure_ascii=False) + "\n"
        assert json.loads(again.text) == json.loads(expected)
    else:
        assert again.text == expected


def test_a_byte_order_mark_is_kept() -> None:
    text = '\ufeff{\n  "a": 1\n}\n'
    doc = Document(text)
    doc.set(("mcpServers",), "mentis", ENTRY)
    assert doc.text.startswith('\ufeff{\n  "a": 1,\n  "mcpServers": {')
    doc.remove(("mcpServers", "mentis"), prune=1)
    assert doc.text == text
