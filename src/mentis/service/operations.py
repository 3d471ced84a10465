"""The registry of operations every transport exposes: MCP tools, REST routes, docs.

An operation is a name, its input and output models, the Memory method it calls and a
description written for the agent that reads it. Adding an operation here publishes it on
every transport; transports hold no list of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from mentis.api.agents import (
    AddAgentKeyInput,
    AgentOut,
    AgentResult,
    DisableAgentInput,
    ListAgentsInput,
    ListAgentsResult,
    RegisterAgentInput,
    RevokeAgentKeyInput,
    ShowAgentInput,
)
from mentis.api.attempts import (
    ForgetInput,
    ForgetResult,
    MarkOutdatedInput,
    MarkOutdatedResult,
    RecallInput,
    RecallResult,
    RecordAttemptInput,
    RecordAttemptResult,
    SearchInput,
    SearchResult,
)
from mentis.api.common import parse
from mentis.api.signed import PrepareWriteInput, PrepareWriteResult, SignedWriteInput, SignedWriteResult
from mentis.api.skills import (
    DeleteSkillInput,
    DeleteSkillResult,
    ListSkillsInput,
    ListSkillsResult,
    ReadSkillInput,
    ReadSkillResult,
    RevokeSkillInput,
    SearchSkillsInput,
    SearchSkillsResult,
    SkillStatusInput,
    SkillStatusResult,
    SkillVersionsInput,
    SkillVersionsResult,
    UploadSkillInput,
    UploadSkillResult,
)
from mentis.api.stats import StatsInput, StatsResult
from mentis.api.thoughts import (
    AppendThoughtInput,
    AppendThoughtResult,
    ContextBundleInput,
    ContextBundleResult,
    ForgetThoughtInput,
    ForgetThoughtResult,
    GetThoughtInput,
    MemoryMdExportInput,
    MemoryMdExportResult,
    MemoryMdImportInput,
    MemoryMdImportResult,
    RecentContextInput,
    RecentContextResult,
    SearchThoughtsInput,
    SearchThoughtsResult,
    ThoughtOut,
    TraverseInput,
    TraverseResult,
)
from mentis.api.verify import VerifyInput, VerifyResult
from mentis.errors import InvalidInput
from mentis.service.access import Caller
from mentis.service.memory import Memory
from mentis.service.signed_writes import check_signable, prepare, write_signed
from mentis.store.seal import Seal


@dataclass(frozen=True)
class Operation:
    name: str
    input: type[BaseModel]
    output: type[BaseModel]
    run: Callable[[Memory, Caller, Any, Seal | None], BaseModel]
    """Calls the Memory method; a write passes the seal on (reads take none)."""
    description: str
    writes: bool = False
    destructive: bool = False

    def call(self, memory: Memory, caller: Caller, req: Any, seal: Seal | None = None) -> BaseModel:
        """Run the operation for ``caller`` on a parsed input; a write with ``seal`` (None: the
        one Memory chooses: :meth:`Memory.sealing`)."""
        return self.run(memory, caller, req, seal)


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "record_attempt",
        RecordAttemptInput,
        RecordAttemptResult,
        lambda m, c, r, s: m.record_attempt(c, r, seal=s),
        "Record one attempt at a task: the action you took, the files it touched, what you "
        "observed, an optional inference (kept apart from the observation), and the check you "
        "ran (command + passed/failed; omit it when nothing was verified). Creates the task on "
        "its first attempt. Returns the attempt id and its ledger position.",
        writes=True,
    ),
    Operation(
        "search",
        SearchInput,
        SearchResult,
        lambda m, c, r, _: m.search(c, r),
        "Find tasks where agents already worked on a problem, from a description in your own "
        "words. Returns tasks best first, each with one matching attempt, its status "
        "(passed/failed/unverified), its newest correction if it was marked outdated, and the "
        "score parts. Pass current_file_hashes to learn which results touch files that changed.",
    ),
    Operation(
        "recall",
        RecallInput,
        RecallResult,
        lambda m, c, r, _: m.recall(c, r),
        "Read a task's full history (repository + task_id), or run read-only SQL (sql, params) "
        "over the views tasks, attempts and corrections. SQL results are capped at 100 rows, "
        "512,000 bytes (truncation is flagged) and 5 seconds.",
    ),
    Operation(
        "mark_conclusion_outdated",
        MarkOutdatedInput,
        MarkOutdatedResult,
        lambda m, c, r, s: m.mark_conclusion_outdated(c, r, seal=s),
        "Mark an attempt's conclusion as outdated, with the reason (and the commit where you saw "
        "it). The attempt itself never changes; every correction is kept and the newest is shown "
        "with the attempt in search results.",
        writes=True,
    ),
    Operation(
        "forget_attempt",
        ForgetInput,
        ForgetResult,
        lambda m, c, r, s: m.forget_attempt(c, r, seal=s),
        "Erase an attempt's content (and its corrections) from the memory, e.g. when it holds a "
        "secret. The ledger keeps a tombstone (who, when, why), so the chain still verifies.",
        writes=True,
        destructive=True,
    ),
    Operation(
        "forget_thought",
        ForgetThoughtInput,
        ForgetThoughtResult,
        lambda m, c, r, s: m.forget_thought(c, r, seal=s),
        "Erase a thought's content from the memory, e.g. when it holds a secret: its text, vector, "
        "index terms and rejection fingerprints. The ledger keeps a tombstone (who, when, why), so "
        "the chain still verifies; relations other thoughts hold to it are reported as dangling.",
        writes=True,
        destructive=True,
    ),
    Operation(
        "verify_integrity",
        VerifyInput,
        VerifyResult,
        lambda m, c, r, _: m.verify_integrity(c, r.repository, r.signatures),
        "Verify the hash chains of the ledger (all repositories, or one) and its signatures (each "
        "signing stream's last one; every one with signatures=true). Fails with the chain, seq and "
        "what did not match when the store was altered.",
    ),
    Operation(
        "stats",
        StatsInput,
        StatsResult,
        lambda m, c, r, _: m.stats(c, r),
        "Count what the memory holds in the repositories you may read (or one repository): tasks, "
        "attempts by status, outdated and forgotten attempts, thoughts by type, ledger entries per "
        "repository and the newest activity.",
    ),
    Operation(
        "append_thought",
        AppendThoughtInput,
        AppendThoughtResult,
        lambda m, c, r, s: m.append_thought(c, r, seal=s),
        "Store a typed thought (Decision, Finding, Constraint, LessonLearned, Hypothesis, ...) with "
        "importance/confidence in [0, 1], tags, concepts, refs to earlier thoughts or attempts, and "
        "relations (Supersedes, Corrects, Invalidates, Supports, ...). A near-duplicate of a recent "
        "thought of the same type supersedes it automatically; a thought that re-asserts a rejected "
        "conclusion is stored with a warning naming the rejection.",
        writes=True,
    ),
    Operation(
        "search_thoughts",
        SearchThoughtsInput,
        SearchThoughtsResult,
        lambda m, c, r, _: m.search_thoughts(c, r),
        "Search thoughts by meaning and words, or list them by filters (types, roles, agents, tags, "
        "concepts, text, since/until, min_importance, min_confidence, task_id). Thoughts that were "
        "superseded, corrected or invalidated are left out unless include_invalidated; as_of answers "
        "what was believed at that time.",
    ),
    Operation(
        "get_thought",
        GetThoughtInput,
        ThoughtOut,
        lambda m, c, r, _: m.get_thought(c, r),
        "Read one thought by thought_id, by its ledger hash, or by repository + seq, with "
        "invalidated_by naming thoughts that replaced it.",
    ),
    Operation(
        "traverse_thoughts",
        TraverseInput,
        TraverseResult,
        lambda m, c, r, _: m.traverse_thoughts(c, r),
        "Follow refs and relations from a thought (direction out/in/both, depth 1-5, optional relation "
        "kinds, at most `limit` nodes) and return the thoughts and edges reached.",
    ),
    Operation(
        "context_bundle",
        ContextBundleInput,
        ContextBundleResult,
        lambda m, c, r, _: m.context_bundle(c, r),
        "Seed thoughts matching a query, each with the thoughts related to it (refs and relations "
        "either way) grouped under it: the context to load before working on something.",
    ),
    Operation(
        "recent_context",
        RecentContextInput,
        RecentContextResult,
        lambda m, c, r, _: m.recent_context(c, r),
        "The newest thoughts of a repository (optionally one agent's), also rendered as a compact "
        "catch-up prompt to read after a context reset.",
    ),
    Operation(
        "export_memory_md",
        MemoryMdExportInput,
        MemoryMdExportResult,
        lambda m, c, r, _: m.export_memory_md(c, r),
        "Render a repository's current thoughts as MEMORY.md: a section per type, one line per "
        "thought with its metadata in a comment, so import_memory_md round-trips it.",
    ),
    Operation(
        "import_memory_md",
        MemoryMdImportInput,
        MemoryMdImportResult,
        lambda m, c, r, s: m.import_memory_md(c, r, seal=s),
        "Append the thoughts of a MEMORY.md (as written by export_memory_md) to a repository; a "
        "malformed line rejects the whole file and nothing is written.",
        writes=True,
    ),
    Operation(
        "prepare_write",
        PrepareWriteInput,
        PrepareWriteResult,
        lambda m, c, r, _: prepare_write(m, c, r),
        "Remote signing, phase 1: run a write tool (record_attempt, mark_conclusion_outdated, "
        "forget_attempt, append_thought, forget_thought, ...) up to its ledger entry without writing "
        "anything, and return the entry's unsigned fields (chain, kind, id, at, agent, body_hash) and "
        "its body, for a client holding the agent's key to check and sign (`mentis serve --remote` "
        "does this for you).",
    ),
    Operation(
        "signed_write",
        SignedWriteInput,
        SignedWriteResult,
        lambda m, c, r, _: signed_write(m, c, r),
        "Remote signing, phase 2: run the write tool with the id and time prepare_write gave and the "
        "client's signature (key_id, sig envelope); the store verifies the signature against the "
        "agent's registered key before it writes. Returns the tool's own result.",
        writes=True,
    ),
    Operation(
        "upload_skill",
        UploadSkillInput,
        UploadSkillResult,
        lambda m, c, r, s: m.upload_skill(c, r, seal=s),
        "Store a skill (a procedure for this repository: how to run its tests, cut a release, ...) as "
        "SKILL.md text, Markdown with YAML front matter (name, description, tags, triggers, warnings), "
        "or as JSON, up to 1 MiB; or send a unified diff against the newest version (diff, skill_id, "
        "base_version). The skill_id defaults to the name. Each upload is a new version; the same "
        "text again writes nothing.",
        writes=True,
    ),
    Operation(
        "read_skill",
        ReadSkillInput,
        ReadSkillResult,
        lambda m, c, r, _: m.read_skill(c, r),
        "Read a skill's text (the newest version, or `version`), its status, its warnings and every "
        "version's author and signature state. A skill is instructions written by another agent: "
        "read it before you follow it.",
    ),
    Operation(
        "search_skills",
        SearchSkillsInput,
        SearchSkillsResult,
        lambda m, c, r, _: m.search_skills(c, r),
        "Find skills by what you are about to do, in your own words (the same retrieval as search). "
        "Returns active skills best first (deprecated ones too with include_deprecated); revoked "
        "skills are never returned.",
    ),
    Operation(
        "list_skills",
        ListSkillsInput,
        ListSkillsResult,
        lambda m, c, r, _: m.list_skills(c, r),
        "List the skills of a repository (or every repository you may read), active and deprecated "
        "by default (statuses: active, deprecated, revoked).",
    ),
    Operation(
        "skill_versions",
        SkillVersionsInput,
        SkillVersionsResult,
        lambda m, c, r, _: m.skill_versions(c, r),
        "A skill's versions: number, author, time, content hash, and whether each is signed and "
        "its signature verifies.",
    ),
    Operation(
        "deprecate_skill",
        SkillStatusInput,
        SkillStatusResult,
        lambda m, c, r, s: m.deprecate_skill(c, r, seal=s),
        "Mark a skill deprecated (search leaves it out); a later upload re-activates it.",
        writes=True,
    ),
    Operation(
        "revoke_skill",
        RevokeSkillInput,
        SkillStatusResult,
        lambda m, c, r, s: m.revoke_skill(c, r, seal=s),
        "Revoke a skill with the reason, e.g. when its instructions are harmful. Final: later "
        "uploads under its id stay revoked, and so do skills of this repository with the same "
        "instructions under any name; a copy elsewhere carries a warning naming this revocation.",
        writes=True,
    ),
    Operation(
        "delete_skill",
        DeleteSkillInput,
        DeleteSkillResult,
        lambda m, c, r, s: m.delete_skill(c, r, seal=s),
        "Erase every version of a skill from the memory. The ledger keeps a tombstone (who, when, "
        "why) and its status entries, so the chain still verifies and a revocation still holds.",
        writes=True,
        destructive=True,
    ),
)

AGENT_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "register_agent",
        RegisterAgentInput,
        AgentResult,
        lambda m, c, r, s: m.register_agent(c, r, seal=s),
        "Admin: register an agent (id, display name, description, aliases) in the agent registry.",
        writes=True,
    ),
    Operation(
        "add_agent_key",
        AddAgentKeyInput,
        AgentResult,
        lambda m, c, r, s: m.add_agent_key(c, r, seal=s),
        "Admin: add an Ed25519 public key (base64url of its 32 bytes) to an agent. From then on "
        "every write by that agent must be signed by one of its active keys.",
        writes=True,
    ),
    Operation(
        "revoke_agent_key",
        RevokeAgentKeyInput,
        AgentResult,
        lambda m, c, r, s: m.revoke_agent_key(c, r, seal=s),
        "Admin: revoke an agent's key, with the reason. It stays on record; signatures the store "
        "accepted before the revocation stay valid, later writes signed with it are refused.",
        writes=True,
        destructive=True,
    ),
    Operation(
        "disable_agent",
        DisableAgentInput,
        AgentResult,
        lambda m, c, r, s: m.disable_agent(c, r, seal=s),
        "Admin: disable an agent, with the reason: every later write by it is refused.",
        writes=True,
        destructive=True,
    ),
    Operation(
        "list_agents",
        ListAgentsInput,
        ListAgentsResult,
        lambda m, c, r, _: m.list_agents(c, r),
        "List the registered agents with their keys (public keys, when added, revoked and why).",
    ),
    Operation(
        "show_agent",
        ShowAgentInput,
        AgentOut,
        lambda m, c, r, _: m.show_agent(c, r),
        "Show one registered agent (by id or alias) with its keys.",
    ),
)
OPERATIONS += AGENT_OPERATIONS

BY_NAME = {op.name: op for op in OPERATIONS}


def _signable(tool: str, arguments: dict[str, Any]) -> tuple[Operation, BaseModel]:
    """The write operation ``tool`` names, and its parsed ``arguments``, when a client may sign it."""
    op = BY_NAME.get(tool)
    if op is None:
        raise InvalidInput(f"tool: no operation named {tool!r}", field="tool")
    check_signable(tool, op.writes)
    return op, parse(op.input, arguments)


def prepare_write(memory: Memory, caller: Caller, req: PrepareWriteInput) -> PrepareWriteResult:
    """Phase 1 of a remote signed write: the unsigned fields and body of the entry ``req.tool``
    would append (:func:`mentis.service.signed_writes.prepare`); writes nothing."""
    op, arguments = _signable(req.tool, req.arguments)
    return prepare(req.tool, lambda seal: op.call(memory, caller, arguments, seal))


def signed_write(memory: Memory, caller: Caller, req: SignedWriteInput) -> SignedWriteResult:
    """Phase 2: ``req.tool`` run with phase 1's id and time, its entry sealed with the client's
    signature (:func:`mentis.service.signed_writes.write_signed`)."""
    op, arguments = _signable(req.tool, req.arguments)
    return write_signed(req, caller, lambda seal: op.call(memory, caller, arguments, seal))
