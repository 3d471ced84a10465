"""What a body may point at and where it may stand (DESIGN §4, last rule): the one rule the
reference verifier (:func:`mentis.ledger.chain.verify_rows`) and SQLite's block scans
(``store/sqlite/ledger_scan.py``) both apply, so the two cannot disagree.

An agent registry event stands only in :data:`AGENTS_CHAIN` and targets nothing, a signed
checkpoint only in :data:`CHECKPOINTS_CHAIN` and an entity type only in
:data:`ENTITY_TYPES_CHAIN`, each targeting nothing; no other chain
name starts with :data:`RESERVED_PREFIX`. Every other body names its own chain (``repository``);
an attempt, thought or skill version body names its own entry's id (:data:`RECORD_ID`). A
correction targets an attempt, a visibility entry (``publish``) an attempt or thought, a forget
tombstone one attempt, thought or skill version, a
thought's refs any record and its relations thoughts, a skill diff the version before it and a
skill status the version it names: each target must be a record of the same chain, appended
before.

This module imports only the standard library and orjson (to parse bodies exactly as the derive
steps do): a scan worker process imports it at start-up, where ``typing`` alone would cost more
than the rest.
"""

from __future__ import annotations

import re

from orjson import loads

AGENTS_CHAIN = "__agents__"
"""The system chain of the agent registry; repositories starting with ``__`` are reserved."""
RESERVED_PREFIX = "__"
CHECKPOINTS_CHAIN = "__checkpoints__"
"""The system chain of signed checkpoints (``mentis.ledger.checkpoint``): what the store vouched for."""
CHECKPOINT_SCHEMA = "mentis.checkpoint/1"
ENTITY_TYPES_CHAIN = "__entity_types__"
"""The system chain of the entity-type registry (``mentis.ledger.entity_types``): what a thought
may be about."""
RECORD_ID = {"attempt": "attempt_id", "thought": "thought_id", "skill": "version_id"}
"""The body field that names its own entry's id, per entry kind that creates a record."""
SKILL = "skill"
_SEP = "\x00"
BRANCH_POINTS = {
    "fork": ("parent", "fork_seq", "fork_hash"),
    "branch": ("chain", "fork_seq", "fork_hash"),
    "merge": ("source", "source_seq", "source_hash"),
}
"""Each branch entry kind's (chain named, a seq, a hash) fields (``mentis.ledger.branches``): the
fork point in the parent (``fork``, and the parent's own ``branch`` entry, which names the branch's
chain) or the merged head of the source (``merge``), which must be an entry with that hash."""

Link = tuple[str, str]
"""(target record id, the kind it must be: 'attempt', 'thought', 'record' for either, or
:func:`skill_want` of one skill version)."""
Records = dict[str, tuple[str, str, int]]
"""Each record id → (chain, :func:`record_kind`, seq) of the entry that created it."""


def skill_want(skill_id: object, version: object) -> str:
    """The record kind a link to version ``version`` of skill ``skill_id`` wants."""
    return f"{SKILL}{_SEP}{skill_id}{_SEP}{version}"


ENTITY_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
"""An entity type's name: 1-64 lowercase letters, digits or ``_.-``, starting with a letter."""


def entity_type_name(name: object) -> bool:
    """Whether ``name`` is a valid entity type name (:data:`ENTITY_TYPE_NAME`)."""
    return type(name) is str and ENTITY_TYPE_NAME.match(name) is not None


def record_kind(kind: str, body: bytes | None) -> str:
    """The kind a record is noted under: a skill version whose body is there names its skill and
    version (:func:`skill_want`), so links can check them; one whose body was erased is plain
    ``skill`` (a link to it is checked for chain, order and kind only)."""
    if kind != SKILL or body is None:
        return kind
    try:
        doc = loads(body)
        return skill_want(doc["skill_id"], doc["version"]) if type(doc) is dict else kind
    except (ValueError, KeyError, TypeError):
        return kind


