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
from mentis.api.branches import (
    BranchFromInput,
    BranchInfo,
    ListBranchesInput,
    ListBranchesResult,
    MergeBranchInput,
    MergeReport,
)
from mentis.api.common import parse
from mentis.api.entity_types import (
    ListEntityTypesInput,
    ListEntityTypesResult,
    UpsertEntityTypeInput,
    UpsertEntityTypeResult,
)
from mentis.api.federation import FederatedSearchInput, FederatedSearchResult
from mentis.api.review import (
    AcceptProposalInput,
    AcceptProposalResult,
    ListProposalsInput,
    ListProposalsResult,
    ProposalOut,
    RejectProposalInput,
    RejectProposalResult,
    ShowProposalInput,
)
from mentis.api.scopes import PublishInput, PublishResult
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
    AppendRetrospectiveInput,
    AppendRetrospectiveResult,
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
from mentis.api.webhooks import (
    CreateWebhookInput,
    CreateWebhookResult,
    DeleteWebhookResult,
    DeliveriesInput,
    DeliveriesResult,
    ListWebhooksInput,
    ListWebhooksResult,
    RedeliverInput,
    RedeliverResult,
    WebhookRef,
)
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
    admin: bool = False
    """Only an admin caller may run it (the agent registry): in no default tool profile."""

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
        "Record what you just tried on a task: action, files, observation, your inference apart, and the "
        "check you ran (none: unverified). Record failed checks too.",
        writes=True,
    ),
    Operation(
        "search",
        SearchInput,
        SearchResult,
        lambda m, c, r, _: m.search(c, r),
        "Search earlier attempts before you start or when stuck, with the problem in your own words. "
        "Returns tasks best first: status, preview, outdated reason, stale files. Details: recall.",
    ),
    Operation(
        "federated_search",
        FederatedSearchInput,
        FederatedSearchResult,
        lambda m, c, r, _: m.federated_search(c, r),
        "Search this memory and the other memories configured at once, fused by rank; each task names its "
        "memory, and memories that did not answer are listed with the reason.",
    ),
    Operation(
        "recall",
        RecallInput,
        RecallResult,
        lambda m, c, r, _: m.recall(c, r),
        "A task's full history (repository + task_id), or read-only SQL (sql, params) over the views "
        "tasks, attempts, corrections, thoughts, relations.",
    ),
    Operation(
        "mark_conclusion_outdated",
        MarkOutdatedInput,
        MarkOutdatedResult,
        lambda m, c, r, s: m.mark_conclusion_outdated(c, r, seal=s),
        "Mark an attempt's conclusion outdated when it no longer holds, with the reason. Search shows the"
        " correction.",
        writes=True,
    ),
    Operation(
        "forget_attempt",
        ForgetInput,
        ForgetResult,
        lambda m, c, r, s: m.forget_attempt(c, r, seal=s),
        "Erase an attempt's content, e.g. a leaked secret. The ledger keeps a tombstone.",
        writes=True,
        destructive=True,
    ),
    Operation(
        "forget_thought",
        ForgetThoughtInput,
        ForgetThoughtResult,
        lambda m, c, r, s: m.forget_thought(c, r, seal=s),
        "Erase a thought's content, e.g. a leaked secret. The ledger keeps a tombstone.",
        writes=True,
        destructive=True,
    ),
    Operation(
        "publish",
        PublishInput,
        PublishResult,
        lambda m, c, r, s: m.publish(c, r, seal=s),
        "Widen a private attempt or thought you wrote to agent or repository visibility.",
        writes=True,
    ),
    Operation(
        "verify_integrity",
        VerifyInput,
        VerifyResult,
        lambda m, c, r, _: m.verify_integrity(c, r.repository, r.signatures),
        "Verify the ledger's hash chains and signatures; fails naming the chain and seq that do not match.",
    ),
    Operation(
        "stats",
        StatsInput,
        StatsResult,
        lambda m, c, r, _: m.stats(c, r),
        "Count tasks, attempts by status, thoughts by type and ledger entries you may read.",
    ),
    Operation(
        "append_thought",
        AppendThoughtInput,
        AppendThoughtResult,
        lambda m, c, r, s: m.append_thought(c, r, seal=s),
        "Store a typed thought, linked to earlier ones by refs and relations; thought_id makes a retry "
        "idempotent.",
        writes=True,
    ),
    Operation(
        "append_retrospective",
        AppendRetrospectiveInput,
        AppendRetrospectiveResult,
        lambda m, c, r, s: m.append_retrospective(c, r, seal=s),
        "Sum up a task when done or stuck: what worked, what did not, what to do next. Links the "
        "attempts and thoughts it covers; search shows it first until a newer attempt.",
        writes=True,
    ),
    Operation(
        "search_thoughts",
        SearchThoughtsInput,
        SearchThoughtsResult,
        lambda m, c, r, _: m.search_thoughts(c, r),
        "Search thoughts by meaning or list them by filters; superseded ones only with include_invalidated.",
    ),
    Operation(
        "get_thought",
        GetThoughtInput,
        ThoughtOut,
        lambda m, c, r, _: m.get_thought(c, r),
        "Read one thought: by thought_id, hash, or repository + seq.",
    ),
    Operation(
        "traverse_thoughts",
        TraverseInput,
        TraverseResult,
        lambda m, c, r, _: m.traverse_thoughts(c, r),
        "Follow refs and relations from a thought; returns the thoughts and edges reached.",
    ),
    Operation(
        "context_bundle",
        ContextBundleInput,
        ContextBundleResult,
        lambda m, c, r, _: m.context_bundle(c, r),
        "Load context before working on something: thoughts matching the query, each with its related "
        "thoughts.",
    ),
    Operation(
        "recent_context",
        RecentContextInput,
        RecentContextResult,
        lambda m, c, r, _: m.recent_context(c, r),
        "A repository's newest thoughts as a catch-up note, to read after a context reset.",
    ),
    Operation(
        "export_memory_md",
        MemoryMdExportInput,
        MemoryMdExportResult,
        lambda m, c, r, _: m.export_memory_md(c, r),
        "Render a repository's current thoughts as MEMORY.md (import_memory_md reads it back).",
    ),
    Operation(
        "import_memory_md",
        MemoryMdImportInput,
        MemoryMdImportResult,
        lambda m, c, r, s: m.import_memory_md(c, r, seal=s),
        "Append the thoughts of a MEMORY.md; one malformed line rejects the whole file.",
        writes=True,
    ),
    Operation(
        "prepare_write",
        PrepareWriteInput,
        PrepareWriteResult,
        lambda m, c, r, _: prepare_write(m, c, r),
        "Remote signing phase 1: the unsigned entry a write would append. Writes nothing.",
    ),
    Operation(
        "signed_write",
        SignedWriteInput,
        SignedWriteResult,
        lambda m, c, r, _: signed_write(m, c, r),
        "Remote signing phase 2: the write, with prepare_write's id and time and the client's signature.",
        writes=True,
    ),
    Operation(
        "upload_skill",
        UploadSkillInput,
        UploadSkillResult,
        lambda m, c, r, s: m.upload_skill(c, r, seal=s),
        "Store a skill (how to test, release... here) as SKILL.md text or JSON, or a diff against its "
        "newest version.",
        writes=True,
    ),
    Operation(
        "read_skill",
        ReadSkillInput,
        ReadSkillResult,
        lambda m, c, r, _: m.read_skill(c, r),
        "Read a skill's text, status and warnings. It is another agent's instructions: read before you "
        "follow.",
    ),
    Operation(
        "search_skills",
        SearchSkillsInput,
        SearchSkillsResult,
        lambda m, c, r, _: m.search_skills(c, r),
        "Find skills for what you are about to do, in your own words. Returns active skills best first.",
    ),
    Operation(
        "list_skills",
        ListSkillsInput,
        ListSkillsResult,
        lambda m, c, r, _: m.list_skills(c, r),
        "List a repository's skills (active and deprecated by default).",
    ),
    Operation(
        "skill_versions",
        SkillVersionsInput,
        SkillVersionsResult,
        lambda m, c, r, _: m.skill_versions(c, r),
        "A skill's versions: author, time, content hash, signature state.",
    ),
    Operation(
        "deprecate_skill",
        SkillStatusInput,
        SkillStatusResult,
        lambda m, c, r, s: m.deprecate_skill(c, r, seal=s),
        "Deprecate a skill (search leaves it out); a later upload re-activates it.",
        writes=True,
    ),
    Operation(
        "revoke_skill",
        RevokeSkillInput,
        SkillStatusResult,
        lambda m, c, r, s: m.revoke_skill(c, r, seal=s),
        "Revoke a harmful skill, with the reason; its id and copies of its text stay revoked.",
        writes=True,
    ),
    Operation(
        "delete_skill",
        DeleteSkillInput,
        DeleteSkillResult,
        lambda m, c, r, s: m.delete_skill(c, r, seal=s),
        "Erase every version of a skill; the ledger keeps a tombstone.",
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
        "Admin: register an agent (id, display name, aliases) in the agent registry.",
        writes=True,
        admin=True,
    ),
    Operation(
        "add_agent_key",
        AddAgentKeyInput,
        AgentResult,
        lambda m, c, r, s: m.add_agent_key(c, r, seal=s),
        "Admin: add an Ed25519 public key to an agent; its writes must then be signed.",
        writes=True,
        admin=True,
    ),
    Operation(
        "revoke_agent_key",
        RevokeAgentKeyInput,
        AgentResult,
        lambda m, c, r, s: m.revoke_agent_key(c, r, seal=s),
        "Admin: revoke an agent's key, with the reason.",
        writes=True,
        admin=True,
        destructive=True,
    ),
    Operation(
        "disable_agent",
        DisableAgentInput,
        AgentResult,
        lambda m, c, r, s: m.disable_agent(c, r, seal=s),
        "Admin: disable an agent, with the reason; its later writes are refused.",
        writes=True,
        admin=True,
        destructive=True,
    ),
    Operation(
        "list_agents",
        ListAgentsInput,
        ListAgentsResult,
        lambda m, c, r, _: m.list_agents(c, r),
        "List the registered agents and their keys.",
    ),
    Operation(
        "show_agent",
        ShowAgentInput,
        AgentOut,
        lambda m, c, r, _: m.show_agent(c, r),
        "Show one registered agent (id or alias) and its keys.",
    ),
)
OPERATIONS += AGENT_OPERATIONS

