"""The service: every operation lives here once; transports only parse, call and format.

``Memory`` owns one store and one embedder for the life of a process. Each operation takes
the :class:`Caller` (who is asking, and what they may touch) and a validated input model from
``mentis.api``; it authorises, embeds before it writes, and returns an output model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson

from mentis import retrieval
from mentis.api.attempts import (
    AttemptPreview,
    CorrectionOut,
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
    TaskResult,
)
from mentis.api.common import LedgerRef, Rejection, ScoreParts
from mentis.api.stats import StatsInput, StatsResult
from mentis.api.verify import ChainResult, VerifyResult
from mentis.config import Settings
from mentis.errors import Conflict, IntegrityError, InvalidInput, NotFound, RerankFailed
from mentis.ledger.bodies import AttemptBody, CheckBody, CodeContextBody, CorrectionBody
from mentis.ledger.bodies import attempt_text as attempt_text
from mentis.ledger.entry import Entry
from mentis.ledger.signing import write_at, write_id
from mentis.providers.embed import Embedder, load_embedder
from mentis.providers.rerank import Reranker, RerankItem, apply_rerank, load_reranker
from mentis.retrieval import pipeline, titles
from mentis.service.agents import AgentOps
from mentis.service.browse import BrowseOps
from mentis.service.context import (
    Caller,
    ServiceContext,
    left_out_note,
    may_read,
    may_write,
    open_store,
    secret_warnings,
)
from mentis.service.local_signing import LocalSigning
from mentis.service.skills import SkillOps
from mentis.service.staleness import stale_attempts
from mentis.service.stats import collect_stats
from mentis.service.thoughts import ThoughtOps, rejection_out, stored_reasserts
from mentis.service.transfer import TransferOps, read_export
from mentis.store.protocol import Store, StoredAttempt

log = logging.getLogger(__name__)

RECALL_MAX_ROWS = 100
RECALL_MAX_BYTES = 512_000
RECALL_TIMEOUT_S = 5.0


class AttemptOps:
    """The attempt operations of Memory, over the shared :class:`ServiceContext`; rejected
    conclusions are the thought operations' (``thoughts``)."""

    def __init__(self, ctx: ServiceContext, thoughts: ThoughtOps) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.thoughts = thoughts

    def _owned_attempt(self, caller: Caller, repository: str, attempt_id: str) -> None:
        found = self.store.find_attempt(attempt_id)
        if found is None or found[0] != repository or not caller.sees(found[0]):
            raise NotFound(
                f"no attempt {attempt_id} in repository {repository}; search or recall to find its id"
            )
        if found[1]:
            raise Conflict(f"attempt {attempt_id} in {repository} was forgotten; its content is erased")

    # ------------------------------------------------------------ record_attempt

    def record_attempt(self, caller: Caller, req: RecordAttemptInput) -> RecordAttemptResult:
        may_write(caller, req.repository)
        attempt_id = write_id()
        at = write_at()
        ctx = None if req.code_context is None else CodeContextBody(**req.code_context.model_dump())
        body = AttemptBody(
            attempt_id=attempt_id,
            repository=req.repository,
            task_id=req.task_id,
            agent_id=caller.agent_id,
            created_at=at,
            action=req.action,
            observation=req.observation,
            files=list(req.files),
            tags=list(req.tags),
            task_title=req.task_title,
            session_id=req.session_id or caller.session_id,
            inference=req.inference,
            code_context=ctx,
            check=None if req.check is None else CheckBody(**req.check.model_dump()),
        )
        conclusion = body.conclusion
        if self.store.has_rejections(req.repository):
            vector, conclusion_vec = self.ctx.embed([body.embed_text, conclusion])
            reasserts = self.thoughts.reassertions(req.repository, conclusion, conclusion_vec)
        else:
            vector, reasserts = self.ctx.embed([body.embed_text])[0], []
        if reasserts:
            body = replace(body, reasserts=stored_reasserts(reasserts))
        entry = self.store.append_attempt(
            req.repository, attempt_id, at, caller.agent_id, body.to_json(), vector
        )
        texts = [
            req.action,
            req.observation,
            req.inference or "",
            req.check.output or "" if req.check else "",
        ]
        return RecordAttemptResult(
            attempt_id=attempt_id,
            status=body.status,
            ledger=_ref(entry),
            warnings=self.thoughts.reassertion_warnings(reasserts) + secret_warnings(*texts),
            reasserts=[rejection_out(r) for r in reasserts],
        )

    # ------------------------------------------------------------ search

    def search(self, caller: Caller, req: SearchInput) -> SearchResult:
        may_read(caller, req.repository)
        scope = caller.search_scope(req.repository, self.store.repositories)
        known = titles.KeyCache(self.store.attempt_keys)  # asked once per row, for titles and grouping
        ranked, has_terms = pipeline.candidates(
            req.query,
            scope,
            self.ctx.embed_one,
            self.store.lexical,
            self.store.vector,
            self.store.attempt_edges,
            pool=self.ctx.pool,
            title_lexical=self.store.title_lexical,
            task_of=lambda rows: {r: k[:2] for r, k in known.update_from(rows).items()},
        )
        keys = known.update_from([s.rowid for s in ranked])
        if caller.limited:  # a repository created since the scope was listed
            keys = {r: k for r, k in keys.items() if caller.sees(k[0])}
        hits = retrieval.group_tasks(ranked, {r: (k[0], k[1]) for r, k in keys.items()}, req.limit)
        previews = self.store.load_attempts([h.attempts[0].rowid for h in hits])
        info = self.store.task_info([(h.repository, h.task_id) for h in hits])
        base = (
            "fused (bm25 + vector, reciprocal rank) + graph"
            if has_terms
            else "vector + graph (no bm25 terms)"
        )
        hits, usefulness, ranking = self._rerank(req.query, hits, previews, info, base)
        current = dict(req.current_file_hashes or {})
        tasks = []
        for hit in hits:
            best = hit.attempts[0]
            stored = previews.get(best.rowid)
            if stored is None:  # forgotten while we ranked
                continue
            title, count = info.get((hit.repository, hit.task_id), (None, 0))
            matched = [keys[a.rowid][2] for a in hit.attempts]
            tasks.append(
                TaskResult(
                    repository=hit.repository,
                    task_id=hit.task_id,
                    title=title,
                    score=round(best.final, 6),
                    score_parts=ScoreParts(**best.parts(), usefulness=usefulness.get(best.rowid)),
                    attempt=_preview(
                        stored,
                        current if req.current_file_hashes is not None else None,
                        self.thoughts.live_reasserts(stored.body),
                    ),
                    matched_attempt_ids=matched,
                    attempt_count=count,
                )
            )
        return SearchResult(tasks=tasks, ranking=ranking + left_out_note(caller))

    def _rerank(
        self,
        query: str,
        hits: list[retrieval.TaskHit],
        previews: dict[int, StoredAttempt],
        info: dict[tuple[str, str], tuple[str | None, int]],
        ranking: str,
    ) -> tuple[list[retrieval.TaskHit], dict[int, float], str]:
        """Optional LLM usefulness rerank of the tasks: all or nothing, fused order on failure."""
        if self.ctx.reranker is None or len(hits) < 2:
            return hits, {}, ranking
        items = []
        for h in hits:
            stored = previews.get(h.attempts[0].rowid)
            b = None if stored is None else stored.body
            title = info.get((h.repository, h.task_id), (None, 0))[0] or h.task_id
            parts = (title,) if b is None else (title, b.action, b.observation, b.inference)
            text = "\n".join(p for p in parts if p)
            items.append(RerankItem(key=f"{h.repository}\x00{h.task_id}", text=text))
        try:
            scores = self.ctx.reranker.rerank(query, items)
        except RerankFailed as exc:
            return hits, {}, f"{ranking} (rerank failed: {exc.reason})"
        order = apply_rerank(list(zip(hits, scores, strict=True)), scores)
        return (
            [h for h, _ in order],
            {h.attempts[0].rowid: s for h, s in order},
            f"{ranking}, llm usefulness rerank",
        )

    # ------------------------------------------------------------ recall

    def recall(self, caller: Caller, req: RecallInput) -> RecallResult:
        history = req.repository is not None or req.task_id is not None
        if history and (req.repository is None or req.task_id is None):
            raise InvalidInput("recall: a task's history needs both repository and task_id", field="task_id")
        if req.sql is not None and history:
            raise InvalidInput("recall: give either sql or repository + task_id, not both", field="sql")
        if req.sql is None and not history:
            raise InvalidInput("recall: give sql, or repository + task_id for a task's history", field="sql")
        if history:
            assert req.repository is not None and req.task_id is not None
            return self._history(caller, req.repository, req.task_id)
        assert req.sql is not None
        result = self.store.run_sql(
            req.sql,
            req.params,
            visible=caller.sees,
            max_rows=RECALL_MAX_ROWS,
            max_bytes=RECALL_MAX_BYTES,
            timeout_s=RECALL_TIMEOUT_S,
        )
        return RecallResult(
            columns=result.columns,
            rows=result.rows,
            truncated=result.truncated,
            truncation_reason=result.truncation_reason,
        )

    HISTORY_COLUMNS = (
        "attempt_id",
        "created_at",
        "agent_id",
        "status",
        "action",
        "observation",
        "inference",
        "files",
        "commit",
        "branch",
        "check_command",
        "check_exit_code",
        "check_output",
        "tags",
        "corrections",
    )

    def _history(self, caller: Caller, repository: str, task_id: str) -> RecallResult:
        may_read(caller, repository)
        attempts = self.store.task_history(repository, task_id)
        if not attempts:
            raise NotFound(
                f"no task {task_id!r} in repository {repository!r} (or all its attempts were forgotten)"
            )
        rows: list[list[Any]] = []
        size = 2
        truncated, reason = False, None
        for a in attempts:
            b = a.body
            ctx, check = b.code_context or CodeContextBody(), b.check
            row = [
                b.attempt_id,
                b.created_at,
                b.agent_id,
                b.status,
                b.action,
                b.observation,
                b.inference,
                b.files,
                ctx.commit,
                ctx.branch,
                check and check.command,
                check and check.exit_code,
                check and check.output,
                b.tags,
                [_correction(c).model_dump() for c in a.corrections],
            ]
            size += len(orjson.dumps(row)) + 1
            if size > RECALL_MAX_BYTES:
                truncated, reason = True, f"more than {RECALL_MAX_BYTES:,} bytes"
                break
            rows.append(row)
        return RecallResult(
            columns=list(self.HISTORY_COLUMNS),
            rows=rows,
            truncated=truncated,
            truncation_reason=reason,
        )

    def stale_attempts(self, caller: Caller, req: StaleInput) -> StaleResult:
        """Passed attempts whose recorded files differ from ``req.current_file_hashes``."""
        return stale_attempts(self.store, caller, req)

    # ------------------------------------------------------------ corrections and forgetting

    def mark_conclusion_outdated(self, caller: Caller, req: MarkOutdatedInput) -> MarkOutdatedResult:
        may_write(caller, req.repository)
        self._owned_attempt(caller, req.repository, req.attempt_id)
        at = write_at()
        body = CorrectionBody(
            attempt_id=req.attempt_id,
            repository=req.repository,
            reason=req.reason,
            at=at,
            agent_id=caller.agent_id,
            latest_commit=req.latest_commit,
        )
        conclusion = self.store.attempt_conclusion_text(req.repository, req.attempt_id)
        if conclusion is None:
            raise NotFound(f"no attempt {req.attempt_id} in repository {req.repository}")
        vec = self.ctx.embed([conclusion])[0]
        entry, count = self.store.append_correction(
            req.repository, write_id(), at, caller.agent_id, body.to_json(), vec
        )
        return MarkOutdatedResult(
            attempt_id=req.attempt_id,
            correction=_correction(body),
            corrections_count=count,
            ledger=_ref(entry),
        )

    def forget_attempt(self, caller: Caller, req: ForgetInput) -> ForgetResult:
        may_write(caller, req.repository)
        self._owned_attempt(caller, req.repository, req.attempt_id)
        entry = self.store.forget_attempt(
            req.repository,
            write_id(),
            write_at(),
            caller.agent_id,
            req.attempt_id,
            req.reason,
        )
        return ForgetResult(forgotten=True, attempt_id=req.attempt_id, ledger=_ref(entry))

    # ------------------------------------------------------------ integrity, export, import, rebuild

    def verify_integrity(
        self, caller: Caller, repository: str | None = None, signatures: bool = False
    ) -> VerifyResult:
        """Verify the ledger chain by chain (with ``signatures``, every signature rather than each
        stream's last); IntegrityError naming each chain the caller may read that does not verify
        (from then on its repository is refused, as at open)."""
        may_read(caller, repository)
        try:
            verified = self.store.verify_chains(signatures=signatures)
        except IntegrityError as exc:
            if exc.chain is None or caller.covers(exc.chain):
                raise
            raise IntegrityError(
                "the store does not verify (in a repository this caller may not read); "
                "ask its administrator to run `mentis verify-integrity`"
            ) from None
        caller = self.ctx.narrow(caller)
        damaged = caller.left_out(repository)
        reports = [
            r for r in verified if caller.sees(r.chain) and (repository is None or r.chain == repository)
        ]
        if damaged:
            causes = [caller.refused[c] for c in damaged]
            found = "; ".join(f"chain {c.chain!r} seq {c.seq}: {c.what}" for c in causes)
            raise IntegrityError(
                f"{len(causes)} chain(s) do not verify: {found}. Their repositories are refused; the other "
                f"{len(reports)} chain(s) verify and are served. Run `mentis doctor` for how to recover",
                chain=causes[0].chain,
                seq=causes[0].seq,
                what=causes[0].what,
            )
        if repository is not None and not reports:
            raise NotFound(f"no chain for repository {repository!r}")
        return VerifyResult(ok=True, chains=[ChainResult(**r.to_json()) for r in reports])

    def stats(self, caller: Caller, req: StatsInput) -> StatsResult:
        """What the memory holds, counted over the caller's repositories (``mentis.service.stats``)."""
        return collect_stats(self.store, caller, req)

    def rebuild(self, progress: Callable[[int], None] | None = None) -> int:
        return self.store.rebuild(self.ctx.embed, progress)

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Re-embed every attempt, thought and rejected conclusion with the configured model."""
        count = self.store.rebuild(self.ctx.embed, progress)
        self.store.set_meta("embed_model", self.ctx.embedder.model_id)
        self.store.set_meta("embed_dim", str(self.ctx.embedder.dim))
        return count


def _ref(entry: Entry) -> LedgerRef:
    return LedgerRef(seq=entry.seq, hash=entry.hash)


def _correction(c: CorrectionBody) -> CorrectionOut:
    return CorrectionOut(reason=c.reason, latest_commit=c.latest_commit, at=c.at, agent_id=c.agent_id)


def _preview(
    stored: StoredAttempt, current: dict[str, str] | None, reasserts: list[Rejection]
) -> AttemptPreview:
    b = stored.body
    return AttemptPreview(
        attempt_id=b.attempt_id,
        action=b.action,
        observation=b.observation,
        inference=b.inference,
        status=b.status,
        files=b.files,
        commit=b.commit,
        created_at=b.created_at,
        agent_id=b.agent_id,
        correction=_correction(stored.corrections[-1]) if stored.corrections else None,
        corrections_count=len(stored.corrections),
        stale_files=None if current is None else b.stale_files(current),
        reasserts=reasserts,
    )


class Memory:
    """The service: one :class:`ServiceContext` (store, embedder, reranker, settings) and the
    attempt, thought and browsing operations composed over it, each exposed here by name."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        reranker: Reranker | None = None,
        *,
        settings: Settings | None = None,
        check_model: bool = True,
    ) -> None:
        self.ctx = ServiceContext(store, embedder, reranker, settings=settings, check_model=check_model)
        self.thoughts = ThoughtOps(self.ctx)
        self.attempts = AttemptOps(self.ctx, self.thoughts)
        self.browse = BrowseOps(self.ctx)
        self.skills = s = SkillOps(self.ctx)
        self.agents = g = AgentOps(self.ctx)
        a, t, b = self.attempts, self.thoughts, self.browse
        # Every operation that takes a caller is called with the store's damaged chains refused.
        guard = self.ctx.guarded
        self.upload_skill, self.read_skill = guard(s.upload_skill), guard(s.read_skill)
        self.search_skills, self.list_skills = guard(s.search_skills), guard(s.list_skills)
        self.skill_versions, self.delete_skill = guard(s.skill_versions), guard(s.delete_skill)
        self.deprecate_skill, self.revoke_skill = guard(s.deprecate_skill), guard(s.revoke_skill)
        self.export_skills, self.import_skills = guard(s.export_skills), guard(s.import_skills)
        self.record_attempt, self.search = guard(a.record_attempt), guard(a.search)
        self.recall = guard(a.recall)
        self.stale_attempts, self.stats = guard(a.stale_attempts), guard(a.stats)
        self.mark_conclusion_outdated = guard(a.mark_conclusion_outdated)
        self.forget_attempt = guard(a.forget_attempt)
        self.transfer = x = TransferOps(self.ctx)
        self.verify_integrity = guard(a.verify_integrity)
        self.export, self.import_ = guard(x.export), guard(x.import_)
        self.rebuild, self.reindex = a.rebuild, a.reindex
        self.append_thought, self.forget_thought = guard(t.append_thought), guard(t.forget_thought)
        self.search_thoughts, self.get_thought = guard(t.search_thoughts), guard(t.get_thought)
        self.traverse_thoughts, self.context_bundle = guard(t.traverse_thoughts), guard(t.context_bundle)
        self.recent_context = guard(t.recent_context)
        self.export_memory_md, self.import_memory_md = guard(t.export_memory_md), guard(t.import_memory_md)
        self.repository_overview, self.task_page = guard(b.repository_overview), guard(b.task_page)
        self.task_timeline = guard(b.task_timeline)
        self.warm_up, self.close = self.ctx.warm_up, self.ctx.close
        self.register_agent, self.add_agent_key = guard(g.register_agent), guard(g.add_agent_key)
        self.revoke_agent_key, self.disable_agent = guard(g.revoke_agent_key), guard(g.disable_agent)
        self.list_agents, self.show_agent = guard(g.list_agents), guard(g.show_agent)
        self.local_signing = LocalSigning.from_settings(store, self.ctx.settings)
        if self.local_signing is not None:  # MENTIS_SIGNING_KEY: its agent's writes are signed
            self.ctx.settings = self.local_signing.install(self, self.ctx.settings)
        self.store, self.embedder, self.settings = store, embedder, self.ctx.settings

    @classmethod
    def open(
        cls,
        settings: Settings,
        embedder: Embedder | None = None,
        *,
        check_model: bool = True,
        check_derived: bool = True,
    ) -> Memory:
        """Open and verify the store (refusing a store that does not verify), load the embedder.

        ``check_model=False`` is for ``reindex``: it opens a store embedded with another model.
        ``check_derived=False`` is for ``rebuild``, ``reindex`` and ``migrate``'s source: the derived
        tables are not checked, since they are recreated next (or not read).
        """
        embedder = embedder or load_embedder(settings)
        store = open_store(settings, embedder.dim, check_derived=check_derived)
        try:
            return cls(store, embedder, load_reranker(settings), settings=settings, check_model=check_model)
        except BaseException:
            store.close()
            raise

    @property
    def reranker(self) -> Reranker | None:
        return self.ctx.reranker

    @reranker.setter
    def reranker(self, reranker: Reranker | None) -> None:
        self.ctx.reranker = reranker


def open_memory(settings: Settings | None = None, embedder: Embedder | None = None) -> Memory:
    return Memory.open(settings or Settings.from_env(), embedder)


__all__ = ["Caller", "Memory", "attempt_text", "open_memory", "read_export"]
