"""The proxy's side of remote signing: each write becomes prepare_write → check → sign → signed_write.

The private key (``MENTIS_SIGNING_KEY``) stays in the proxy. Which tools write, and what the entry
of each write must hold, is the proxy's own table (:mod:`mentis.mcp.remote_writes`), never what the
server says about its tools: reads go through unsigned, writes are signed, and a tool the table
does not know is neither published nor forwarded. For a write the proxy asks the server for the
entry it would append (``prepare_write``: its unsigned fields and body; nothing is written) and
:func:`check` compares it with the harness's call: the kind, the chain, the id, the time, and every
body field, exactly, besides only the fields the table lets the server fill in, each of its form.
Then it signs the statement on its own stream (:class:`signing.Signer`) and sends
``signed_write``; the server runs the write again with the same id and time, and the store verifies
the signature before it writes.

The agent signed for is the one the server attributes the write to: the token's agent, which
``prepare_write`` reports as ``agent``. ``MENTIS_AGENT_ID``, when set, names the agent this key
belongs to, and a write the server would attribute to another agent is refused before signing.

Signed writes go one at a time (a lock), so the stream's statements reach the server in order.
When the server reports that the content changed between the phases (a Conflict: a concurrent
write changed what the new entry re-asserts, say), the write is prepared again once. After any
failed or unknown-outcome signed write the signer starts a new stream (:meth:`Signer.restart`),
so a stream never has a gap.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Container, Iterator
from typing import Any

import anyio
import pydantic_core
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mcp_types import CallToolResult, TextContent, Tool, ToolAnnotations

from mentis.api.common import parse
from mentis.errors import Forbidden, InvalidInput, StatementRefused
from mentis.ledger import signing
from mentis.ledger.canonical import canonical
from mentis.mcp.remote_link import Forward, Link
from mentis.mcp.remote_writes import PASSED, WRITES, Shape, is_uuid, known, unsignable
from mentis.version import __version__

log = logging.getLogger(__name__)

_PHASE_PREFIX = re.compile(r"^Error executing tool (prepare_write|signed_write): ")
_ERROR_CODE = re.compile(r"^Error executing tool [^:]*: \[([a-z_]+)\] ")


def error_code(result: CallToolResult) -> str | None:
    """The Mentis error code of a tool error (``[conflict]`` …), None when it carries none."""
    if not result.is_error or not result.content or not isinstance(result.content[0], TextContent):
        return None
    m = _ERROR_CODE.match(result.content[0].text)
    return m.group(1) if m else None


class RemoteSigner:
    """Signs the proxy's writes with one key, on one stream at a time."""

    def __init__(self, link: Link, key: Ed25519PrivateKey, agent_id: str | None) -> None:
        self.link = link
        self.key = key
        self.agent_id = agent_id
        self.signer: signing.Signer | None = None
        self.signed: set[str] = set()
        """The ids of the entries this proxy signed that were (or may have been) written."""
        self._lock = anyio.Lock()

    def tools(self, published: list[Tool]) -> list[Tool]:
        """The remote's tools this proxy serves while signing: those its table knows, each marked
        read-only or not by the table (whatever the server's annotations say)."""
        unknown = [t.name for t in published if not known(t.name)]
        if unknown:
            log.warning(
                "not serving %s: this proxy (mentis %s) does not know whether they write",
                ", ".join(unknown),
                __version__,
            )
        out = []
        for tool in published:
            if known(tool.name):
                marks = tool.annotations or ToolAnnotations()
                read_only = marks.model_copy(update={"read_only_hint": tool.name in PASSED})
                out.append(tool.model_copy(update={"annotations": read_only}))
        return out

    def forwarder(self) -> Forward:
        """Forward calls to the link: reads as they are, writes signed, anything else refused."""

        async def forward(name: str, arguments: dict[str, Any]) -> CallToolResult:
            if name in PASSED:
                return await self.link.call(name, arguments)
            if not known(name):
                raise Forbidden(
                    f"{name} is not a tool this proxy (mentis {__version__}) knows, so it cannot tell "
                    "whether it writes and does not forward it while signing; upgrade mentis here"
                )
            refusal = unsignable(name, arguments)
            if refusal is not None:
                raise InvalidInput(refusal, field="tool")
            return await self.write(name, arguments)

        return forward

    def _signer_for(self, agent: str) -> signing.Signer:
        if self.agent_id is not None and agent != self.agent_id:
            raise Forbidden(
                f"the server attributes this write to agent {agent!r} (the token's agent), but "
                f"MENTIS_AGENT_ID says this key signs for {self.agent_id!r}; use that agent's token"
            )
        if self.signer is None:
            self.signer = signing.Signer(self.key, agent)
        elif self.signer.agent != agent:
            raise Forbidden(f"this proxy signs for agent {self.signer.agent!r}, not {agent!r}")
        return self.signer

    async def write(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        async with self._lock:
            for attempt in (1, 2):
                prepared = await self.link.call("prepare_write", {"tool": name, "arguments": arguments})
                if prepared.is_error:
                    return as_tool(prepared, name)
                fields = check(name, arguments, prepared.structured_content, self.signed)
                signer = self._signer_for(fields.agent)
                key_id, sig = signer.sign(fields)
                request = {
                    "tool": name,
                    "arguments": arguments,
                    "id": fields.id,
                    "at": fields.at,
                    "key_id": key_id,
                    "sig": sig,
                    "body_hash": fields.body_hash,
                }
                try:
                    done = await self.link.call("signed_write", request)
                except BaseException:
                    self.signed.add(fields.id)  # its outcome is unknown
                    signer.restart()
                    raise
                if not done.is_error:
                    self.signed.add(fields.id)
                    return unwrap(done)
                signer.restart()
                if attempt == 1 and error_code(done) == "conflict":
                    continue
                return as_tool(done, name)
        raise AssertionError("unreachable")  # pragma: no cover


def as_tool(result: CallToolResult, name: str) -> CallToolResult:
    """A phase's tool error as the tool's own: ``Error executing tool <name>: [code] …``, the
    form a direct call of ``name`` gives."""
    first = result.content[0] if result.content else None
    if not result.is_error or not isinstance(first, TextContent) or not _PHASE_PREFIX.match(first.text):
        return result
    text = _PHASE_PREFIX.sub(f"Error executing tool {name}: ", first.text, count=1)
    return result.model_copy(update={"content": [TextContent(type="text", text=text), *result.content[1:]]})


def unwrap(done: CallToolResult) -> CallToolResult:
    """The tool's own result out of signed_write's, in the form a direct call gives it."""
    content = done.structured_content
    if not isinstance(content, dict) or not isinstance(content.get("result"), dict):
        raise InvalidInput("signed_write answered without the tool's result", field="result")
    result: dict[str, Any] = content["result"]
    text = pydantic_core.to_json(result, indent=2).decode()
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=result)


