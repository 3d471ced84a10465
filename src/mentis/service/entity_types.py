"""The entity-type registry (issue 27, provenance): the names a thought's ``entity_type`` may take
(docs/provenance.md).

The registry is open: anyone who may write registers a new type with ``upsert_entity_type``; each
upsert is an entry of the system chain ``__entity_types__`` (the store's
:mod:`~mentis.store.shared.entity_types`), verified on open and exported like every chain.
Replacing the description of a type that exists (a registered one, or one of the
:data:`BUILTIN` types Mentis offers without an entry) is an admin's, so one repository's writer
cannot reword what everyone's thoughts mean; upserting it again with the same description is a
writer's and changes nothing. ``append_thought`` refuses a name that is neither built in nor
registered, naming ``entity_type`` and how to register it.
"""

from __future__ import annotations

from mentis.api.common import LedgerRef
from mentis.api.entity_types import (
    EntityTypeOut,
    ListEntityTypesInput,
    ListEntityTypesResult,
    UpsertEntityTypeInput,
    UpsertEntityTypeResult,
)
from mentis.errors import Forbidden, InvalidInput
from mentis.ledger.bodies import EntityTypeBody
from mentis.service.access import Caller
from mentis.service.context import ServiceContext
from mentis.store.protocol import Store
from mentis.store.seal import Seal

BUILTIN: dict[str, str] = {
    "service": "a running service or deployment (an API server, a worker, a queue)",
    "file": "a file or directory of the repository",
    "module": "a module, package or component of the code",
    "library": "a third-party library or framework the code depends on",
    "api": "an interface: an endpoint, a function signature, a protocol",
    "config": "configuration: settings, environment variables, flags",
    "database": "a database, a table, a schema or a migration",
    "tool": "a tool the work uses: a build tool, CI, a linter, a harness",
    "person": "a person: a user, a teammate, a maintainer",
}
"""Types every store knows without a ledger entry (an admin's upsert replaces the description)."""


class EntityTypeOps:
    """The registry's operations over one :class:`ServiceContext`."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def _current(self) -> dict[str, EntityTypeOut]:
        out = {
            name: EntityTypeOut(name=name, description=text, builtin=True) for name, text in BUILTIN.items()
        }
        for _, body in self.ctx.store.entity_types():
            out[body.name] = EntityTypeOut(
                name=body.name,
                description=body.description,
                builtin=body.name in BUILTIN,
                updated_at=body.at,
                updated_by=body.by,
            )
        return out

    def list_entity_types(self, caller: Caller, req: ListEntityTypesInput) -> ListEntityTypesResult:
        return ListEntityTypesResult(entity_types=sorted(self._current().values(), key=lambda t: t.name))

    def upsert_entity_type(
        self, caller: Caller, req: UpsertEntityTypeInput, seal: Seal
    ) -> UpsertEntityTypeResult:
        if not caller.can_write:
            raise Forbidden("upsert_entity_type: this caller may only read; use a token with write scope")
        current = self._current().get(req.name)
        if current is not None and current.description != req.description and not caller.admin:
            raise Forbidden(
                f"name: entity type {req.name!r} exists; changing its description needs admin scope "
                "(`mentis token create --scope admin`); upsert it with its current description, or "
                "register a new name"
            )
        if current is not None and current.updated_at is not None and current.description == req.description:
            for entry, body in self.ctx.store.entity_types():
                if body.name == req.name:
                    return UpsertEntityTypeResult(entity_type=current, ledger=LedgerRef.of(entry))
        body = EntityTypeBody(name=req.name, description=req.description, by=caller.agent_id, at=seal.time())
        entry = self.ctx.store.append_entity_type(body, seal)
        out = EntityTypeOut(
            name=body.name,
            description=body.description,
            builtin=body.name in BUILTIN,
            updated_at=body.at,
            updated_by=body.by,
        )
        return UpsertEntityTypeResult(entity_type=out, ledger=LedgerRef.of(entry))


def check_entity_type(store: Store, name: str | None) -> None:
    """InvalidInput naming ``entity_type`` when ``name`` is neither built in nor registered."""
    if name is None or name in BUILTIN or store.entity_type_known(name):
        return
    raise InvalidInput(
        f"entity_type: {name!r} is not a registered entity type; register it first with "
        f"upsert_entity_type (`mentis entity-type upsert {name} --description TEXT`), or use one "
        "list_entity_types gives",
        field="entity_type",
    )
