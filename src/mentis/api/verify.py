"""``verify_integrity``'s input and output: every chain the caller may read, checked on demand."""

from __future__ import annotations

from mentis.api.common import Identifier, Out, Strict


class VerifyInput(Strict):
    repository: Identifier | None = None
    signatures: bool = False


class ChainResult(Out):
    chain: str
    ok: bool
    entries: int
    head_seq: int
    head_hash: str
    bodies_erased: int


class VerifyResult(Out):
    ok: bool
    chains: list[ChainResult]