REVIEW_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "list_proposals",
        ListProposalsInput,
        ListProposalsResult,
        lambda m, c, r, _: m.list_proposals(c, r),
        "List proposed memories awaiting review (or accepted/rejected ones), oldest first.",
    ),
    Operation(
        "show_proposal",
        ShowProposalInput,
        ProposalOut,
        lambda m, c, r, _: m.show_proposal(c, r),
        "Show one proposal: its record, source episode and decision.",
    ),
    Operation(
        "accept_proposal",
        AcceptProposalInput,
        AcceptProposalResult,
        lambda m, c, r, s: m.accept_proposal(c, r, seal=s),
        "Accept a proposal, optionally edited: records it as you.",
        writes=True,
    ),
    Operation(
        "reject_proposal",
        RejectProposalInput,
        RejectProposalResult,
        lambda m, c, r, _: m.reject_proposal(c, r),
        "Reject a proposal with a reason; it is not proposed again.",
        writes=True,
    ),
)
OPERATIONS += REVIEW_OPERATIONS
WEBHOOK_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "create_webhook",
        CreateWebhookInput,
        CreateWebhookResult,
        lambda m, c, r, _: m.create_webhook(c, r),
        "Admin: subscribe a URL to events, bounded by a token's read scope. The secret is shown once.",
        writes=True,
        admin=True,
    ),
    Operation(
        "list_webhooks",
        ListWebhooksInput,
        ListWebhooksResult,
        lambda m, c, r, _: m.list_webhooks(c, r),
        "Admin: list webhook subscriptions (URL, events, filters, token); never their secrets.",
        admin=True,
    ),
    Operation(
        "delete_webhook",
        WebhookRef,
        DeleteWebhookResult,
        lambda m, c, r, _: m.delete_webhook(c, r),
        "Admin: delete a subscription and its pending deliveries.",
        writes=True,
        admin=True,
        destructive=True,
    ),
    Operation(
        "webhook_deliveries",
        DeliveriesInput,
        DeliveriesResult,
        lambda m, c, r, _: m.webhook_deliveries(c, r),
        "Admin: recent deliveries, newest first (state dead: gave up, with last error).",
        admin=True,
    ),
    Operation(
        "redeliver_webhook",
        RedeliverInput,
        RedeliverResult,
        lambda m, c, r, _: m.redeliver_webhook(c, r),
        "Admin: queue a delivery (e.g. a dead one) again now, its attempts counted afresh.",
        writes=True,
        admin=True,
    ),
)
OPERATIONS += WEBHOOK_OPERATIONS
ENTITY_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "upsert_entity_type",
        UpsertEntityTypeInput,
        UpsertEntityTypeResult,
        lambda m, c, r, s: m.upsert_entity_type(c, r, seal=s),
        "Register an entity type (what a thought is about: its entity_type), or an admin's new description.",
        writes=True,
    ),
    Operation(
        "list_entity_types",
        ListEntityTypesInput,
        ListEntityTypesResult,
        lambda m, c, r, _: m.list_entity_types(c, r),
        "List the entity types a thought's entity_type may name, built in and registered.",
    ),
)
OPERATIONS += ENTITY_OPERATIONS

BRANCH_OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "branch_from",
        BranchFromInput,
        BranchInfo,
        lambda m, c, r, s: m.branch_from(c, r, seal=s),
        "Fork a branch of a repository (or of branch parent) at its head, or at fork_seq/fork_hash "
        "(exist_ok: return it if it exists). Writes and reads naming the branch then use it; the parent "
        "does not see it until merged.",
        writes=True,
    ),
    Operation(
        "list_branches",
        ListBranchesInput,
        ListBranchesResult,
        lambda m, c, r, _: ListBranchesResult(branches=m.list_branches(c, r.repository)),
        "A repository's branches: chain, parent, fork point, head, where merged.",
    ),
    Operation(
        "merge_branch",
        MergeBranchInput,
        MergeReport,
        lambda m, c, r, s: m.merge_branch(c, r, seal=s),
        "Merge a branch into its parent line (or into: another branch). Nothing is copied: the target reads "
        "the branch's records from then on. Reports conflicts.",
        writes=True,
    ),
)
OPERATIONS += BRANCH_OPERATIONS

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
