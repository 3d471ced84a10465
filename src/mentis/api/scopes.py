"""``publish``'s input and output: a private attempt or thought made readable to a wider scope."""

from __future__ import annotations

from pydantic import Field

from mentis.api.common import Identifier, LedgerRef, Out, Strict, Visibility


class PublishInput(Strict):
    repository: Identifier
    record_id: Identifier = Field(description="attempt_id or thought_id")
    visibility: Visibility = "repository"


class PublishResult(Out):
    record_id: str
    visibility: str
    ledger: LedgerRef


__all__ = ["PublishInput", "PublishResult"]
