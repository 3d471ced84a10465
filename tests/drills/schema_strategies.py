"""Hypothesis strategies for documents valid against a JSON schema (the subset our tools publish).

Written here because hypothesis-jsonschema 0.23 does not run on the Hypothesis this project uses.
Handled: local ``$ref`` (any JSON pointer into the root document, so ``#/$defs/…`` and
``#/components/schemas/…``), ``anyOf``/``oneOf``, ``allOf`` (single member), ``enum``, ``const``,
``type`` (one or a list), string ``minLength``/``maxLength``/``pattern``, number and integer
bounds, arrays (``items``, ``minItems``, ``maxItems``), objects (``properties``, ``required``,
``additionalProperties`` as a schema or false, ``propertyNames``, ``maxProperties``). An unknown
keyword fails loudly, so a new schema feature cannot silently narrow the drill. Sizes are capped
to keep examples small; the limits themselves are probed by the mutations in the drill.
"""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

PLAIN = string.ascii_letters + string.digits + " -_./:"
MAX_TEXT = 40
MAX_ITEMS = 4
MAX_PROPS = 3
IGNORED = {"title", "description", "default", "examples", "$defs", "components", "deprecated"}
KNOWN = IGNORED | {
    "$ref", "anyOf", "oneOf", "allOf", "enum", "const", "type", "minLength", "maxLength", "pattern",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "items", "minItems", "maxItems",
    "properties", "required", "additionalProperties", "propertyNames", "maxProperties", "minProperties",
}  # fmt: skip


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Documents valid against ``schema`` (its own root resolves the references)."""
    return _strategy(schema, schema)


def _resolve(root: dict[str, Any], ref: str) -> dict[str, Any]:
    assert ref.startswith("#/"), f"only local references are supported: {ref}"
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return dict(node)


def _strategy(node: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    unknown = set(node) - KNOWN
    assert not unknown, f"schema keywords the drill does not generate: {sorted(unknown)}"
    if "$ref" in node:
        return st.deferred(lambda: _strategy(_resolve(root, node["$ref"]), root))
    if "anyOf" in node or "oneOf" in node:
        return st.one_of([_strategy(sub, root) for sub in node.get("anyOf", node.get("oneOf"))])
    if "allOf" in node:
        assert len(node["allOf"]) == 1, "allOf with several members is not supported"
        return _strategy(node["allOf"][0], root)
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if kind is None and {"minLength", "maxLength", "pattern"} & set(node):
        kind = "string"  # e.g. propertyNames, whose instances are always strings
    if kind is None and not set(node) - IGNORED:
        return st.none() | st.booleans() | st.integers() | st.text(max_size=MAX_TEXT)  # any value
    if isinstance(kind, list):
        return st.one_of([_strategy({**node, "type": k}, root) for k in kind])
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        low, high = _bounds(node)
        return st.integers(
            min_value=None if low is None else int(low), max_value=None if high is None else int(high)
        )
    if kind == "number":
        low, high = _bounds(node)
        return st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)
    if kind == "string":
        if "pattern" in node:
            text = st.from_regex(node["pattern"], fullmatch=True)
            return text.filter(lambda s: node.get("minLength", 0) <= len(s) <= node.get("maxLength", 10**9))
        low = node.get("minLength", 0)
        high = max(low, min(node.get("maxLength", MAX_TEXT), MAX_TEXT))
        # any characters half the time, plain ones the other half (so model rules pass too)
        return st.text(min_size=low, max_size=high) | st.text(PLAIN, min_size=low, max_size=high)
    if kind == "array":
        low = node.get("minItems", 0)
        items = _strategy(node.get("items", {}), root) if node.get("items") else st.none()
        return st.lists(
            items, min_size=low, max_size=max(low, min(node.get("maxItems", MAX_ITEMS), MAX_ITEMS))
        )
    if kind == "object" or "properties" in node:
        return _object(node, root)
    raise AssertionError(f"schema node the drill does not generate: {node}")


def _bounds(node: dict[str, Any]) -> tuple[float | None, float | None]:
    low = node.get("minimum", node.get("exclusiveMinimum"))
    high = node.get("maximum", node.get("exclusiveMaximum"))
    if "exclusiveMinimum" in node:
        low = low + 1 if node.get("type") == "integer" else low + 1e-9
    if "exclusiveMaximum" in node:
        high = high - 1 if node.get("type") == "integer" else high - 1e-9
    return low, high


def _object(node: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    props: dict[str, Any] = node.get("properties", {})
    required = set(node.get("required", []))
    extra = node.get("additionalProperties", True)
    if props or extra is False:
        fixed = {k: _strategy(v, root) for k, v in props.items() if k in required}
        optional = {k: _strategy(v, root) for k, v in props.items() if k not in required}
        return st.fixed_dictionaries(fixed, optional=optional)
    # a map: keys from propertyNames, values from additionalProperties
    keys = _strategy(node.get("propertyNames", {"type": "string"}), root)
    values = _strategy(extra, root) if isinstance(extra, dict) else st.none()
    limit = min(node.get("maxProperties", MAX_PROPS), MAX_PROPS)
    return st.dictionaries(keys, values, max_size=limit)
