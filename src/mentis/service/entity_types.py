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
from mentis.errors import InvalidInput
from mentis.ledger.bodies import EntityTypeBody
from mentis.service.access import Caller, may_describe_entity_type
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

    def _current(self) -> dict[str, tuple[EntityTypeOut, LedgerRef | None]]:
        """Every type by name, with the ledger entry of its newest upsert (None: built in, never upserted)."""
        out: dict[str, tuple[EntityTypeOut, LedgerRef | None]] = {
            name: (EntityTypeOut(name=name, description=text, builtin=True), None)
            for name, text in BUILTIN.items()
        }
        for entry, body in self.ctx.store.entity_types():
            out[body.name] = (_out(body), LedgerRef.of(entry))
        return out

    def list_entity_types(self, caller: Caller, req: ListEntityTypesInput) -> ListEntityTypesResult:
        return ListEntityTypesResult(entity_types=[t for _, (t, _) in sorted(self._current().items())])

    def upsert_entity_type(
        self, caller: Caller, req: UpsertEntityTypeInput, seal: Seal
    ) -> UpsertEntityTypeResult:
        current, ledger = self._current().get(req.name, (None, None))
        same = current is not None and current.description == req.description
        may_describe_entity_type(caller, req.name, replaces=current is not None and not same)
        if same and current is not None and ledger is not None:  # upserted with this text: nothing new
            return UpsertEntityTypeResult(entity_type=current, ledger=ledger)
        body = EntityTypeBody(name=req.name, description=req.description, by=caller.agent_id, at=seal.time())
        entry = self.ctx.store.append_entity_type(body, seal)
        return UpsertEntityTypeResult(entity_type=_out(body), ledger=LedgerRef.of(entry))


def _out(body: EntityTypeBody) -> EntityTypeOut:
    return EntityTypeOut(
        name=body.name,
        description=body.description,
        builtin=body.name in BUILTIN,
        updated_at=body.at,
        updated_by=body.by,
    )


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
