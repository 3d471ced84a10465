"""The service: ``Memory``, the one object every transport calls; transports only parse, call and
format.

``Memory`` owns one store and one embedder for the life of a process (:class:`ServiceContext`)
and composes the operation groups, one module each: attempts, thoughts, skills, agents, browse,
transfer (export, import), integrity (verify, rebuild, reindex), stats, staleness and webhooks. Each public
operation is a method here that calls its group's, with the caller as the store stands: its
damaged chains refused (:meth:`Memory.caller_now`), so no answer reads a chain that does not verify.

A write also takes the :class:`~mentis.store.seal.Seal` its ledger entries are made with: given by
the caller (``prepare_write`` and ``signed_write``, the two phases of a remote signed write), else a
fresh one, signed with the process's :class:`LocalSigner` (``MENTIS_SIGNING_KEY``) when the caller
is that signer's agent (:meth:`Memory.sealing`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import IO

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
    StaleInput,
    StaleResult,
)
from mentis.api.branches import (
    BranchFromInput,
    BranchInfo,
    ListBranchesInput,
    MergeBranchInput,
    MergeReport,
)
from mentis.api.common import SourceEpisode
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
    ProposeResult,
    RejectProposalInput,
    RejectProposalResult,
    ShowProposalInput,
)
from mentis.api.scopes import PublishInput, PublishResult
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
    SkillsExportResult,
    SkillsImportResult,
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
from mentis.api.verify import VerifyResult
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
from mentis.config import Settings
from mentis.providers.embed import Embedder, load_embedder
from mentis.providers.rerank import Reranker, load_reranker
from mentis.service.access import Caller
from mentis.service.agents import AgentOps
from mentis.service.attempts import AttemptOps
from mentis.service.branches import BranchOps, graph_views
from mentis.service.browse import BrowseOps, TaskPage, Timeline
from mentis.service.checkpoints import CheckpointOps, Held, Made, check_checkpoints, checkpoint_files
from mentis.service.context import ServiceContext, open_store
from mentis.service.entity_types import EntityTypeOps
from mentis.service.federation import Federation
from mentis.service.integrity import IntegrityOps
from mentis.service.local_signing import LocalSigner
from mentis.service.retrospectives import append_retrospective
from mentis.service.review import ReviewOps
from mentis.service.scopes import publish, visibilities
from mentis.service.skills import SkillOps, SkillReview
from mentis.service.staleness import stale_attempts
from mentis.service.stats import collect_stats
from mentis.service.thoughts import ThoughtOps
from mentis.service.transfer import TransferOps
from mentis.service.webhooks import WebhookOps
from mentis.store.protocol import RepositoryRow, Store
from mentis.store.seal import Seal


class Memory:
    """The service: one :class:`ServiceContext` (store, embedder, reranker, settings), the
    operation groups composed over it, and every public operation as a method."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        reranker: Reranker | None = None,
        *,
        settings: Settings | None = None,
        check_model: bool = True,
        signer: LocalSigner | None = None,
    ) -> None:
        self.ctx = ServiceContext(store, embedder, reranker, settings=settings, check_model=check_model)
        self.signer = signer
        if signer is not None and self.ctx.settings.agent_id is None:  # the key's agent is this process's
            self.ctx.settings = replace(self.ctx.settings, agent_id=signer.agent)
        self.store, self.embedder, self.settings = store, embedder, self.ctx.settings
        self.thoughts = ThoughtOps(self.ctx)
        self.attempts = AttemptOps(self.ctx, self.thoughts)
        self.browse = BrowseOps(self.ctx)
        self.skills = SkillOps(self.ctx)
        self.agents = AgentOps(self.ctx)
        self.entity_types = EntityTypeOps(self.ctx)
        self.transfer = TransferOps(self.ctx)
        self.integrity = IntegrityOps(self.ctx)
        self.federation = Federation(self, self.settings.federation, self._open_federated)
        self.review = ReviewOps(self.ctx, self.attempts, self.thoughts)
        self.checkpoints = CheckpointOps(self.ctx)
        self.webhooks = WebhookOps(self.ctx)
        self.branches = BranchOps(self.ctx)

    @classmethod
    def open(
        cls,
        settings: Settings,
        embedder: Embedder | None = None,
        *,
        check_model: bool = True,
        check_derived: bool = True,
    ) -> Memory:
        """Open and verify the store (refusing a store that does not verify), load the embedder,
        and the local signer when ``MENTIS_SIGNING_KEY`` is set.

        ``check_model=False`` is for ``reindex``: it opens a store embedded with another model.
        ``check_derived=False`` is for ``rebuild``, ``reindex`` and ``migrate``'s source: the derived
        tables are not checked, since they are recreated next (or not read).
        """
        embedder = embedder or load_embedder(settings)
        store = open_store(settings, embedder.dim, check_derived=check_derived)
        try:
            if settings.checkpoints is not None:  # one indexed lookup per checkpointed (chain, seq)
                check_checkpoints(store, checkpoint_files([settings.checkpoints]))
            signer = LocalSigner.from_settings(store, settings)
            reranker = load_reranker(settings)
            return cls(store, embedder, reranker, settings=settings, check_model=check_model, signer=signer)
        except BaseException:
            store.close()
            raise

    @property
    def reranker(self) -> Reranker | None:
        return self.ctx.reranker

    @reranker.setter
    def reranker(self, reranker: Reranker | None) -> None:
        self.ctx.reranker = reranker

    def caller_now(self, caller: Caller) -> Caller:
        """``caller`` with the chains that do not verify (the store's ``damaged``) refused, reading
        the store's branches as they stand (each chain's read set: docs/branches.md)."""
        return caller.refusing(self.store.damaged).branching(*graph_views(self.store.branch_graph()))

    @contextmanager
    def sealing(self, caller: Caller, seal: Seal | None) -> Iterator[Seal]:
        """The seal of one write by ``caller``: ``seal`` when given; else a fresh one, signed by
        the local signer (held for the write) when the caller is its agent, else unsigned."""
        if seal is not None:
            yield seal
        elif self.signer is not None and caller.agent_id == self.signer.agent:
            with self.signer.sealing() as signed:
                yield signed
        else:
            yield Seal()

    def warm_up(self) -> None:
        self.ctx.warm_up()

    def close(self) -> None:
        self.federation.close()
        self.ctx.close()

    def _open_federated(self, url: str) -> Memory:
        """A PostgreSQL store another memory of a federated search lives in, with this embedder."""
        settings = replace(
            self.settings, database_url=url, signing_key=None, checkpoints=None, reranker="off", federation={}
        )
        return Memory.open(settings, self.embedder)

    # ------------------------------------------------------------ review queue (mentis.service.review)

    def propose(
        self,
        caller: Caller,
        drafts: Sequence[tuple[RecordAttemptInput | AppendThoughtInput, SourceEpisode]],
    ) -> ProposeResult:
        return self.review.propose(self.caller_now(caller), drafts)

    def list_proposals(self, caller: Caller, req: ListProposalsInput) -> ListProposalsResult:
        return self.review.list_proposals(self.caller_now(caller), req)

    def count_pending_proposals(self, caller: Caller) -> int:
        return self.review.count_pending(self.caller_now(caller))

    def show_proposal(self, caller: Caller, req: ShowProposalInput) -> ProposalOut:
        return self.review.show_proposal(self.caller_now(caller), req)

    def accept_proposal(
        self, caller: Caller, req: AcceptProposalInput, *, seal: Seal | None = None
    ) -> AcceptProposalResult:
        with self.sealing(caller, seal) as sealed:
            return self.review.accept_proposal(self.caller_now(caller), req, sealed)

    def reject_proposal(self, caller: Caller, req: RejectProposalInput) -> RejectProposalResult:
        return self.review.reject_proposal(self.caller_now(caller), req)

    # ------------------------------------------------------------ attempts (mentis.service.attempts)

    def record_attempt(
        self, caller: Caller, req: RecordAttemptInput, *, seal: Seal | None = None
    ) -> RecordAttemptResult:
        with self.sealing(caller, seal) as sealed:
            return self.attempts.record_attempt(
                self.caller_now(caller), self.branches.resolve(req, write=True), sealed
            )

    def search(self, caller: Caller, req: SearchInput) -> SearchResult:
        return self.attempts.search(self.caller_now(caller), self.branches.resolve(req))

    def federated_search(self, caller: Caller, req: FederatedSearchInput) -> FederatedSearchResult:
        """``search`` over this memory and the configured others, fused by rank
        (:mod:`mentis.service.federation`)."""
        return self.federation.search(caller, req)

    def recall(self, caller: Caller, req: RecallInput) -> RecallResult:
        return self.attempts.recall(self.caller_now(caller), req)

    def mark_conclusion_outdated(
        self, caller: Caller, req: MarkOutdatedInput, *, seal: Seal | None = None
    ) -> MarkOutdatedResult:
        with self.sealing(caller, seal) as sealed:
            req = self.branches.route(req, req.attempt_id)
            return self.attempts.mark_conclusion_outdated(self.caller_now(caller), req, sealed)

    def forget_attempt(self, caller: Caller, req: ForgetInput, *, seal: Seal | None = None) -> ForgetResult:
        with self.sealing(caller, seal) as sealed:
            req = self.branches.route(req, req.attempt_id)
            return self.attempts.forget_attempt(self.caller_now(caller), req, sealed)

    def stale_attempts(self, caller: Caller, req: StaleInput) -> StaleResult:
        """Passed attempts whose recorded files differ from ``req.current_file_hashes``."""
        return stale_attempts(self.store, self.caller_now(caller), req)

    def publish(self, caller: Caller, req: PublishInput, *, seal: Seal | None = None) -> PublishResult:
        """Make a private attempt or thought readable to a wider scope (its writer or an admin)."""
        with self.sealing(caller, seal) as sealed:
            return publish(self.ctx, self.caller_now(caller), req, sealed)

    def visibilities(self, caller: Caller, record_ids: list[str]) -> dict[str, str]:
        """Who may read each of these attempts and thoughts now (repository, agent or session),
        for those the caller may read (the dashboard's badges)."""
        return visibilities(self.ctx, self.caller_now(caller), record_ids)

    def stats(self, caller: Caller, req: StatsInput) -> StatsResult:
        """What the memory holds, counted over the caller's repositories."""
        return collect_stats(self.store, self.caller_now(caller), req)

    # ------------------------------------------------------------ branches (mentis.service.branches)

    def branch_from(self, caller: Caller, req: BranchFromInput, *, seal: Seal | None = None) -> BranchInfo:
        """Fork a branch chain from a repository's chain (or a branch of it) at a head of it."""
        with self.sealing(caller, seal) as sealed:
            return self.branches.branch_from(self.caller_now(caller), req, sealed)

    def ensure_branch(
        self, caller: Caller, repository: str, branch: str, *, seal: Seal | None = None
    ) -> BranchInfo:
        """The branch, created at its repository's head now when it does not exist (idempotent)."""
        with self.sealing(caller, seal) as sealed:
            return self.branches.ensure_branch(self.caller_now(caller), repository, branch, sealed)

    def list_branches(self, caller: Caller, repository: str) -> list[BranchInfo]:
        """The branches of ``repository``, by name."""
        return self.branches.list_branches(
            self.caller_now(caller), ListBranchesInput(repository=repository)
        ).branches

    def merge_branch(self, caller: Caller, req: MergeBranchInput, *, seal: Seal | None = None) -> MergeReport:
        """Merge a branch chain into its parent line (or another branch): one entry, nothing copied."""
        with self.sealing(caller, seal) as sealed:
            return self.branches.merge_branch(self.caller_now(caller), req, sealed)

    # ------------------------------------------------------------ thoughts (mentis.service.thoughts)

    def append_thought(
        self,
        caller: Caller,
        req: AppendThoughtInput,
        *,
        link_duplicates: bool = True,
        seal: Seal | None = None,
    ) -> AppendThoughtResult:
        """``link_duplicates=False`` stores a near-duplicate without superseding the thought it repeats."""
        with self.sealing(caller, seal) as sealed:
            caller, req = self.caller_now(caller), self.branches.resolve(req, write=True)
            return self.thoughts.append_thought(caller, req, sealed, link_duplicates=link_duplicates)

    def append_retrospective(
        self, caller: Caller, req: AppendRetrospectiveInput, *, seal: Seal | None = None
    ) -> AppendRetrospectiveResult:
        """A Retrospective thought summing up a task (:mod:`mentis.service.retrospectives`)."""
        with self.sealing(caller, seal) as sealed:
            return append_retrospective(self.thoughts, self.caller_now(caller), req, sealed)

    def forget_thought(
        self, caller: Caller, req: ForgetThoughtInput, *, seal: Seal | None = None
    ) -> ForgetThoughtResult:
        with self.sealing(caller, seal) as sealed:
            req = self.branches.route(req, req.thought_id)
            return self.thoughts.forget_thought(self.caller_now(caller), req, sealed)

    def search_thoughts(self, caller: Caller, req: SearchThoughtsInput) -> SearchThoughtsResult:
        return self.thoughts.search_thoughts(self.caller_now(caller), req)

    def get_thought(self, caller: Caller, req: GetThoughtInput) -> ThoughtOut:
        return self.thoughts.get_thought(self.caller_now(caller), req)

    def traverse_thoughts(self, caller: Caller, req: TraverseInput) -> TraverseResult:
        return self.thoughts.traverse_thoughts(self.caller_now(caller), req)

    def context_bundle(self, caller: Caller, req: ContextBundleInput) -> ContextBundleResult:
        return self.thoughts.context_bundle(self.caller_now(caller), req)

    def recent_context(self, caller: Caller, req: RecentContextInput) -> RecentContextResult:
        return self.thoughts.recent_context(self.caller_now(caller), req)

    def export_memory_md(self, caller: Caller, req: MemoryMdExportInput) -> MemoryMdExportResult:
        return self.thoughts.export_memory_md(self.caller_now(caller), req)

    def import_memory_md(
        self, caller: Caller, req: MemoryMdImportInput, *, seal: Seal | None = None
    ) -> MemoryMdImportResult:
        with self.sealing(caller, seal) as sealed:
            return self.thoughts.import_memory_md(self.caller_now(caller), req, sealed)

    # ------------------------------------------------------------ skills (mentis.service.skills)

    def upload_skill(
        self, caller: Caller, req: UploadSkillInput, *, seal: Seal | None = None
    ) -> UploadSkillResult:
        with self.sealing(caller, seal) as sealed:
            return self.skills.upload_skill(self.caller_now(caller), req, sealed)

    def read_skill(self, caller: Caller, req: ReadSkillInput) -> ReadSkillResult:
        return self.skills.read_skill(self.caller_now(caller), req)

    def search_skills(self, caller: Caller, req: SearchSkillsInput) -> SearchSkillsResult:
        return self.skills.search_skills(self.caller_now(caller), req)

    def list_skills(self, caller: Caller, req: ListSkillsInput) -> ListSkillsResult:
        return self.skills.list_skills(self.caller_now(caller), req)

    def skill_versions(self, caller: Caller, req: SkillVersionsInput) -> SkillVersionsResult:
        return self.skills.skill_versions(self.caller_now(caller), req)

    def review_skill(self, caller: Caller, req: SkillVersionsInput) -> SkillReview:
        """A skill's versions with their texts and diffs, for people reviewing it (the dashboard)."""
        return self.skills.review_skill(self.caller_now(caller), req)

    def deprecate_skill(
        self, caller: Caller, req: SkillStatusInput, *, seal: Seal | None = None
    ) -> SkillStatusResult:
        with self.sealing(caller, seal) as sealed:
            return self.skills.deprecate_skill(self.caller_now(caller), req, sealed)

    def revoke_skill(
        self, caller: Caller, req: RevokeSkillInput, *, seal: Seal | None = None
    ) -> SkillStatusResult:
        with self.sealing(caller, seal) as sealed:
            return self.skills.revoke_skill(self.caller_now(caller), req, sealed)

    def delete_skill(
        self, caller: Caller, req: DeleteSkillInput, *, seal: Seal | None = None
    ) -> DeleteSkillResult:
        with self.sealing(caller, seal) as sealed:
            return self.skills.delete_skill(self.caller_now(caller), req, sealed)

    def export_skills(self, caller: Caller, repository: str, target: Path) -> SkillsExportResult:
        return self.skills.export_skills(self.caller_now(caller), repository, target)

    def import_skills(
        self, caller: Caller, repository: str, source: Path, *, seal: Seal | None = None
    ) -> SkillsImportResult:
        with self.sealing(caller, seal) as sealed:
            return self.skills.import_skills(self.caller_now(caller), repository, source, sealed)

    # ------------------------------------------------------------ the agent registry (mentis.service.agents)

    def register_agent(
        self, caller: Caller, req: RegisterAgentInput, *, seal: Seal | None = None
    ) -> AgentResult:
        with self.sealing(caller, seal) as sealed:
            return self.agents.register_agent(self.caller_now(caller), req, sealed)

    def add_agent_key(
        self, caller: Caller, req: AddAgentKeyInput, *, seal: Seal | None = None
    ) -> AgentResult:
        with self.sealing(caller, seal) as sealed:
            return self.agents.add_agent_key(self.caller_now(caller), req, sealed)

    def revoke_agent_key(
        self, caller: Caller, req: RevokeAgentKeyInput, *, seal: Seal | None = None
    ) -> AgentResult:
        with self.sealing(caller, seal) as sealed:
            return self.agents.revoke_agent_key(self.caller_now(caller), req, sealed)

    def disable_agent(
        self, caller: Caller, req: DisableAgentInput, *, seal: Seal | None = None
    ) -> AgentResult:
        with self.sealing(caller, seal) as sealed:
            return self.agents.disable_agent(self.caller_now(caller), req, sealed)

    def list_agents(self, caller: Caller, req: ListAgentsInput) -> ListAgentsResult:
        return self.agents.list_agents(self.caller_now(caller), req)

    def show_agent(self, caller: Caller, req: ShowAgentInput) -> AgentOut:
        return self.agents.show_agent(self.caller_now(caller), req)

    # ------------------------------------------------------------ entity types (mentis.service.entity_types)

    def upsert_entity_type(
        self, caller: Caller, req: UpsertEntityTypeInput, *, seal: Seal | None = None
    ) -> UpsertEntityTypeResult:
        with self.sealing(caller, seal) as sealed:
            return self.entity_types.upsert_entity_type(self.caller_now(caller), req, sealed)

    def list_entity_types(self, caller: Caller, req: ListEntityTypesInput) -> ListEntityTypesResult:
        return self.entity_types.list_entity_types(self.caller_now(caller), req)

    # ------------------------------------------------------------ webhooks (mentis.service.webhooks)

    def create_webhook(self, caller: Caller, req: CreateWebhookInput) -> CreateWebhookResult:
        return self.webhooks.create_webhook(self.caller_now(caller), req)

    def list_webhooks(self, caller: Caller, req: ListWebhooksInput) -> ListWebhooksResult:
        return self.webhooks.list_webhooks(self.caller_now(caller), req)

    def delete_webhook(self, caller: Caller, req: WebhookRef) -> DeleteWebhookResult:
        return self.webhooks.delete_webhook(self.caller_now(caller), req)

    def webhook_deliveries(self, caller: Caller, req: DeliveriesInput) -> DeliveriesResult:
        return self.webhooks.webhook_deliveries(self.caller_now(caller), req)

    def redeliver_webhook(self, caller: Caller, req: RedeliverInput) -> RedeliverResult:
        return self.webhooks.redeliver_webhook(self.caller_now(caller), req)

    # ------------------------------------------------------------ browsing (mentis.service.browse)

    def repository_overview(self, caller: Caller) -> list[RepositoryRow]:
        return self.browse.repository_overview(self.caller_now(caller))

    def task_page(
        self,
        caller: Caller,
        repository: str,
        *,
        status: str | None = None,
        agent: str | None = None,
        page: int = 1,
        per_page: int = 25,
    ) -> TaskPage:
        caller = self.caller_now(caller)
        return self.browse.task_page(
            caller, repository, status=status, agent=agent, page=page, per_page=per_page
        )

    def task_timeline(
        self, caller: Caller, repository: str, task_id: str, current_commit: str | None = None
    ) -> Timeline:
        return self.browse.task_timeline(self.caller_now(caller), repository, task_id, current_commit)

    # ------------------------------------------------------------ the whole ledger (transfer, integrity)

    def verify_integrity(
        self, caller: Caller, repository: str | None = None, signatures: bool = False
    ) -> VerifyResult:
        return self.integrity.verify_integrity(self.caller_now(caller), repository, signatures)

    def checkpoint(self, caller: Caller, key: Path | None, repositories: Sequence[str] = ()) -> Made:
        with self.sealing(caller, None) as sealed:
            return self.checkpoints.checkpoint(self.caller_now(caller), key, repositories, sealed)

    def verify_checkpoints(self, caller: Caller, paths: Sequence[Path]) -> list[Held]:
        return self.checkpoints.verify_checkpoints(self.caller_now(caller), paths)

    def export(
        self,
        caller: Caller,
        out: IO[bytes],
        repository: str | None = None,
        progress: Callable[[int], None] | None = None,
        *,
        skip_damaged: bool = False,
    ) -> int:
        caller = self.caller_now(caller)
        return self.transfer.export(caller, out, repository, progress, skip_damaged=skip_damaged)

    def import_(
        self, caller: Caller, lines: Iterable[bytes], progress: Callable[[int], None] | None = None
    ) -> int:
        return self.transfer.import_(self.caller_now(caller), lines, progress)

    def rebuild(self, progress: Callable[[int], None] | None = None) -> int:
        return self.integrity.rebuild(progress)

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        return self.integrity.reindex(progress)


def open_memory(settings: Settings | None = None, embedder: Embedder | None = None) -> Memory:
    return Memory.open(settings or Settings.from_env(), embedder)


__all__ = ["Caller", "Memory", "open_memory"]
