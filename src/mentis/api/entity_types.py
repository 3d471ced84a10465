"""The entity-type registry's inputs and outputs: upsert_entity_type and list_entity_types (what a
thought's ``entity_type`` may name; docs/provenance.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from mentis.api.common import EntityTypeName, LedgerRef, Out, Strict, query

MAX_DESCRIPTION_CHARS = 1_000

Description = Annotated[str, Field(min_length=1, max_length=MAX_DESCRIPTION_CHARS), AfterValidator(query)]


class UpsertEntityTypeInput(Strict):
    name: EntityTypeName
    description: Description


class ListEntityTypesInput(Strict):
    pass


class EntityTypeOut(Out):
    name: str
    description: str
    builtin: bool
    """Offered by Mentis without a ledger entry (until someone upserts it)."""
    updated_at: str | None = None
    updated_by: str | None = None


class UpsertEntityTypeResult(Out):
    entity_type: EntityTypeOut
    ledger: LedgerRef


class ListEntityTypesResult(Out):
    entity_types: list[EntityTypeOut]
