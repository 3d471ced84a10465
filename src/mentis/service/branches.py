"""Branch and merge chains (issue 26, docs/branches.md): ``branch_from``, ``ensure_branch``,
``list_branches``, ``merge_branch``, and how a call naming a branch finds the branch's chain.

A branch is a chain of its own, ``repository:branch`` (git branch names cannot hold ``:``), forked
from its repository's chain or another branch of it (:mod:`mentis.ledger.branches`). A write that
names a branch goes to that chain; a read covers the chain's read set (the caller's ``views``,
:meth:`Caller.read_set`). A merge appends one entry on the target and copies nothing; it reports
the conflicts between what the two sides did since they parted, and writes them into its entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol, Self, TypeVar

import orjson

from mentis.api.branches import (
    BranchFromInput,
    BranchInfo,
    ChainPoint,
    ListBranchesInput,
    ListBranchesResult,
    MergeBranchInput,
    MergeConflict,
    MergeReport,
)
from mentis.errors import Conflict, InvalidInput, NotFound
from mentis.ledger.bodies import INVALIDATING_KINDS, AttemptBody, CorrectionBody, SkillStatusBody, ThoughtBody
from mentis.ledger.branches import BranchGraph, ConflictBody, Fork
from mentis.ledger.chain import chain_refused
from mentis.ledger.entry import Entry
from mentis.service.access import Caller, may_read, may_write
from mentis.service.context import ServiceContext
from mentis.store.seal import Seal

_SPACE = re.compile(r"\s+")


def graph_views(
    graph: BranchGraph,
) -> tuple[dict[str, str], dict[str, tuple[str, ...]], dict[str, dict[str, int]]]:
    """What a Caller needs of ``graph`` (:meth:`Caller.branching`): each branch chain's repository,
    the read set of every chain with a fork or a merge, and the seqs each read stops at."""
    roots = {chain: fork.root for chain, fork in graph.forks.items()}
    involved = {*graph.forks, *(f.parent for f in graph.forks.values()), *graph.merges}
    views: dict[str, tuple[str, ...]] = {}
    cutoffs: dict[str, dict[str, int]] = {}
    for c in involved:
        reads = graph.read_set(c)
        if list(reads) != [c]:  # nearest first: the chain, its ancestors, then what was merged
            line = [c, *graph.ancestors(c)]
            views[c] = (*line, *sorted(r for r in reads if r not in line))
        limited = {r: seq for r, seq in reads.items() if seq is not None}
        if limited:
            cutoffs[c] = limited
    return roots, views, cutoffs


class Branched(Protocol):
    """An input that may name a branch of its repository (docs/branches.md)."""

    @property
    def repository(self) -> str | None: ...
    @property
    def branch(self) -> str | None: ...
    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self: ...


B = TypeVar("B", bound=Branched)


class OnRepository(Protocol):
    """An input that writes on one record of a repository."""

    @property
    def repository(self) -> str: ...
    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self: ...


R = TypeVar("R", bound=OnRepository)


class BranchOps:
    """The branch operations of Memory, over the shared :class:`ServiceContext`."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

    # ------------------------------------------------------------ names

    def chain(self, graph: BranchGraph, repository: str, branch: str | None, field: str = "branch") -> str:
        """The chain of ``branch`` of ``repository`` (the repository's own for None); NotFound
        naming ``field`` when there is no such branch."""
        if branch is None:
            return repository
        chain = graph.chain_of(repository, branch)
        fork = graph.forks.get(chain)
        if fork is None and chain in self.store.damaged:  # a branch whose chain does not verify
            raise chain_refused(self.store.damaged[chain])
        if fork is None or fork.root != repository:
            raise NotFound(
                f"{field}: repository {repository!r} has no branch {branch!r}; create it with branch_from "
                "(`mentis branch from`)"
            )
        return chain

    def refuse_branch_chain(self, graph: BranchGraph, repository: str) -> None:
        """A write naming a branch's chain as its repository is refused: it names the branch."""
        fork = graph.forks.get(repository)
        if fork is not None:
            raise InvalidInput(
                f"repository: {repository!r} is the chain of branch {fork.branch!r} of {fork.root!r}; "
                f"give repository {fork.root!r} and branch {fork.branch!r}",
                field="repository",
            )

    def info(self, graph: BranchGraph, fork: Fork, heads: dict[str, tuple[int, str]]) -> BranchInfo:
        seq, hash_ = heads.get(fork.chain, (0, ""))
        return BranchInfo(
            repository=fork.root,
            branch=fork.branch,
            chain=fork.chain,
            parent=fork.parent,
            fork=ChainPoint(seq=fork.fork_seq, hash=fork.fork_hash),
            head=ChainPoint(seq=seq, hash=hash_),
            merged_into=graph.merged_into(fork.chain),
        )

    def resolve(self, req: B, *, write: bool = False) -> B:
        """``req`` with its ``branch`` resolved: its repository the branch's chain (NotFound naming
        ``branch`` when there is none). A write naming a branch's chain as its repository is
        refused (it names the repository and the branch instead)."""
        if req.branch is None and not write:
            return req
        graph = self.store.branch_graph()
        if req.repository is None:
            raise InvalidInput("branch: give the repository the branch belongs to", field="branch")
        if req.branch is None:
            self.refuse_branch_chain(graph, req.repository)
            return req
        chain = self.chain(graph, req.repository, req.branch)
        return req.model_copy(update={"repository": chain, "branch": None})

    def route(self, req: R, record_id: str) -> R:
        """``req`` (a write on one record: a correction, a forget) on the chain the record stands
        in when that is a branch of ``req.repository``: such a write goes where its record is."""
        found = self.store.find_records([record_id]).get(record_id)
        if found is None and (attempt := self.store.find_attempt(record_id)) is not None:
            found = (attempt[0], "attempt")
        if found is None or found[0] == req.repository:
            return req
        fork = self.store.branch_graph().forks.get(found[0])
        if fork is None or fork.root != req.repository:
            return req
        return req.model_copy(update={"repository": found[0]})

    # ------------------------------------------------------------ operations

    def branch_from(self, caller: Caller, req: BranchFromInput, seal: Seal) -> BranchInfo:
        """Fork the branch; with ``exist_ok`` an existing branch of that name is returned as it
        is (whatever its fork point), also when another writer creates it meanwhile."""
        graph = self.store.branch_graph()
        self.refuse_branch_chain(graph, req.repository)
        if req.exist_ok and (fork := self.existing(graph, req.repository, req.branch)) is not None:
            may_read(caller, req.repository)
            return self.info(graph, fork, self.store.chain_heads())
        may_write(caller, req.repository)
        parent = self.chain(graph, req.repository, req.parent, "parent")
        if req.fork_hash is not None and req.fork_seq is None:
            raise InvalidInput(
                "fork_hash: give fork_seq with it (the seq of the entry it names)", field="fork_hash"
            )
        fork_at = None if req.fork_seq is None else (req.fork_seq, req.fork_hash)
        try:
            self.store.append_branch(req.repository, req.branch, parent, fork_at, caller.agent_id, seal)
        except Conflict:
            graph = self.store.branch_graph()
            if not req.exist_ok or (fork := self.existing(graph, req.repository, req.branch)) is None:
                raise
            return self.info(graph, fork, self.store.chain_heads())  # created by another writer meanwhile
        graph = self.store.branch_graph()
        return self.info(
            graph, graph.forks[graph.chain_of(req.repository, req.branch)], self.store.chain_heads()
        )

    @staticmethod
    def existing(graph: BranchGraph, repository: str, branch: str) -> Fork | None:
        """The fork of ``branch`` of ``repository``, None when it has no such branch."""
        fork = graph.forks.get(graph.chain_of(repository, branch))
        return fork if fork is not None and fork.root == repository else None

    def ensure_branch(self, caller: Caller, repository: str, branch: str, seal: Seal) -> BranchInfo:
        """The branch, created at its repository's head now when it does not exist yet."""
        req = BranchFromInput(repository=repository, branch=branch, parent=None, exist_ok=True)
        return self.branch_from(caller, req, seal)

    def list_branches(self, caller: Caller, req: ListBranchesInput) -> ListBranchesResult:
        may_read(caller, req.repository)
        graph = self.store.branch_graph()
        heads = self.store.chain_heads()
        return ListBranchesResult(
            branches=[self.info(graph, f, heads) for f in graph.branches_of(req.repository)]
        )

    def merge_branch(self, caller: Caller, req: MergeBranchInput, seal: Seal) -> MergeReport:
        graph = self.store.branch_graph()
        source = self.chain(graph, req.repository, req.branch, "branch")
        target = self.chain(graph, req.repository, req.into, "into")
        if source == target:
            raise InvalidInput(f"into: branch {req.branch!r} cannot be merged into itself", field="into")
        if source in graph.ancestors(target):
            raise InvalidInput(
                f"into: {target!r} forked from branch {req.branch!r} (it is its descendant); a branch is "
                "merged into its parent line, never into its own descendant",
                field="into",
            )
        may_read(caller, source)
        may_write(caller, target)
        head = self.store.chain_heads()[source]
        conflicts = self.conflicts(graph, source, target)
        entry = self.store.append_merge(source, target, head, conflicts, caller.agent_id, seal)
        return MergeReport(
            repository=req.repository,
            branch=req.branch,
            into=target,
            merge=ChainPoint(seq=entry.seq, hash=entry.hash),
            source_head=ChainPoint(seq=head[0], hash=head[1]),
            conflicts=[MergeConflict(**c.to_json()) for c in conflicts],
        )

    # ------------------------------------------------------------ conflicts

    def conflicts(self, graph: BranchGraph, source: str, target: str) -> list[ConflictBody]:
        """What the two sides did since they parted that disagrees (docs/branches.md): an attempt
        marked outdated on one side while the other recorded a later passed check on its files; a
        thought superseded on one side and re-asserted (referred to, or repeated) on the other; a
        skill revoked on one side and given a new version on the other."""
        kinds = ("attempt", "correction", "thought", "skill", "skill_status")
        split = self._split(graph, source, target)
        sides = {
            "source": self.store.chain_entries(source, -1, kinds),
            "target": self.store.chain_entries(target, split, kinds),
        }
        out: list[ConflictBody] = []
        for one, other in (("source", "target"), ("target", "source")):
            out += self._attempt_conflicts(sides[one], sides[other], one)
            out += self._thought_conflicts(sides[one], sides[other], one)
            out += self._skill_conflicts(sides[one], sides[other], one)
        return out

    @staticmethod
    def _split(graph: BranchGraph, source: str, target: str) -> int:
        """The last seq of ``target`` both sides share: where the source's line left it."""
        chain = source
        while (fork := graph.forks.get(chain)) is not None:
            if fork.parent == target:
                return fork.fork_seq
            chain = fork.parent
        fork = graph.forks.get(target)
        return 0 if fork is not None else -1

    def _attempt_conflicts(
        self, one: list[tuple[Entry, bytes]], other: list[tuple[Entry, bytes]], side: str
    ) -> list[ConflictBody]:
        corrections = [CorrectionBody.parse(raw) for e, raw in one if e.kind == "correction"]
        if not corrections:
            return []
        passed = [
            b
            for b in (AttemptBody.parse(raw) for e, raw in other if e.kind == "attempt")
            if b.status == "passed"
        ]
        targets = self.store.record_bodies(sorted({c.attempt_id for c in corrections}))
        out = []
        for c in corrections:
            found = targets.get(c.attempt_id)
            if found is None:
                continue
            files = set(AttemptBody.parse(found[1]).files)
            for p in passed:
                if p.created_at > c.at and files & set(p.files):
                    out.append(
                        _conflict(
                            side,
                            "attempt",
                            c.attempt_id,
                            f"marked outdated at {c.at}: {c.reason}",
                            f"attempt {p.attempt_id} passed `{p.check.command if p.check else ''}` later, "
                            f"on {', '.join(sorted(files & set(p.files)))}",
                        )
                    )
                    break
        return out

    def _thought_conflicts(
        self, one: list[tuple[Entry, bytes]], other: list[tuple[Entry, bytes]], side: str
    ) -> list[ConflictBody]:
        superseded = {
            r.target_id: (b.thought_id, r.kind)
            for b in (ThoughtBody.parse(raw) for e, raw in one if e.kind == "thought")
            for r in b.relations
            if r.kind in INVALIDATING_KINDS
        }
        if not superseded:
            return []
        targets = self.store.record_bodies(sorted(superseded))
        texts = {
            _norm(ThoughtBody.parse(raw).content): tid
            for tid, (e, raw) in targets.items()
            if e.kind == "thought"
        }
        out, seen = [], set[str]()
        for b in (ThoughtBody.parse(raw) for e, raw in other if e.kind == "thought"):
            named = {*b.refs, *(r.target_id for r in b.relations if r.kind not in INVALIDATING_KINDS)}
            hits = [t for t in superseded if t in named]
            if (same := texts.get(_norm(b.content))) is not None:
                hits.append(same)
            for tid in hits:
                if tid in seen:
                    continue
                seen.add(tid)
                by, kind = superseded[tid]
                out.append(
                    _conflict(
                        side,
                        "thought",
                        tid,
                        f"{kind} by thought {by}",
                        f"re-asserted by thought {b.thought_id}",
                    )
                )
        return out

    @staticmethod
    def _skill_conflicts(
        one: list[tuple[Entry, bytes]], other: list[tuple[Entry, bytes]], side: str
    ) -> list[ConflictBody]:
        revoked = {
            s.skill_id: s
            for s in (SkillStatusBody.parse(raw) for e, raw in one if e.kind == "skill_status")
            if s.op == "revoke"
        }
        if not revoked:
            return []
        out, seen = [], set[str]()
        for e, raw in other:
            if e.kind != "skill":
                continue
            doc = orjson.loads(raw)
            skill_id = doc.get("skill_id")
            if skill_id in revoked and skill_id not in seen:
                seen.add(skill_id)
                s = revoked[skill_id]
                out.append(
                    _conflict(
                        side,
                        "skill",
                        skill_id,
                        f"revoked at {s.at}: {s.reason or ''}".rstrip(": "),
                        f"version {doc.get('version')} uploaded at {e.at}",
                    )
                )
        return out


def _norm(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def _conflict(side: str, kind: str, record_id: str, did: str, other_did: str) -> ConflictBody:
    """A conflict where ``side`` (source or target) did ``did`` and the other side ``other_did``."""
    source, target = (did, other_did) if side == "source" else (other_did, did)
    return ConflictBody(kind=kind, record_id=record_id, source=source, target=target)


__all__ = ["BranchOps", "Branched", "OnRepository", "graph_views"]
