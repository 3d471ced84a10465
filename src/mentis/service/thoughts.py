"""Typed thoughts: append, search with supersession and point-in-time reads, traversal,
context bundles, catch-up prompts, MEMORY.md, and rejected conclusions that stay rejected.

Composed into :class:`mentis.service.memory.Memory` (the service); the rules live here once.

Thresholds, measured with all-MiniLM-L6-v2 on hand-written pairs (``tests/test_thresholds.py``
pins them): paraphrases of one conclusion scored 0.87-0.97 cosine, different conclusions about
the same subject 0.27-0.79, and a negation ("is not caused by ...") 0.88.

- ``NEAR_DUPLICATE = 0.95``: a new thought of the same type this close to one of the 200 newest in
  its repository (or equal after normalisation) supersedes it automatically — only near-verbatim
  restatements, because supersession hides the older thought from default reads.
- ``REASSERTION = 0.90``: a new attempt conclusion or thought this close to a rejected one (or
  equal after normalisation) is stored, with a warning naming the rejection. Above the negation
  score, so "X is not the cause" does not warn about a rejected "X is the cause".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mentis import retrieval
from mentis.api.common import LedgerRef, Rejection, SourceEpisode, parse
from mentis.api.thoughts import (
    AppendThoughtInput,
    AppendThoughtResult,
    BundleItem,
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
    ScoredThought,
    SearchThoughtsInput,
    SearchThoughtsResult,
    ThoughtOut,
    ThoughtRelationOut,
    ThoughtScoreParts,
    TraverseEdge,
    TraverseInput,
    TraverseResult,
)
from mentis.errors import Conflict, InvalidInput, NotFound
from mentis.ledger.bodies import (
    INVALIDATING_KINDS,
    AttemptBody,
    EpisodeBody,
    RelationBody,
    ThoughtBody,
    scope_key,
)
from mentis.ledger.fingerprint import fingerprint
from mentis.ledger.signing import now_iso
from mentis.retrieval import pipeline
from mentis.service.access import Caller, left_out_note, may_read, may_write, written_visibility
from mentis.service.context import ServiceContext, secret_warnings
from mentis.service.entity_types import check_entity_type
from mentis.service.memory_md import parse_memory_md, render_memory_md
from mentis.service.session_windows import SessionNeighbours
from mentis.store.protocol import ThoughtQuery
from mentis.store.seal import Seal

if TYPE_CHECKING:
    from mentis.ledger.entry import Entry

NEAR_DUPLICATE = 0.95
NEAR_DUPLICATE_WINDOW = 200
REASSERTION = 0.90
FILTER_POOL = 2_000
"""Thoughts considered when a search has filters but no query (newest first)."""


def thought_out(
    entry: Entry,
    t: ThoughtBody,
    invalidated_by: Sequence[str] = (),
    reasserts: list[Rejection] | None = None,
) -> ThoughtOut:
    return ThoughtOut(
        thought_id=t.thought_id,
        repository=t.repository,
        type=t.type,
        role=t.role,
        content=t.content,
        confidence=None if t.confidence is None else float(t.confidence),
        importance=float(t.importance),
        tags=t.tags,
        concepts=t.concepts,
        refs=t.refs,
        relations=[ThoughtRelationOut(**r.to_json()) for r in t.relations],
        task_id=t.task_id,
        agent_id=t.agent_id,
        session_id=t.session_id,
        created_at=t.created_at,
        ledger=LedgerRef.of(entry),
        invalidated_by=list(invalidated_by),
        reasserts=[rejection_out(r) for r in t.reasserts or []] if reasserts is None else reasserts,
        entity_type=t.entity_type,
        source_episode=None
        if t.source_episode is None
        else SourceEpisode(**t.source_episode.to_json()).model_dump(),
    )


def rejection_out(r: dict[str, Any]) -> Rejection:
    return Rejection(**{"reason": "", **r, "similarity": float(r["similarity"])})


def stored_reasserts(found: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reassertions as a body keeps them: without the reason, which lives in the rejecting record
    (a correction or thought) and so is erased with it; reads look it up (``live_reasserts``)."""
    return [{k: v for k, v in r.items() if k != "reason"} for r in found]


