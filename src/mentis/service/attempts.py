"""The attempt operations: record an attempt, search tasks, recall a task's history or run
read-only SQL, mark a conclusion outdated, forget an attempt.

Composed into :class:`mentis.service.memory.Memory`. Each operation takes the :class:`Caller` (who
is asking, and what they may touch) and a validated input model from ``mentis.api``; it
authorises, embeds before it writes, and returns an output model. A write also takes the
:class:`~mentis.store.seal.Seal` its ledger entry is made with (Memory chooses it).
"""

from __future__ import annotations

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
    TaskResult,
)
from mentis.api.common import LedgerRef, Rejection, ScoreParts
from mentis.errors import Conflict, InvalidInput, NotFound, RerankFailed
from mentis.ledger.bodies import AttemptBody, CheckBody, CodeContextBody, CorrectionBody
from mentis.providers.rerank import RerankItem, apply_rerank
from mentis.retrieval import pipeline, titles
from mentis.service.access import Caller, left_out_note, may_read, may_write, written_visibility
from mentis.service.context import ServiceContext, secret_warnings
from mentis.service.retrospectives import fresh_retrospectives
from mentis.service.thoughts import ThoughtOps, rejection_out, stored_reasserts
from mentis.store.protocol import StoredAttempt
from mentis.store.seal import Seal

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
        scope = self.store.record_scopes([attempt_id]).get(attempt_id, repository)
        if found is None or found[0] != repository or not caller.reads(found[0], scope):
            raise NotFound(
                f"no attempt {attempt_id} in repository {repository}; search or recall to find its id"
            )
        if found[1]:
            raise Conflict(f"attempt {attempt_id} in {repository} was forgotten; its content is erased")

    # ------------------------------------------------------------ record_attempt

    def record_attempt(self, caller: Caller, req: RecordAttemptInput, seal: Seal) -> RecordAttemptResult:
        may_write(caller, req.repository)
        attempt_id, at = seal.record_id(), seal.time()
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
            visibility=written_visibility(req.visibility, req.session_id or caller.session_id),
            inference=req.inference,
            code_context=ctx,
            check=None if req.check is None else CheckBody(**req.check.model_dump()),
        )
        conclusion = body.conclusion
        if self.store.has_rejections(req.repository):
            vector, conclusion_vec = self.ctx.embed([body.embed_text, conclusion])
            reasserts = self.thoughts.reassertions(req.repository, conclusion, conclusion_vec, body.scope)
        else:
            vector, reasserts = self.ctx.embed([body.embed_text])[0], []
        if reasserts:
            body = replace(body, reasserts=stored_reasserts(reasserts))
        entry = self.store.append_attempt(body, vector, seal)
        texts = [
            req.action,
            req.observation,
            req.inference or "",
            req.check.output or "" if req.check else "",
        ]
        return RecordAttemptResult(
            attempt_id=attempt_id,
            status=body.status,
            ledger=LedgerRef.of(entry),
            warnings=self.thoughts.reassertion_warnings(reasserts) + secret_warnings(*texts),
            reasserts=[rejection_out(r) for r in reasserts],
        )

    # ------------------------------------------------------------ search

    def search(self, caller: Caller, req: SearchInput) -> SearchResult:
        may_read(caller, req.repository)
        scope = caller.record_scope(req.repository, self.store.repositories, self.store.scopes)
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
        if cutoff := caller.cutoff(req.repository):  # a merged chain's records after its merged head
            at = self.store.entry_positions([s.rowid for s in ranked])
            ranked = [
                s
                for s in ranked
                if s.rowid not in at or at[s.rowid][1] <= cutoff.get(at[s.rowid][0], at[s.rowid][1])
            ]
        keys = known.update_from([s.rowid for s in ranked])
        if caller.limited:  # a repository created since the scope was listed
            keys = {r: k for r, k in keys.items() if caller.sees(k[0])}
        hits = retrieval.group_tasks(ranked, {r: (k[0], k[1]) for r, k in keys.items()}, req.limit)
        previews = self.store.load_attempts([h.attempts[0].rowid for h in hits])
        info = self.store.task_info([(h.repository, h.task_id) for h in hits], scope)
        base = (
            "fused (bm25 + vector, reciprocal rank) + graph"
            if has_terms
            else "vector + graph (no bm25 terms)"
        )
        hits, usefulness, ranking = self._rerank(req.query, hits, previews, info, base)
        current = dict(req.current_file_hashes or {})
        retrospectives = fresh_retrospectives(self.store, caller, [(h.repository, h.task_id) for h in hits])
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
                    retrospective=retrospectives.get((hit.repository, hit.task_id)),
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
            visible=caller.reads_key,
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
        attempts = []
        for chain in caller.read_set(repository):  # a branch's task: its parent's attempts too
            if chain == repository or caller.sees(chain):
                scopes = None if caller.admin else caller.own_scopes(chain)
                attempts += self.store.task_history(chain, task_id, scopes)
        cutoff = caller.cutoff(repository)  # a merged chain is read up to its merged head
        attempts = [a for a in attempts if a.entry.seq <= cutoff.get(a.entry.chain, a.entry.seq)]
        attempts.sort(key=lambda a: a.body.created_at)
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

    # ------------------------------------------------------------ corrections and forgetting

    def mark_conclusion_outdated(
        self, caller: Caller, req: MarkOutdatedInput, seal: Seal
    ) -> MarkOutdatedResult:
        may_write(caller, req.repository)
        self._owned_attempt(caller, req.repository, req.attempt_id)
        body = CorrectionBody(
            attempt_id=req.attempt_id,
            repository=req.repository,
            reason=req.reason,
            at=seal.time(),
            agent_id=caller.agent_id,
            latest_commit=req.latest_commit,
        )
        conclusion = self.store.attempt_conclusion_text(req.repository, req.attempt_id)
        if conclusion is None:
            raise NotFound(f"no attempt {req.attempt_id} in repository {req.repository}")
        vec = self.ctx.embed([conclusion])[0]
        entry, count = self.store.append_correction(body, vec, seal)
        return MarkOutdatedResult(
            attempt_id=req.attempt_id,
            correction=_correction(body),
            corrections_count=count,
            ledger=LedgerRef.of(entry),
        )

    def forget_attempt(self, caller: Caller, req: ForgetInput, seal: Seal) -> ForgetResult:
        may_write(caller, req.repository)
        self._owned_attempt(caller, req.repository, req.attempt_id)
        entry = self.store.forget_attempt(req.repository, req.attempt_id, req.reason, caller.agent_id, seal)
        return ForgetResult(forgotten=True, attempt_id=req.attempt_id, ledger=LedgerRef.of(entry))


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


__all__ = ["AttemptOps"]
