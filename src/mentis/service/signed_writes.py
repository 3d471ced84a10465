"""Remote signing in two phases: a client that holds the private key signs a write the server runs.

``prepare_write`` runs a write operation up to its one ledger append, where :func:`signing.capture`
stops it: the store's transaction rolls back, nothing is written, and the client receives the
entry's unsigned fields (chain, kind, id, at, agent, body_hash) and its body. The client checks the
body holds what it asked for, signs the statement (:meth:`signing.Signer.sign`) and sends
``signed_write`` with the same tool and arguments plus the id, time and signature: the server runs
the operation again with the planned id and time (:func:`signing.planned`), so the entry it builds
is the one the client signed, and the store seals it with the client's ``key_id`` and envelope
(:func:`signing.presigned`), verifying them against the agent registry.

The server chooses every id: prepare_write a fresh UUID, and signed_write takes only a UUID that no
ledger entry has had (the store claims it inside the write transaction, forgotten records included:
:meth:`mentis.store.shared.core.RelationalCore._claim_id`), so a client cannot give its entry the id of
another record, in its own repository or any other.

If anything the body depends on changed between the phases (a concurrent write changed which
rejected conclusions the new one re-asserts, say), the body hash differs from the one the client
signed and ``signed_write`` refuses with a Conflict before the store sees it: prepare again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mentis.api.common import parse
from mentis.api.signed import PrepareWriteInput, PrepareWriteResult, SignedWriteInput, SignedWriteResult
from mentis.errors import Conflict, InvalidInput
from mentis.ledger import signing
from mentis.service.context import Caller

if TYPE_CHECKING:
    from mentis.service.memory import Memory
    from mentis.service.operations import Operation

MULTI_APPEND = frozenset({"import_memory_md"})
"""Write operations that append more than one ledger entry: one signature cannot cover them."""
PHASES = frozenset({"prepare_write", "signed_write"})


def _write_operation(name: str) -> Operation:
    from mentis.service.operations import BY_NAME

    op = BY_NAME.get(name)
    if op is None:
        raise InvalidInput(f"tool: no operation named {name!r}", field="tool")
    if name in PHASES or not op.writes:
        raise InvalidInput(f"tool: {name} writes nothing to sign; call it directly", field="tool")
    if name in MULTI_APPEND:
        raise InvalidInput(
            f"tool: {name} appends one ledger entry per item, and one signature covers one entry; "
            "send its items one at a time (append_thought) instead",
            field="tool",
        )
    return op


def prepare_write(memory: Memory, caller: Caller, req: PrepareWriteInput) -> PrepareWriteResult:
    """Phase 1: the unsigned fields and body of the entry ``req.tool`` would append; writes nothing."""
    op = _write_operation(req.tool)
    arguments = parse(op.input, req.arguments)
    try:
        with signing.planned(None, None), signing.signing_with(signing.capture):
            op.call(memory, caller, arguments)
    except signing.Prepared as prepared:
        fields, body = prepared.fields, prepared.body
    else:
        raise InvalidInput(
            f"tool: this {req.tool} call appends no ledger entry; nothing to sign", field="tool"
        )
    if body is None:  # a store that calls the sign hook without going through signing.sign_append
        raise InvalidInput(f"tool: the store did not report the body of {req.tool}'s entry", field="tool")
    return PrepareWriteResult(tool=req.tool, **fields._asdict(), body=body.decode("utf-8"))


def signed_write(memory: Memory, caller: Caller, req: SignedWriteInput) -> SignedWriteResult:
    """Phase 2: run ``req.tool`` with phase 1's id and time, its entry sealed with the client's
    signature (which the store verifies against the registry); refused when ``at`` is not within
    :data:`signing.SKEW_S` of the server's clock."""
    op = _write_operation(req.tool)
    arguments = parse(op.input, req.arguments)
    signing.Envelope.parse(req.sig)
    signing.check_skew(req.at)
    calls: list[signing.Unsigned] = []
    presigned = signing.presigned(req.key_id, req.sig)

    def sign(fields: signing.Unsigned) -> tuple[str, str]:
        if calls:
            raise Conflict(f"{req.tool} appended a second ledger entry; one signature covers one entry")
        calls.append(fields)
        if fields.agent != caller.agent_id:
            raise InvalidInput(
                f"sig: the entry's agent {fields.agent!r} is not the caller {caller.agent_id!r}", field="sig"
            )
        if fields.id != req.id or fields.at != req.at:
            raise InvalidInput(f"id: {req.tool} does not take a planned id and time", field="id")
        if req.body_hash is not None and fields.body_hash != req.body_hash:
            raise Conflict(
                f"the content of this {req.tool} changed since prepare_write (body hash {fields.body_hash}, "
                f"signed {req.body_hash}), e.g. a concurrent write; call prepare_write again and sign that"
            )
        return presigned(fields)

    with signing.planned(req.id, req.at), signing.signing_with(sign):
        out = op.call(memory, caller, arguments)
    if not calls:
        raise InvalidInput(f"tool: this {req.tool} call appended no ledger entry", field="tool")
    result: dict[str, Any] = out.model_dump(mode="json", by_alias=True)
    return SignedWriteResult(tool=req.tool, result=result)
