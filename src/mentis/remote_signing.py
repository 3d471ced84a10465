"""The proxy's side of remote signing: each write becomes prepare_write → check → sign → signed_write.

The private key (``MENTIS_SIGNING_KEY``) stays in the proxy. For a write tool the proxy asks the
server for the entry the write would append (``prepare_write``: its unsigned fields and body;
nothing is written), checks that the body says what the caller asked for (every argument that
appears in the body has the value the caller gave, the body hashes to ``body_hash``, the chain is
the repository, the time is within :data:`signing.SKEW_S` of this machine's clock), signs the
statement on its own stream (:class:`signing.Signer`) and sends ``signed_write``. The server runs
the write again with the same id and time and the store verifies the signature before it writes.

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
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import anyio
import pydantic_core
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mcp_types import CallToolResult, TextContent

from mentis import signing
from mentis.errors import Forbidden, InvalidInput
from mentis.remote import Forward, Link
from mentis.signed_writes import PHASES

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
        self._lock = anyio.Lock()

    def forwarder(self, writes: set[str]) -> Forward:
        """Forward calls to the link, signing those of the ``writes`` tools."""
        signed = writes - PHASES

        async def forward(name: str, arguments: dict[str, Any]) -> CallToolResult:
            if name in signed:
                return await self.write(name, arguments)
            return await self.link.call(name, arguments)

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
                fields, body_hash = check_prepared(name, arguments, prepared.structured_content)
                signer = self._signer_for(fields.agent)
                key_id, sig = signer.sign(fields)
                request = {
                    "tool": name,
                    "arguments": arguments,
                    "id": fields.id,
                    "at": fields.at,
                    "key_id": key_id,
                    "sig": sig,
                    "body_hash": body_hash,
                }
                try:
                    done = await self.link.call("signed_write", request)
                except BaseException:
                    signer.restart()
                    raise
                if not done.is_error:
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


def check_prepared(
    name: str, arguments: dict[str, Any], prepared: dict[str, Any] | None
) -> tuple[signing.Unsigned, str]:
    """The fields to sign, after checking that the server's entry is the caller's write:
    InvalidInput (nothing is signed) when it is not."""
    if not isinstance(prepared, dict):
        raise InvalidInput("prepare_write answered without the entry's fields", field="body")
    try:
        fields = signing.Unsigned(*(str(prepared[k]) for k in signing.Unsigned._fields))
        body_text = str(prepared["body"])
    except KeyError as exc:
        raise InvalidInput(f"prepare_write's answer lacks {exc.args[0]}", field="body") from None
    if prepared.get("tool") != name:
        raise InvalidInput(f"prepare_write prepared {prepared.get('tool')!r}, not {name!r}", field="tool")
    if hashlib.sha256(body_text.encode("utf-8")).hexdigest() != fields.body_hash:
        raise InvalidInput(
            "prepare_write's body does not hash to its body_hash; not signing", field="body_hash"
        )
    body = json.loads(body_text)
    if not isinstance(body, dict):
        raise InvalidInput("prepare_write's body is not a JSON object; not signing", field="body")
    if "repository" in arguments and fields.chain != arguments["repository"]:
        raise InvalidInput(
            f"the server would write to chain {fields.chain!r}, not repository {arguments['repository']!r}; "
            "not signing",
            field="repository",
        )
    if body.get("agent_id", fields.agent) != fields.agent:
        raise InvalidInput("the body names another agent than the entry; not signing", field="agent")
    for key, value in arguments.items():
        if key in body and not same(value, body[key]):
            raise InvalidInput(
                f"{key}: the server's entry holds {_short(body[key])}, not the {_short(value)} sent; "
                "not signing content the server changed",
                field=key,
            )
    signing.check_skew(fields.at)
    return fields, fields.body_hash


def same(sent: Any, stored: Any) -> bool:
    """Whether ``stored`` (in the body) is the value ``sent``: objects compare on the keys both
    hold, a list must begin with the items sent (the server may append derived ones, such as a
    Supersedes relation to a near-duplicate), a number may be stored as its decimal text, and
    ids and times may be stored normalised (lower-case UUIDs, UTC with microseconds)."""
    if sent is None:  # the server fills in what the caller left out (a session id, say)
        return True
    if stored is None:
        return sent in ("", [], {})
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(same(v, stored[k]) for k, v in sent.items() if k in stored)
    if isinstance(sent, list):
        return (
            isinstance(stored, list)
            and len(stored) >= len(sent)
            and all(same(a, b) for a, b in zip(sent, stored, strict=False))
        )
    if isinstance(sent, bool) or isinstance(stored, bool):
        return sent is stored
    if isinstance(sent, int | float):
        try:
            return float(stored) == float(sent)
        except (TypeError, ValueError):
            return False
    if isinstance(sent, str) and isinstance(stored, str):
        return sent == stored or _same_uuid(sent, stored) or _same_time(sent, stored)
    return bool(sent == stored)


def _same_uuid(a: str, b: str) -> bool:
    try:
        return uuid.UUID(a) == uuid.UUID(b)
    except ValueError:
        return False


def _same_time(a: str, b: str) -> bool:
    try:
        x, y = datetime.fromisoformat(a), datetime.fromisoformat(b)
    except ValueError:
        return False
    return x.replace(tzinfo=x.tzinfo or UTC) == y.replace(tzinfo=y.tzinfo or UTC)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:79] + "…"