# ---------------------------------------------------------------- the check


def check(
    name: str, arguments: dict[str, Any], prepared: Any, signed: Container[str] = ()
) -> signing.Unsigned:
    """The fields to sign, once ``prepared`` (prepare_write's answer) is shown to be the entry of
    the call ``name(arguments)`` and nothing else; ``signed`` holds the ids this proxy signed before.
    StatementRefused (nothing is signed) when it is not; InvalidInput when the call is not one this
    proxy can read."""
    write = WRITES[name]
    req = parse(write.input, arguments)
    fields, body = _entry(prepared)
    if prepared.get("tool") != name:
        raise StatementRefused(f"it prepared {_short(prepared.get('tool'))}, not {name}", "tool")
    if fields.kind != write.kind:
        raise StatementRefused(f"its kind is {fields.kind!r}, and {name} appends {write.kind!r}", "kind")
    if fields.chain != write.chain(req):
        raise StatementRefused(f"it would write to chain {fields.chain!r}, not {write.chain(req)!r}", "chain")
    try:
        signing.check_skew(fields.at)
    except InvalidInput:
        raise StatementRefused(
            f"its time {_short(fields.at)} is not a UTC time within {signing.SKEW_S} s of this clock", "at"
        ) from None
    shape = write.shape(req, fields)
    _check_id(fields.id, shape, req.model_dump(mode="json"), body, signed)
    _check_body(name, shape, body)
    return fields


def _entry(prepared: Any) -> tuple[signing.Unsigned, dict[str, Any]]:
    """The entry's unsigned fields and its body, which must hash to its body_hash and be the
    canonical JSON of one object (so no other reader finds other fields in it: a repeated key)."""
    if not isinstance(prepared, dict):
        raise StatementRefused("prepare_write answered without the entry's fields", "body")
    missing = [k for k in (*signing.Unsigned._fields, "body") if not isinstance(prepared.get(k), str)]
    if missing:
        raise StatementRefused(f"its answer lacks {', '.join(missing)} (or they are not text)", missing[0])
    fields = signing.Unsigned(*(prepared[k] for k in signing.Unsigned._fields))
    text: str = prepared["body"]
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != fields.body_hash:
        raise StatementRefused("its body does not hash to its body_hash", "body_hash")
    try:
        body = json.loads(text)
        exact = canonical(body) == text.encode("utf-8")
    except (ValueError, TypeError):
        exact = False
    if not exact or not isinstance(body, dict):
        raise StatementRefused("its body is not one object in canonical JSON", "body")
    return fields, body


def _check_body(name: str, shape: Shape, body: dict[str, Any]) -> None:
    extra = sorted(set(body) - set(shape.exact) - set(shape.server))
    if extra:
        raise StatementRefused(f"its body holds {', '.join(extra)}, which the call does not give", extra[0])
    for key, value in shape.exact.items():
        if key not in body:
            raise StatementRefused(f"its body lacks {key}", key)
        if canonical(body[key]) != canonical(value):
            raise StatementRefused(
                f"{key} holds {_short(body[key])}, not the {_short(value)} of the call", key
            )
    for key, rule in shape.server.items():
        if key not in body:
            if rule.required:
                raise StatementRefused(f"its body lacks {key} ({rule.what})", key)
        elif not rule.form(body[key]):
            raise StatementRefused(f"{key} holds {_short(body[key])}, which is not {rule.what}", key)
    broken = None if shape.whole is None else shape.whole(body)
    if broken is not None:
        raise StatementRefused(broken, "body")


def _check_id(
    id_: str, shape: Shape, call: dict[str, Any], body: dict[str, Any], signed: Container[str]
) -> None:
    """The entry's id: a canonical UUID; the call's own when it chose one; else none the call names
    or the body names elsewhere; never one this proxy signed before."""
    if not is_uuid(id_):
        raise StatementRefused(f"its id {_short(id_)} is not a UUID in canonical form", "id")
    if shape.call_id is not None and id_ != shape.call_id:
        raise StatementRefused(f"its id is {id_}, not the {shape.call_id} the call chose", "id")
    if id_ in signed:
        raise StatementRefused(f"its id {id_} is one this proxy signed before", "id")
    named = set(_strings(call)) - {shape.call_id}
    named |= set(_strings({k: v for k, v in body.items() if k != shape.record_id}))
    if id_ in named:
        raise StatementRefused(f"its id {id_} is the id of a record the write names", "id")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:79] + "…"
