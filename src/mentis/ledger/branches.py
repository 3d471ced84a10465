"""Branch and merge chains on the ledger (issue 26, docs/branches.md): the bodies of the three
entries that make them, and :class:`BranchGraph`, what those entries say together.

- ``fork`` stands at seq 0 of a branch's own chain (``repository:branch``) and names the parent
  chain and the parent's head it forked at (seq and hash).
- ``branch`` stands in the parent chain, written in the same transaction: the parent's record
  that the branch exists, naming the branch's chain and the same fork point.
- ``merge`` stands in the target chain and names the source chain and the source's head (seq
  and hash) it merged, and the conflicts found then.

Nothing is copied by a merge: a read of a chain covers its :meth:`BranchGraph.read_set`: the chain,
its ancestors, and every chain merged into any of them (up to the merged head). Verification
(:func:`mentis.ledger.chain.verify_rows`) checks that every fork point and merged head names an
entry of the chain it names with that hash, and lets a body link to records of its read set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mentis.ledger.bodies import Body

BRANCH_KINDS = frozenset({"fork", "branch", "merge"})
"""The entry kinds that make branches; a store with any of them is verified by the reference verifier."""
GENESIS = (-1, "")
"""The fork point of a branch of a repository that had no entries yet: before its first entry
(the repository's chain then starts with its ``branch`` entry)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkBody(Body):
    """A ``fork`` entry's body (seq 0 of the branch's chain, ``repository``)."""

    repository: str
    root: str
    """The repository the branch belongs to (its main line's chain)."""
    branch: str
    parent: str
    """The chain it forked from: the main line or another branch of ``root``."""
    fork_seq: int
    fork_hash: str
    agent_id: str
    at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BranchBody(Body):
    """A ``branch`` entry's body: the parent chain's (``repository``) record of the fork."""

    repository: str
    branch: str
    chain: str
    fork_seq: int
    fork_hash: str
    agent_id: str
    at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConflictBody(Body):
    kind: str
    record_id: str
    source: str
    target: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MergeBody(Body):
    """A ``merge`` entry's body, in the target chain (``repository``)."""

    repository: str
    source: str
    source_seq: int
    source_hash: str
    agent_id: str
    at: str
    conflicts: list[ConflictBody] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> MergeBody:
        raw = obj.get("conflicts") or []
        conflicts = [ConflictBody.from_json(c) for c in raw] if isinstance(raw, list) else []
        return cls._make(obj, conflicts=conflicts)


@dataclass(frozen=True, slots=True)
class Fork:
    chain: str
    root: str
    branch: str
    parent: str
    fork_seq: int
    fork_hash: str


@dataclass(frozen=True, slots=True)
class Merge:
    target: str
    target_seq: int
    source: str
    source_seq: int
    source_hash: str


@dataclass
class BranchGraph:
    """Every fork and merge of a ledger, in ledger order."""

    forks: dict[str, Fork] = field(default_factory=dict)
    """Each branch chain's fork."""
    merges: dict[str, list[Merge]] = field(default_factory=dict)
    """Each target chain's merges, oldest first."""

    def add_fork(self, fork: Fork) -> None:
        self.forks[fork.chain] = fork

    def add_merge(self, merge: Merge) -> None:
        self.merges.setdefault(merge.target, []).append(merge)

    @classmethod
    def of(cls, entries: Iterable[tuple[str, int, str, bytes]]) -> BranchGraph:
        """The graph of ``(chain, seq, kind, body)`` of the fork and merge entries, in ledger order."""
        graph = cls()
        for chain, seq, kind, raw in entries:
            if kind == "fork":
                f = ForkBody.parse(raw)
                graph.add_fork(Fork(chain, f.root, f.branch, f.parent, f.fork_seq, f.fork_hash))
            elif kind == "merge":
                m = MergeBody.parse(raw)
                graph.add_merge(Merge(chain, seq, m.source, m.source_seq, m.source_hash))
        return graph

    def root(self, chain: str) -> str:
        """The repository ``chain`` belongs to (itself for a main line)."""
        fork = self.forks.get(chain)
        return chain if fork is None else fork.root

    def ancestors(self, chain: str) -> list[str]:
        """The chains ``chain`` forked from, nearest first."""
        out: list[str] = []
        while (fork := self.forks.get(chain)) is not None and fork.parent not in out:
            out.append(fork.parent)
            chain = fork.parent
        return out

    def chain_of(self, root: str, branch: str | None) -> str:
        """The chain name of ``branch`` of ``root`` (``root`` itself for None)."""
        return root if branch is None else f"{root}:{branch}"

    def branches_of(self, root: str) -> list[Fork]:
        return sorted((f for f in self.forks.values() if f.root == root), key=lambda f: f.branch)

    def merged_into(self, source: str) -> list[str]:
        """The chains ``source`` was merged into."""
        return sorted({m.target for ms in self.merges.values() for m in ms if m.source == source})

    def read_set(self, chain: str) -> dict[str, int | None]:
        """What a read of ``chain`` covers: each chain with the last seq of it read (None: all of
        it). The chain and its ancestors are read whole (a branch sees its parent's records
        written after the fork, docs/branches.md says why); a chain merged into any of them up to
        the newest head merged, and what that chain reads in turn up to the same point."""
        out: dict[str, int | None] = {}
        todo: list[tuple[str, int | None]] = [(chain, None)]
        while todo:
            c, limit = todo.pop()
            if c in out and (out[c] is None or (limit is not None and limit <= out[c])):  # type: ignore[operator]
                continue
            out[c] = limit
            fork = self.forks.get(c)
            if fork is not None:
                parent_limit = fork.fork_seq if limit is not None else None
                todo.append((fork.parent, parent_limit))
            for m in self.merges.get(c, []):
                if limit is None or m.target_seq <= limit:
                    todo.append((m.source, m.source_seq))
        return out

    def reach(self, chain: str) -> dict[str, int | None]:
        """:meth:`read_set` without ``chain`` itself: the other chains a body of ``chain`` may link to."""
        out = self.read_set(chain)
        out.pop(chain, None)
        return out


__all__ = [
    "BRANCH_KINDS",
    "GENESIS",
    "BranchBody",
    "BranchGraph",
    "ConflictBody",
    "Fork",
    "ForkBody",
    "Merge",
    "MergeBody",
]