def body_links(chain: str, kind: str, id_: str, body: bytes) -> list[Link] | str:
    """The records a body points at, or why it may not stand in ``chain`` (module docstring); the
    caller checks each target with :func:`link_error`."""
    try:
        doc = loads(body)
    except ValueError:  # orjson.JSONDecodeError, as in the derive steps that read the body
        return "body is not JSON"
    if type(doc) is not dict:
        return "body is not a JSON object"
    if (kind == "agent") != (chain == AGENTS_CHAIN):
        return f"a {kind} entry may not stand in chain {chain!r} (only agent entries stand in {AGENTS_CHAIN})"
    if kind == "agent":
        return []  # a registry event names agents and keys, never another chain's records
    if (kind == "checkpoint") != (chain == CHECKPOINTS_CHAIN):
        return (
            f"a {kind} entry may not stand in chain {chain!r} (only checkpoints stand in {CHECKPOINTS_CHAIN})"
        )
    if (kind == "entity_type") != (chain == ENTITY_TYPES_CHAIN):
        return f"a {kind} entry may not stand in chain {chain!r} (only entity types stand there)"
    if kind == "entity_type":
        # a registry event names a type and describes it, never a record
        if not entity_type_name(doc.get("name")) or type(doc.get("description")) is not str:
            return "an entity_type body names a valid type name and a description"
        return []
    if kind == "checkpoint":
        # a checkpoint names chain heads, never records; its signature is checked where it is used
        if doc.get("schema") != CHECKPOINT_SCHEMA or type(doc.get("chains")) is not list:
            return f"a checkpoint body is a {CHECKPOINT_SCHEMA} document with its chains"
        return []
    if chain.startswith(RESERVED_PREFIX):
        return f"chain {chain!r} is reserved (names starting with __ are system chains)"
    if doc.get("repository") != chain:
        return f"body names repository {doc.get('repository')!r}, not its own chain"
    own = RECORD_ID.get(kind)
    if own is not None and doc.get(own) != id_:
        return f"body names {own} {doc.get(own)!r}, not its entry's id {id_!r}"
    links: list[tuple[object, str]] = []
    if kind == "correction":
        links.append((doc.get("attempt_id"), "attempt"))
    elif kind == "visibility":
        links.append((doc.get("record_id"), "record"))
    elif kind == "forget":
        named = [key for key in ("attempt_id", "thought_id", "skill_id") if key in doc]
        if len(named) != 1:
            return "forget tombstone must name exactly one attempt_id, thought_id or skill_id"
        if named[0] == "skill_id":
            links.append((doc.get("version_id"), skill_want(doc["skill_id"], doc.get("version"))))
        else:
            links.append((doc[named[0]], named[0].removesuffix("_id")))
    elif kind == "thought":
        refs, relations = doc.get("refs", []), doc.get("relations", [])
        if type(refs) is not list or type(relations) is not list:
            return "thought refs and relations must be lists"
        links += [(ref, "record") for ref in refs]
        for rel in relations:
            if type(rel) is not dict:
                return "a thought relation is not an object"
            links.append((rel.get("target_id"), "thought"))
    elif kind == SKILL:
        version = doc.get("version")
        if type(doc.get("skill_id")) is not str or type(version) is not int or version < 1:
            return "a skill version must name its skill_id and a version number from 1"
        if ("content" in doc) == ("diff" in doc):
            return "a skill version holds exactly one of its whole content or a diff"
        if "diff" in doc:
            links.append((doc.get("base_id"), skill_want(doc["skill_id"], version - 1)))
    elif kind == "skill_status":
        if type(doc.get("skill_id")) is not str or type(doc.get("version")) is not int:
            return "a skill status must name its skill_id and version"
        links.append((doc.get("version_id"), skill_want(doc["skill_id"], doc["version"])))
    elif kind in BRANCH_POINTS:
        other, seq_key, hash_key = BRANCH_POINTS[kind]
        if (
            type(doc.get(other)) is not str
            or type(doc.get(seq_key)) is not int
            or type(doc.get(hash_key)) is not str
        ):
            return f"a {kind} entry must name {other}, {seq_key} and {hash_key}"
        if doc[other].startswith(RESERVED_PREFIX) or doc[other] == chain:
            return f"a {kind} entry may not name chain {doc[other]!r}"
    checked: list[Link] = []
    for target, want in links:
        if type(target) is not str:
            return f"body targets {target!r}, which is not a record id"
        checked.append((target, want))
    return checked


def link_error(
    records: Records,
    chain: str,
    seq: int,
    target: str,
    want: str,
    reach: dict[str, int | None] | None = None,
) -> str | None:
    """Why ``target`` may not be linked from ``chain`` at ``seq`` (None when it may). ``reach``:
    the other chains ``chain`` reads (its ancestors and the chains merged into them, each with the
    last seq read or None for all: ``BranchGraph.reach``), whose records noted so far (earlier in
    ledger order) it may also link to."""
    found = records.get(target)
    if found is None:
        return f"body targets {target!r}, which is no earlier record of this chain"
    if found[0] != chain:
        limit = -1 if reach is None else reach.get(found[0], -1)
        if limit is not None and found[2] > limit:
            return f"body targets {target!r}, which is no earlier record of this chain or of one it reads"
    elif found[2] >= seq:
        return f"body targets {target!r}, which is no earlier record of this chain"
    if want.startswith(SKILL + _SEP):
        if found[1] != want and found[1] != SKILL:
            _, skill_id, version = want.split(_SEP)
            return f"body targets {target!r}, which is not version {version} of skill {skill_id!r}"
        return None
    if want != "record" and found[1] != want:
        return f"body targets {target!r}, which is a {found[1]}, not a {want}"
    return None