class ThoughtOps:
    """The thought operations of Memory, over the shared :class:`ServiceContext`."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.session_neighbours = SessionNeighbours(ctx.store)

    # ------------------------------------------------------------ rejected conclusions

    def reassertions(
        self, repository: str, text: str, vector: np.ndarray, scope: str
    ) -> list[dict[str, Any]]:
        """Earlier rejections that ``text`` seems to re-assert, as stored in the new body (of scope
        key ``scope``): only those whose rejected and rejecting records every reader of the new
        one may read (the repository's, or of the same scope), so no private reason travels."""
        rows = self.store.rejections(repository)
        if rows:
            keys = self.store.record_scopes(sorted({i for r in rows for i in (r.target_id, r.by_id)}))
            rows = [
                r
                for r in rows
                if all(keys.get(i, repository) in (repository, scope) for i in (r.target_id, r.by_id))
            ]
        if not rows:
            return []
        norm = fingerprint(text)
        sims = np.stack([r.vector for r in rows]) @ vector.astype(np.float32)
        found: dict[str, dict[str, Any]] = {}
        for row, sim in zip(rows, sims, strict=True):
            exact = row.norm_hash == norm
            if not exact and sim < REASSERTION:
                continue
            found[row.target_id] = {
                "rejected_id": row.target_id,
                "rejected_kind": row.target_kind,
                "by_id": row.by_id,
                "reason": self.store.rejection_reason(row.by_rowid)[:500],
                "at": row.at,
                "similarity": f"{min(max(float(sim), 0.0), 1.0):.4f}",
                "match": "exact" if exact else "similar",
            }
        return list(found.values())

    def live_reasserts(self, body: AttemptBody | ThoughtBody) -> list[Rejection]:
        """A body's reassertions with each reason read from the rejection as it stands now: empty
        once the rejected record or the rejecting one was forgotten (older bodies kept a copy)."""
        found = body.reasserts or []
        if not found:
            return []
        rows = {(r.target_id, r.by_id, r.at): r.by_rowid for r in self.store.rejections(body.repository)}
        out = []
        for r in found:
            by_rowid = rows.get((r["rejected_id"], r["by_id"], r["at"]))
            reason = "" if by_rowid is None else self.store.rejection_reason(by_rowid)[:500]
            out.append(rejection_out({**r, "reason": reason}))
        return out

    @staticmethod
    def reassertion_warnings(found: Sequence[dict[str, Any]]) -> list[str]:
        return [
            f"this re-asserts a conclusion rejected at {r['at']}: {r['rejected_kind']} {r['rejected_id']} "
            f"({r['match']} match, similarity {r['similarity']}); reason: {r['reason']}"
            for r in found
        ]

    # ------------------------------------------------------------ append

    def append_thought(
        self, caller: Caller, req: AppendThoughtInput, seal: Seal, *, link_duplicates: bool = True
    ) -> AppendThoughtResult:
        may_write(caller, req.repository)
        thought_id = req.thought_id or seal.record_id()
        targets = [*req.refs, *(r.target_id for r in req.relations)]
        known = self.store.find_records([thought_id, *targets])
        if thought_id in known:
            raise Conflict(f"thought {thought_id} already exists; omit thought_id to get a new one")
        scopes = self.store.record_scopes(targets)
        for field, ids in (("refs", req.refs), ("relations", [r.target_id for r in req.relations])):
            for target in ids:
                repo_kind = known.get(target)
                hidden = target in scopes and not caller.reads(
                    repo_kind[0] if repo_kind else "", scopes[target]
                )
                if repo_kind is None or repo_kind[0] not in caller.read_set(req.repository) or hidden:
                    raise InvalidInput(
                        f"{field}: no thought or attempt {target} in {req.repository}", field=field
                    )
                if field == "relations" and repo_kind[1] != "thought":
                    raise InvalidInput(
                        f"relations: {target} is an attempt; relations link thoughts", field=field
                    )
        for rel in req.relations:
            if rel.kind in INVALIDATING_KINDS and known[rel.target_id][0] != req.repository:
                raise InvalidInput(
                    f"relations: {rel.kind} of {rel.target_id}, a thought of chain "
                    f"{known[rel.target_id][0]!r}, may only be written on that chain: here it would "
                    "hide it from that chain's readers before any merge (docs/branches.md)",
                    field="relations",
                )
        check_entity_type(self.store, req.entity_type)
        vector = self.ctx.embed([req.content])[0]
        relations = [RelationBody(**r.model_dump()) for r in req.relations]
        session_id = req.session_id or caller.session_id
        visibility = written_visibility(req.visibility, session_id)
        scope = scope_key(req.repository, visibility, caller.agent_id, session_id)
        superseded = self._near_duplicates(req, vector, targets, scope) if link_duplicates else []
        relations += [RelationBody(kind="Supersedes", target_id=t) for t in superseded]
        reasserts = self.reassertions(req.repository, req.content, vector, scope)
        body = ThoughtBody(
            thought_id=thought_id,
            repository=req.repository,
            type=req.type,
            role=req.role,
            content=req.content,
            importance=str(req.importance),
            tags=list(req.tags),
            concepts=list(req.concepts),
            refs=list(req.refs),
            relations=relations,
            agent_id=caller.agent_id,
            created_at=seal.time(),
            confidence=None if req.confidence is None else str(req.confidence),
            task_id=req.task_id,
            session_id=session_id,
            visibility=visibility,
            reasserts=stored_reasserts(reasserts) or None,
            entity_type=req.entity_type,
            source_episode=None
            if req.source_episode is None
            else EpisodeBody(**req.source_episode.model_dump()),
        )
        entry = self.store.append_thought(body, vector, seal)
        warnings = self.reassertion_warnings(reasserts)
        warnings += [f"linked as Supersedes: near-duplicate of thought {t}" for t in superseded]
        return AppendThoughtResult(
            thought_id=thought_id,
            ledger=LedgerRef.of(entry),
            superseded=superseded,
            warnings=warnings + secret_warnings(req.content, forget="forget_thought"),
            reasserts=[rejection_out(r) for r in reasserts],
        )

    def _near_duplicates(
        self, req: AppendThoughtInput, vector: np.ndarray, targets: list[str], scope: str
    ) -> list[str]:
        """A thought of the same type and the same scope key that the new one nearly repeats (one
        of another scope is never superseded: a private thought does not hide a shared one)."""
        ids, matrix = self.store.recent_thought_vectors(req.repository, NEAR_DUPLICATE_WINDOW)
        if not ids:
            return []
        sims = matrix @ vector.astype(np.float32)
        close = [i for i, s in zip(ids, sims, strict=True) if s >= NEAR_DUPLICATE and i not in targets]
        scopes = self.store.record_scopes(close)
        close = [i for i in close if scopes.get(i) == scope]
        if not close:
            return []
        invalid = self.store.invalidations(close, now_iso())
        rowids = self.store.thought_rowids(close)
        loaded = self.store.load_thoughts(list(rowids.values()))
        same_type = {body.thought_id for _, body in loaded.values() if body.type == req.type}
        return [i for i in close if i in same_type and i not in invalid][:1]

    def forget_thought(self, caller: Caller, req: ForgetThoughtInput, seal: Seal) -> ForgetThoughtResult:
        may_write(caller, req.repository)
        scope = self.store.record_scopes([req.thought_id]).get(req.thought_id)
        if scope is not None and not caller.reads(req.repository, scope):
            raise NotFound(f"no thought {req.thought_id} in repository {req.repository}")
        entry = self.store.forget_thought(req.repository, req.thought_id, req.reason, caller.agent_id, seal)
        return ForgetThoughtResult(forgotten=True, thought_id=req.thought_id, ledger=LedgerRef.of(entry))

    # ------------------------------------------------------------ search

    def search_thoughts(self, caller: Caller, req: SearchThoughtsInput) -> SearchThoughtsResult:
        may_read(caller, req.repository)
        as_of = req.as_of or now_iso()
        scored: dict[int, retrieval.Scored] = {}
        if req.query is not None:
            scope = caller.record_scope(req.repository, self.store.repositories, self.store.scopes)
            fused, has_terms = pipeline.candidates(
                req.query,
                scope,
                self.ctx.embed_one,
                self.store.thought_lexical,
                self.store.thought_vector,
                self.store.thought_edges_between,
                pool=self.ctx.pool,
                neighbours=lambda rows: self.session_neighbours(rows, scope),
                window_lexical=self.store.window_lexical,
            )
            scored = {s.rowid: s for s in fused}
            candidates: list[int] | None = [s.rowid for s in fused]
            ranking = (
                "fused (bm25 + vector, reciprocal rank) + graph"
                if has_terms
                else "vector + graph (no bm25 terms)"
            )
        else:
            candidates = None
            ranking = "newest first (no query)"
        query = self._thought_filters(caller, req, as_of)
        rowids = self.store.filter_thoughts(candidates, query, FILTER_POOL)
        results = self._materialise(
            caller,
            rowids,
            as_of,
            req.include_invalidated,
            req.filters.text,
            req.limit,
            caller.cutoff(req.repository),
        )
        thoughts = [
            ScoredThought(
                thought=t,
                score=round(scored[r].final, 6) if r in scored else t.importance,
                score_parts=ThoughtScoreParts.of(scored[r].parts()) if r in scored else None,
            )
            for r, t in results
        ]
        return SearchThoughtsResult(thoughts=thoughts, ranking=ranking + left_out_note(caller), as_of=as_of)

    def _thought_filters(self, caller: Caller, req: SearchThoughtsInput, as_of: str) -> ThoughtQuery:
        f = req.filters
        repositories: tuple[str, ...] | None = None
        if req.repository is not None:
            repositories = caller.read_set(req.repository)
        elif caller.limited:
            repositories = tuple(r for r in self.store.repositories() if caller.sees(r))
        return ThoughtQuery(
            as_of=as_of,
            repositories=repositories,
            scopes=self._reader_scopes(caller, repositories),
            types=f.types or (),
            roles=f.roles or (),
            agents=f.agents or (),
            tags=f.tags or (),
            concepts=f.concepts or (),
            since=f.since,
            until=f.until,
            min_importance=None if f.min_importance is None else float(f.min_importance),
            min_confidence=None if f.min_confidence is None else float(f.min_confidence),
            task_id=f.task_id,
            entity_types=f.entity_types or (),
            source_session=f.source_session,
        )

    def _invalidations(self, caller: Caller, ids: Sequence[str], as_of: str) -> dict[str, list[str]]:
        """The store's invalidations of ``ids``, counting only the thoughts ``caller`` reads: another
        agent's private thought neither hides a thought nor shows as its invalidator."""
        found = self.store.invalidations(ids, as_of)
        if caller.admin or not found:
            return found
        scopes = self.store.record_scopes(sorted({b for by in found.values() for b in by}))
        out = {}
        for target, by in found.items():
            kept = [b for b in by if b in scopes and caller.reads_key(scopes[b])]
            if kept:
                out[target] = kept
        return out

    def _may_see(self, caller: Caller, body: ThoughtBody) -> bool:
        """Whether ``get_thought`` shows ``body``: its repository is covered and its scope (as
        published since) is one the caller reads (a refused repository's raises its refusal after)."""
        scope = self.store.record_scopes([body.thought_id]).get(body.thought_id, body.scope)
        own = scope == body.repository or caller.admin or scope in caller.own_scopes(body.repository)
        return caller.covers(body.repository) and own

    def _reader_scopes(self, caller: Caller, repositories: Sequence[str] | None) -> list[str] | None:
        """The scope keys a non-admin caller reads in ``repositories`` (None: every one it
        sees); None for an admin, who reads every record."""
        if caller.admin:
            return None
        repos = self.store.repositories() if repositories is None else repositories
        return [k for r in repos if caller.sees(r) for k in caller.own_scopes(r)]

    def _materialise(
        self,
        caller: Caller,
        rowids: Sequence[int],
        as_of: str,
        include_invalidated: bool,
        text: str | None,
        limit: int,
        cutoff: Mapping[str, int] | None = None,
    ) -> list[tuple[int, ThoughtOut]]:
        """Load thoughts in order, apply invalidation at ``as_of`` and the text filter, up to ``limit``
        (``cutoff``: the last seq read of each merged chain read in part)."""
        out: list[tuple[int, ThoughtOut]] = []
        needle = text.casefold() if text else None
        for start in range(0, len(rowids), 100):
            chunk = list(rowids[start : start + 100])
            loaded = self.store.load_thoughts(chunk)
            ids = [loaded[r].body.thought_id for r in chunk if r in loaded]
            invalid = self._invalidations(caller, ids, as_of)
            for r in chunk:
                if r not in loaded:
                    continue
                entry, body = loaded[r]
                if cutoff and entry.seq > cutoff.get(entry.chain, entry.seq):
                    continue
                by = invalid.get(body.thought_id, [])
                if by and not include_invalidated:
                    continue
                if needle is not None and needle not in body.content.casefold():
                    continue
                out.append((r, thought_out(entry, body, by, self.live_reasserts(body))))
                if len(out) == limit:
                    return out
        return out

    # ------------------------------------------------------------ direct reads

    def get_thought(self, caller: Caller, req: GetThoughtInput) -> ThoughtOut:
        given = [
            req.thought_id is not None,
            req.hash is not None,
            req.seq is not None or req.repository is not None,
        ]
        if sum(given) != 1 or (req.seq is None) != (req.repository is None):
            raise InvalidInput(
                "get_thought: give exactly one of thought_id, hash, or repository + seq", "thought_id"
            )
        if req.thought_id is not None:
            rowid = self.store.thought_rowids([req.thought_id]).get(req.thought_id)
        else:
            rowid = self.store.thought_rowid_at(req.repository, req.seq, req.hash)
        loaded = self.store.load_thoughts([rowid]) if rowid is not None else {}
        if rowid is None or rowid not in loaded or not self._may_see(caller, loaded[rowid].body):
            raise NotFound("no such thought; search_thoughts finds ids")
        entry, body = loaded[rowid]
        may_read(caller, body.repository)  # a refused (damaged) repository's thought: its refusal
        invalid = self._invalidations(caller, [body.thought_id], now_iso())
        return thought_out(entry, body, invalid.get(body.thought_id, []), self.live_reasserts(body))

    def _thoughts_by_id(self, caller: Caller, ids: Sequence[str], as_of: str) -> dict[str, ThoughtOut]:
        rowids = self.store.thought_rowids(list(ids))
        loaded = self.store.load_thoughts(list(rowids.values()))
        invalid = self._invalidations(caller, list(rowids), as_of)
        scopes = self.store.record_scopes(list(rowids))
        return {
            body.thought_id: thought_out(
                entry, body, invalid.get(body.thought_id, []), self.live_reasserts(body)
            )
            for entry, body in loaded.values()
            if caller.reads(body.repository, scopes.get(body.thought_id, body.scope))
        }

    def traverse_thoughts(self, caller: Caller, req: TraverseInput) -> TraverseResult:
        start = self._thoughts_by_id(caller, [req.thought_id], now_iso())
        if req.thought_id not in start:
            raise NotFound(f"no thought {req.thought_id}; search_thoughts finds ids")
        seen: dict[str, ThoughtOut] = dict(start)
        edges: list[TraverseEdge] = []
        frontier, truncated = [req.thought_id], False
        dangling: list[TraverseEdge] = []
        for _ in range(req.depth):
            found = self.store.thought_edges(frontier, req.direction, req.kinds)
            other = [t if f in frontier and req.direction != "in" else f for f, _, t in found]
            fresh = [i for i in dict.fromkeys(other) if i not in seen]
            loaded = self._thoughts_by_id(caller, fresh, now_iso())
            for i in fresh:
                if i in loaded:
                    if len(seen) == req.limit:
                        truncated = True
                        break
                    seen[i] = loaded[i]
            edges += [
                TraverseEdge(from_id=f, kind=k, to_id=t) for f, k, t in found if f in seen and t in seen
            ]
            missing = [i for i in fresh if i not in loaded]
            gone = set(missing) - set(self.store.thought_rowids(missing)) if missing else set()
            dangling += [
                TraverseEdge(from_id=f, kind=k, to_id=t) for f, k, t in found if f in gone or t in gone
            ]
            frontier = [i for i in fresh if i in seen]
            if truncated or not frontier:
                break
        unique = list({(e.from_id, e.kind, e.to_id): e for e in edges}.values())
        return TraverseResult(nodes=list(seen.values()), edges=unique, truncated=truncated, dangling=dangling)

    def context_bundle(self, caller: Caller, req: ContextBundleInput) -> ContextBundleResult:
        seeds = self.search_thoughts(
            caller,
            parse(
                SearchThoughtsInput,
                {"query": req.query, "repository": req.repository, "limit": req.limit, "as_of": req.as_of},
            ),
        )
        as_of = seeds.as_of
        seed_ids = {s.thought.thought_id for s in seeds.thoughts}
        bundles = []
        for seed in seeds.thoughts:
            edges = self.store.thought_edges([seed.thought.thought_id], "both", None)
            near = [t if f == seed.thought.thought_id else f for f, _, t in edges]
            near = [i for i in dict.fromkeys(near) if i not in seed_ids][: req.related]
            loaded = self._thoughts_by_id(caller, near, as_of)
            bundles.append(BundleItem(seed=seed, related=[loaded[i] for i in near if i in loaded]))
        return ContextBundleResult(bundles=bundles)

    def recent_context(self, caller: Caller, req: RecentContextInput) -> RecentContextResult:
        may_read(caller, req.repository)
        filters: dict[str, Any] = {"agents": [req.agent_id]} if req.agent_id else {}
        found = self.search_thoughts(
            caller,
            parse(
                SearchThoughtsInput, {"repository": req.repository, "filters": filters, "limit": req.limit}
            ),
        )
        thoughts = [s.thought for s in found.thoughts]
        lines = [f"Catch-up for {req.repository}: the {len(thoughts)} newest thoughts, newest first."]
        lines += [
            f"- [{t.type}] {_one_line(t.content, 300)} ({t.agent_id}, {t.created_at[:16]}Z)" for t in thoughts
        ]
        return RecentContextResult(thoughts=thoughts, prompt="\n".join(lines))

    # ------------------------------------------------------------ MEMORY.md

    def export_memory_md(self, caller: Caller, req: MemoryMdExportInput) -> MemoryMdExportResult:
        may_read(caller, req.repository)
        rowids = self.store.filter_thoughts(
            None, ThoughtQuery(repositories=caller.read_set(req.repository)), 1_000_000
        )
        every, cutoff = len(rowids) or 1, caller.cutoff(req.repository)
        live = self._materialise(caller, list(reversed(rowids)), now_iso(), False, None, every, cutoff)
        markdown = render_memory_md(req.repository, [t for _, t in live])
        return MemoryMdExportResult(markdown=markdown, count=len(live))

    def import_memory_md(self, caller: Caller, req: MemoryMdImportInput, seal: Seal) -> MemoryMdImportResult:
        """Append each thought of the file, one ledger entry each (with ``seal``: its signer)."""
        parsed = parse_memory_md(req.repository, req.markdown)
        may_write(caller, req.repository)
        ids = [self.append_thought(caller, p, seal, link_duplicates=False).thought_id for p in parsed]
        return MemoryMdImportResult(imported=len(ids), thought_ids=ids)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
