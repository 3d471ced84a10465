"""What the signing proxy signs: its own table of Mentis's tools and of the entry each write makes.

``mentis serve --remote`` with a key (:mod:`mentis.mcp.remote_signing`) asks the server to prepare each
write (``prepare_write``) and signs the statement it gets back only when it is the harness's own
call as this table derives it, from the call alone; nothing the server says about its tools
(annotations, descriptions) counts:

- :data:`READS` write nothing and are forwarded as they are; so are the two phases themselves
  (:data:`signed_writes.PHASES`), which carry a signature the harness made, and the webhook
  configuration writes (:data:`signed_writes.CONFIGURATION`), which append no ledger entry.
- :data:`WRITES` are signed. Each names the entry kind it appends, its chain, and how every field
  of its body is derived from the call (parsed with the tool's published input model, as the
  server parses it) and from the entry's own id, time and agent.
- :data:`UNSIGNABLE` writes are refused before anything is sent (one signature covers one entry).
- Any other tool (a newer server's, or a hostile one's) is neither published nor forwarded: the
  proxy cannot tell whether it writes, and forwarding a write unsigned would let a server strip
  the agent's signatures from its writes.

:func:`remote_signing.check` applies a write's :class:`Shape` as an allow-list: the body must hold
exactly the derived fields with exactly the derived values, and besides them only the fields the
table names as the server's to fill in (the ledger positions a forget erases, the rejected
conclusions a write re-asserts, near-duplicate ``Supersedes`` links, a skill's version and base),
each of the form it must have. The entry's kind and chain are the tool's; its id is a canonical
UUID that is the body's record id, or else a fresh one (none of the call's ids, none this proxy
signed before); its time is the body's time and within :data:`signing.SKEW_S` of this machine's
clock; its agent is the body's. Anything else: :class:`StatementRefused`, and nothing is signed.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from mentis.api.agents import AddAgentKeyInput, DisableAgentInput, RegisterAgentInput, RevokeAgentKeyInput
from mentis.api.attempts import ForgetInput, MarkOutdatedInput, RecordAttemptInput
from mentis.api.common import parse
from mentis.api.entity_types import UpsertEntityTypeInput
from mentis.api.scopes import PublishInput
from mentis.api.skill_text import content_hash, parse_skill
from mentis.api.skills import DeleteSkillInput, RevokeSkillInput, SkillStatusInput, UploadSkillInput
from mentis.api.thoughts import AppendThoughtInput, ForgetThoughtInput
from mentis.errors import InvalidInput, SkillTextError
from mentis.ledger import signing
from mentis.ledger.canonical import canonical
from mentis.ledger.links import ENTITY_TYPES_CHAIN
from mentis.service.signed_writes import CONFIGURATION, PHASES

READS = frozenset(
    {
        *("search", "recall", "verify_integrity", "stats", "search_thoughts", "get_thought"),
        *("traverse_thoughts", "context_bundle", "recent_context", "export_memory_md"),
        *("read_skill", "search_skills", "list_skills", "skill_versions", "list_agents", "show_agent"),
        *("list_proposals", "show_proposal", "federated_search"),
        *("list_webhooks", "webhook_deliveries", "list_entity_types", "list_branches"),
    }
)
"""Tools that write nothing: forwarded unsigned."""

UNSIGNABLE = {
    "import_memory_md": (
        "import_memory_md appends one ledger entry per thought, and one signature covers one entry; "
        "send the thoughts one at a time (append_thought) instead"
    ),
    "accept_proposal": (
        "accept_proposal records what the server's review queue holds, which this proxy cannot "
        "derive from the call; record the attempt with record_attempt (signed) and reject the proposal"
    ),
    "append_retrospective": (
        "append_retrospective links the task's attempts the server finds, which this proxy cannot "
        "derive from the call; send the summary as append_thought (role Retrospective, signed) instead"
    ),
    "reject_proposal": (
        "reject_proposal is refused while signing, like accepting: decide proposals with the CLI on the "
        "store, or through a server that signs them itself"
    ),
    "branch_from": (
        "branch_from appends two ledger entries (the fork in the branch's chain and its note in the "
        "parent's), and one signature covers one entry; create branches with `mentis branch from` on "
        "the store"
    ),
    "merge_branch": (
        "merge_branch writes the conflicts the server finds, which this proxy cannot derive from the call; "
        "merge with `mentis branch merge` on the store"
    ),
}
"""Writes the proxy refuses to sign, and why."""


# ---------------------------------------------------------------- forms of server-derived fields

Form = Callable[[Any], bool]

_DECIMAL_UNIT = re.compile(r"^(0\.[0-9]{4}|1\.0000)$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MAX_ID = 256
_REASSERT_KEYS = frozenset({"rejected_id", "rejected_kind", "by_id", "at", "similarity", "match"})


def is_uuid(value: Any) -> bool:
    """A UUID in its canonical text (lower case, hyphenated): what the server's ``Seal.record_id`` gives."""
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value
    except ValueError:
        return False


