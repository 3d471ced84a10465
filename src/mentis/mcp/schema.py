"""The JSON schemas an MCP tool publishes, without what costs an agent tokens and tells it nothing.

Pydantic's schema of a model carries a ``title`` on every object and field (the class or field name
again), ``"default": null`` on every optional field, optional fields as ``anyOf: [{type: T},
{type: null}]``, and every nested model as a ``$defs`` entry. :func:`lean` drops the titles and the
null defaults and inlines a definition used once. An optional input field loses its null branch
(leaving it out is the same call, and one ``type`` maps onto every client's dialect); a nullable
output field is written ``type: [T, "null"]``. An output schema also loses its descriptions,
defaults and ``additionalProperties: false``: it is the contract a client validates structured
content against, a default or a sentence there validates nothing (docs/tools.md documents the
fields), and a client that validates against it keeps working when a field is added. Every input
constraint — limits, patterns, enums, required fields, ``additionalProperties: false`` at every
level — is kept.
"""

from __future__ import annotations

from typing import Any

_MAPS = ("properties", "$defs", "patternProperties")
"""Keywords whose value maps names to schemas (a property called "title" is not a title)."""
_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_ONE = ("items", "additionalProperties", "not", "propertyNames")


def lean(schema: dict[str, Any], *, output: bool = False) -> dict[str, Any]:
    """``schema`` without titles and null defaults, its ``$defs`` used once inlined, and for an
    ``output`` schema without descriptions, defaults and ``additionalProperties: false``."""
    return _strip(_inline(schema), output)


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``$ref`` to a definition used once replaced by the definition (a
    reference costs its name twice; a definition used more than once stays shared)."""
    defs: dict[str, Any] = schema.get("$defs", {})
    uses: dict[str, int] = {}
    _count_refs(schema, uses)
    once = {name for name in defs if uses.get(_REF + name) == 1 and not _refers(defs[name], _REF + name)}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.removeprefix(_REF) in once and len(node) == 1:
                return walk(defs[ref.removeprefix(_REF)])
            return {k: walk(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    kept = {name: walk(d) for name, d in defs.items() if name not in once}
    body = walk(schema)
    return {**body, "$defs": kept} if kept else body


_REF = "#/$defs/"


def _count_refs(node: Any, uses: dict[str, int]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            uses[ref] = uses.get(ref, 0) + 1
        for value in node.values():
            _count_refs(value, uses)
    elif isinstance(node, list):
        for value in node:
            _count_refs(value, uses)


def _refers(node: Any, ref: str) -> bool:
    found: dict[str, int] = {}
    _count_refs(node, found)
    return ref in found


def _strip(schema: dict[str, Any], output: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" or (key == "default" and (value is None or output)):
            continue
        if output and (key == "description" or (key == "additionalProperties" and value is False)):
            continue
        if key in _MAPS and isinstance(value, dict):
            out[key] = {name: _strip(sub, output) for name, sub in value.items()}
        elif key in _LISTS and isinstance(value, list):
            out[key] = [_strip(sub, output) for sub in value]
        elif key in _ONE and isinstance(value, dict):
            out[key] = _strip(value, output)
        else:
            out[key] = value
    enum = out.get("enum")
    if out.get("type") == "string" and isinstance(enum, list) and all(isinstance(v, str) for v in enum):
        del out["type"]  # an enum of strings says the type already
    if not output and "default" in schema and schema["default"] is None:
        return _optional(out)
    return _nullable(out)


def _optional(node: dict[str, Any]) -> dict[str, Any]:
    """An input field that defaults to null, without its null branch: leaving it out is the same
    call, and a single ``type`` maps onto every client's dialect (Gemini's function declarations
    take no type array; the server still accepts null)."""
    options = node.get("anyOf")
    if not isinstance(options, list) or {"type": "null"} not in options:
        return node
    rest = [o for o in options if o != {"type": "null"}]
    base = {k: v for k, v in node.items() if k != "anyOf"}
    if len(rest) == 1 and not any(k in base for k in rest[0]):
        return {**base, **rest[0]}
    return {**base, "anyOf": rest}


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """An output field that may be null: ``anyOf: [{type: T, …}, {type: null}]`` → ``{type: [T,
    null], …}`` when T is one plain type (an enum or const would have to list null too, so those
    stay as they are)."""
    options = node.get("anyOf")
    if not isinstance(options, list) or {"type": "null"} not in options:
        return node
    if all(isinstance(o, dict) and set(o) == {"type"} and isinstance(o["type"], str) for o in options):
        return {**{k: v for k, v in node.items() if k != "anyOf"}, "type": [o["type"] for o in options]}
    if len(options) != 2:
        return node
    (other,) = [o for o in options if o != {"type": "null"}]
    kind = other.get("type")
    if not isinstance(kind, str) or "enum" in other or "const" in other or any(k in node for k in other):
        return node
    merged = {k: v for k, v in node.items() if k != "anyOf"}
    return {**merged, **other, "type": [kind, "null"]}
