"""The ledger's integrity: verify its chains on demand, and regenerate the derived tables from it
(``rebuild``, and ``reindex`` with another embedding model). Composed into
:class:`mentis.service.memory.Memory`."""

from __future__ import annotations

from collections.abc import Callable

from mentis.api.verify import ChainResult, VerifyResult
from mentis.errors import IntegrityError, NotFound
from mentis.service.access import Caller, may_read
from mentis.service.context import ServiceContext


class IntegrityOps:
    """``verify_integrity``, ``rebuild`` and ``reindex`` of Memory, over a :class:`ServiceContext`."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

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
        caller = caller.refusing(self.store.damaged)  # as this verification found them
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

    def rebuild(self, progress: Callable[[int], None] | None = None) -> int:
        """Regenerate every derived table from the ledger (``mentis rebuild``)."""
        return self.store.rebuild(self.ctx.embed, progress)

    def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Re-embed every attempt, thought and rejected conclusion with the configured model."""
        count = self.store.rebuild(self.ctx.embed, progress)
        self.store.set_meta("embed_model", self.ctx.embedder.model_id)
        self.store.set_meta("embed_dim", str(self.ctx.embedder.dim))
        return count


__all__ = ["IntegrityOps"]