def _is_id(value: Any) -> bool:
    """The id of an existing record: a non-empty identifier without surrounding space or controls."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= _MAX_ID
        and value == value.strip()
        and not any(ord(ch) < 32 for ch in value)
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_hex64(value: Any) -> bool:
    return isinstance(value, str) and _HEX64.match(value) is not None


def _is_time(value: Any) -> bool:
    try:
        return isinstance(value, str) and signing.parse_at(value) is not None
    except InvalidInput:
        return False


def _seqs(exactly: int | None = None) -> Form:
    """Ledger positions a forget erases: distinct non-negative integers, at least one."""

    def form(value: Any) -> bool:
        return (
            isinstance(value, list)
            and len(value) >= 1
            and (exactly is None or len(value) == exactly)
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)
            and len(set(value)) == len(value)
        )

    return form


def _is_reasserts(value: Any) -> bool:
    """Rejected conclusions a write re-asserts, as ``thoughts.stored_reasserts`` keeps them."""
    return (
        isinstance(value, list)
        and 1 <= len(value) <= 1_000
        and all(
            isinstance(r, dict)
            and set(r) == _REASSERT_KEYS
            and _is_id(r["rejected_id"])
            and r["rejected_kind"] in ("attempt", "thought")
            and _is_id(r["by_id"])
            and _is_time(r["at"])
            and isinstance(r["similarity"], str)
            and _DECIMAL_UNIT.match(r["similarity"]) is not None
            and r["match"] in ("exact", "similar")
            for r in value
        )
    )


@dataclass(frozen=True)
class Server:
    """A body field the server fills in: what it is (for the message), its form, whether it must be there."""

    what: str
    form: Form
    required: bool = False


REASSERTS = Server("the rejected conclusions it re-asserts", _is_reasserts)


# ---------------------------------------------------------------- the table


@dataclass(frozen=True)
class Shape:
    """The body one call must produce."""

    exact: dict[str, Any]
    """Fields the body holds with exactly these values (a value of None is written as null)."""
    server: dict[str, Server] = field(default_factory=dict)
    """Fields the body may (or, if required, must) hold besides, each of its form."""
    record_id: str | None = None
    """The body field that holds the entry's id (an attempt's attempt_id…); None: the entry's id is
    a fresh one that the body does not hold."""
    call_id: str | None = None
    """The id the call itself chose for the record (append_thought's thought_id), if any."""
    whole: Callable[[dict[str, Any]], str | None] | None = None
    """A rule across fields: the message when the body breaks it."""


@dataclass(frozen=True)
class Write:
    """A write tool: its input model, the entry kind it appends, its body, its chain."""

    input: type[BaseModel]
    kind: str
    shape: Callable[[Any, signing.Unsigned], Shape]
    chain: Callable[[Any], str] = lambda req: str(req.repository)
    """The chain it appends to: the call's repository, unless said otherwise."""
    unsignable: Callable[[Any], str | None] = lambda _: None
    """Why this call cannot be signed (its body is not derivable from it), or None."""


def _call(req: BaseModel, *leave_out: str, **more: Any) -> dict[str, Any]:
    """The body fields a call gives under its own names: every argument that is not None (absent
    from the body when None), but ``leave_out``, with ``more`` added."""
    given = req.model_dump(mode="json", exclude_none=True, exclude=set(leave_out))
    return {**given, **more}


def _branch_chain(req: RecordAttemptInput | AppendThoughtInput) -> str:
    """The chain a write naming a branch appends to (docs/branches.md): ``repository:branch``."""
    return req.repository if req.branch is None else f"{req.repository}:{req.branch}"


def _attempt(req: RecordAttemptInput, e: signing.Unsigned) -> Shape:
    exact = _call(
        req, "branch", repository=_branch_chain(req), attempt_id=e.id, agent_id=e.agent, created_at=e.at
    )
    return Shape(exact, {"reasserts": REASSERTS}, record_id="attempt_id")


def _correction(req: MarkOutdatedInput, e: signing.Unsigned) -> Shape:
    return Shape(_call(req, at=e.at, agent_id=e.agent))


def _thought(req: AppendThoughtInput, e: signing.Unsigned) -> Shape:
    exact = _call(
        req,
        "relations",
        "branch",
        repository=_branch_chain(req),
        thought_id=e.id,
        agent_id=e.agent,
        created_at=e.at,
    )
    given = _call(req)["relations"]
    taken = {e.id, *req.refs, *(r.target_id for r in req.relations)}

    def relations(value: Any) -> bool:
        """The call's relations, in order, then Supersedes links to near-duplicates the server found
        (each to another thought, once, none the call already names)."""
        if not isinstance(value, list) or canonical(value[: len(given)]) != canonical(given):
            return False
        added = value[len(given) :]
        links = [r for r in added if isinstance(r, dict) and set(r) == {"kind", "target_id"}]
        targets = [r["target_id"] for r in links if r["kind"] == "Supersedes"]
        return (
            len(targets) == len(added)
            and len(set(targets)) == len(targets)
            and all(_is_id(t) and t not in taken for t in targets)
        )

    server = {
        "relations": Server(
            "the call's relations, then Supersedes links to near-duplicates", relations, True
        ),
        "reasserts": REASSERTS,
    }
    return Shape(exact, server, record_id="thought_id", call_id=req.thought_id)


def _publish(req: PublishInput, e: signing.Unsigned) -> Shape:
    return Shape(_call(req, at=e.at, agent_id=e.agent))


def _tombstone(
    req: ForgetInput | ForgetThoughtInput | DeleteSkillInput, e: signing.Unsigned
) -> dict[str, Any]:
    """A forget's who, when and why (its reason is written as null when none was given)."""
    return _call(req, agent_id=e.agent, at=e.at, reason=req.reason)


def _forget_attempt(req: ForgetInput, e: signing.Unsigned) -> Shape:
    server = {
        "erased": Server("the ledger positions it erases", _seqs(), True),
        "task_id": Server("the attempt's task", _is_id, True),
    }
    return Shape(_tombstone(req, e), server)


def _forget_thought(req: ForgetThoughtInput, e: signing.Unsigned) -> Shape:
    return Shape(_tombstone(req, e), {"erased": Server("its one ledger position", _seqs(exactly=1), True)})


def _skill_version(req: UploadSkillInput, e: signing.Unsigned) -> Shape:
    assert req.content is not None  # a diff is unsignable (Write.unsignable)
    try:
        doc = parse_skill(req.content)
    except SkillTextError as exc:
        raise InvalidInput(f"{exc.field}: {exc}", field=exc.field) from None
    exact = _call(
        req,
        "content",
        "base_version",
        skill_id=req.skill_id or doc.name,
        version_id=e.id,
        content_hash=content_hash(req.content),
        agent_id=e.agent,
        created_at=e.at,
        **{k: getattr(doc, k) for k in ("name", "description", "format", "tags", "triggers", "warnings")},
    )
    server = {
        "version": Server("a version number", _is_count, True),
        "content": Server("the text sent", lambda v: v == req.content),
        "diff": Server("a diff against the version before", lambda v: isinstance(v, str) and len(v) > 0),
        "base_id": Server("the id of the version before", _is_id),
    }

    def first_whole_then_diffs(body: dict[str, Any]) -> str | None:
        if body.get("version") == 1:
            if "content" not in body or "diff" in body or "base_id" in body:
                return "version 1 of a skill holds its whole text and no diff"
        elif "content" in body or "diff" not in body or "base_id" not in body:
            return "a skill's later version holds a diff and its base, not the whole text"
        return None

    return Shape(exact, server, record_id="version_id", whole=first_whole_then_diffs)


def _no_diff(req: UploadSkillInput) -> str | None:
    if req.diff is None:
        return None
    return (
        "diff: the signing proxy signs only what it can check, and the text a diff makes is the "
        "server's; send the whole new text as content instead (read_skill gives the newest version)"
    )


def _skill_status(op: str) -> Callable[[Any, signing.Unsigned], Shape]:
    def is_hashes(value: Any) -> bool:
        if op != "revoke":
            return isinstance(value, list) and not value
        return isinstance(value, list) and len(value) >= 1 and all(_is_hex64(h) for h in value)

    def shape(req: SkillStatusInput | RevokeSkillInput, e: signing.Unsigned) -> Shape:
        server = {
            "version_id": Server("the id of the newest version", _is_id, True),
            "version": Server("the newest version number", _is_count, True),
            "content_hashes": Server(
                "the content hash of every version" if op == "revoke" else "empty", is_hashes, True
            ),
        }
        if op == "revoke":  # the revocation's key: each version's instructions, hashed (issue 24 #10)
            server["instructions_hashes"] = Server("the hash of every version's instructions", is_hashes)
        return Shape(_call(req, op=op, agent_id=e.agent, at=e.at, reason=req.reason), server)

    return shape


def _delete_skill(req: DeleteSkillInput, e: signing.Unsigned) -> Shape:
    server = {
        "erased": Server("the ledger positions it erases", _seqs(), True),
        "version_id": Server("the id of the newest version", _is_id, True),
        "version": Server("the newest version number", _is_count, True),
    }
    return Shape(_tombstone(req, e), server)


def _agent_event(op: str, **derived: Callable[[Any], Any]) -> Callable[[Any, signing.Unsigned], Shape]:
    """A registry event: the call's fields, ``derived`` ones computed from it, who and when."""

    def shape(req: Any, e: signing.Unsigned) -> Shape:
        return Shape(_call(req, op=op, at=e.at, by=e.agent, **{k: f(req) for k, f in derived.items()}))

    return shape


def _public(req: AddAgentKeyInput) -> str:
    return signing.public_text(signing.parse_public(req.public_key))


def _key_id(req: AddAgentKeyInput) -> str:
    return signing.key_id_of(signing.parse_public(req.public_key))


def _registry(_: Any) -> str:
    return signing.AGENTS_CHAIN


def _entity_type(req: UpsertEntityTypeInput, e: signing.Unsigned) -> Shape:
    """An upsert of the entity-type registry: the call's name and description, who and when."""
    return Shape(_call(req, by=e.agent, at=e.at))


def _entity_types(_: Any) -> str:
    return ENTITY_TYPES_CHAIN


WRITES: dict[str, Write] = {
    "record_attempt": Write(RecordAttemptInput, "attempt", _attempt, chain=_branch_chain),
    "mark_conclusion_outdated": Write(MarkOutdatedInput, "correction", _correction),
    "publish": Write(PublishInput, "visibility", _publish),
    "forget_attempt": Write(ForgetInput, "forget", _forget_attempt),
    "append_thought": Write(AppendThoughtInput, "thought", _thought, chain=_branch_chain),
    "forget_thought": Write(ForgetThoughtInput, "forget", _forget_thought),
    "upload_skill": Write(UploadSkillInput, "skill", _skill_version, unsignable=_no_diff),
    "deprecate_skill": Write(SkillStatusInput, "skill_status", _skill_status("deprecate")),
    "revoke_skill": Write(RevokeSkillInput, "skill_status", _skill_status("revoke")),
    "delete_skill": Write(DeleteSkillInput, "forget", _delete_skill),
    "register_agent": Write(
        RegisterAgentInput,
        "agent",
        _agent_event("register", display_name=lambda r: r.display_name or r.agent_id),
        _registry,
    ),
    "add_agent_key": Write(
        AddAgentKeyInput, "agent", _agent_event("key_add", public_key=_public, key_id=_key_id), _registry
    ),
    "revoke_agent_key": Write(RevokeAgentKeyInput, "agent", _agent_event("key_revoke"), _registry),
    "disable_agent": Write(DisableAgentInput, "agent", _agent_event("disable"), _registry),
    "upsert_entity_type": Write(UpsertEntityTypeInput, "entity_type", _entity_type, _entity_types),
}
"""Every write tool the proxy signs: the one place that says what each may append."""

PASSED = READS | PHASES | CONFIGURATION
"""Tools forwarded unsigned while signing."""


def known(name: str) -> bool:
    """Whether the table names ``name`` (a read, a phase, a write it signs or one it refuses)."""
    return name in PASSED or name in WRITES or name in UNSIGNABLE


def unsignable(name: str, arguments: dict[str, Any]) -> str | None:
    """Why this write cannot be signed, checked before anything is sent; None when it can."""
    if name in UNSIGNABLE:
        return UNSIGNABLE[name]
    write = WRITES[name]
    return write.unsignable(parse(write.input, arguments))
