"""``publish``: make a private attempt or thought readable to a wider scope (issue 26).

Its writer or an admin appends a ``visibility`` entry; a scope is only ever widened (repository ⊃
agent ⊃ session): to narrow one, forget the record and write it again. A caller who may not read
the record is told there is none, as for a record that does not exist (so a non-admin can only
ever publish its own).
"""

from __future__ import annotations

from mentis.api.common import LedgerRef
from mentis.api.scopes import PublishInput, PublishResult
from mentis.errors import Forbidden, InvalidInput, NotFound
from mentis.ledger.bodies import SCOPE_SEP, VisibilityBody, visibility_of, widens
from mentis.service.access import Caller, may_write
from mentis.service.context import ServiceContext
from mentis.store.seal import Seal


def publish(ctx: ServiceContext, caller: Caller, req: PublishInput, seal: Seal) -> PublishResult:
    may_write(caller, req.repository)
    found = ctx.store.record_scope(req.repository, req.record_id)
    if found is None or not caller.reads(req.repository, found[2]):
        raise NotFound(f"no attempt or thought {req.record_id} in repository {req.repository}")
    _, body, scope = found
    now = visibility_of(req.repository, scope)
    if not widens(req.visibility, now):
        raise InvalidInput(
            f"visibility: {req.record_id} is visible to {now!r} already; publish only widens a scope "
            "(repository > agent > session): to narrow it, forget the record and write it again",
            field="visibility",
        )
    if body.agent_id != caller.agent_id and not caller.admin:
        raise Forbidden(f"only its writer ({body.agent_id}) or an admin may publish {req.record_id}")
    vector = ctx.embed([body.embed_text])[0]
    entry = ctx.store.append_visibility(
        VisibilityBody(
            record_id=req.record_id,
            repository=req.repository,
            visibility=req.visibility,
            at=seal.time(),
            agent_id=caller.agent_id,
        ),
        vector,
        seal,
    )
    return PublishResult(record_id=req.record_id, visibility=req.visibility, ledger=LedgerRef.of(entry))


def visibilities(ctx: ServiceContext, caller: Caller, record_ids: list[str]) -> dict[str, str]:
    """The visibility each live attempt or thought among ``record_ids`` has now (its writer's and
    any ``publish`` since), for the records ``caller`` may read; the others are left out."""
    out: dict[str, str] = {}
    for record_id, scope in ctx.store.record_scopes(record_ids).items():
        repository = scope.split(SCOPE_SEP, 1)[0]
        if caller.reads(repository, scope):
            out[record_id] = visibility_of(repository, scope)
    return out


__all__ = ["publish", "visibilities"]
