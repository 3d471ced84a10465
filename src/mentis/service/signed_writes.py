"""Remote signing in two phases: a client that holds the private key signs a write the server runs.

``prepare_write`` runs a write operation with a :class:`~mentis.store.seal.Seal` that does not
commit: the store builds the entry, inserts nothing, rolls its transaction back, and the seal
carries out the entry's unsigned fields (chain, kind, id, at, agent, body_hash) and its body, which
the client receives. The client checks the body holds what it asked for, signs the statement
(:meth:`signing.Signer.sign`) and sends ``signed_write`` with the same tool and arguments plus the
id, time and signature: the server runs the operation again with a seal planning that id and time,
so the entry it builds is the one the client signed, and signing it with the client's ``key_id``
and envelope, which the store verifies against the agent registry.

The server chooses every id: prepare_write a fresh UUID, and signed_write takes only a UUID that no
ledger entry has had (the store claims it inside the write transaction, forgotten records included:
:func:`mentis.store.shared.entry_ids.claim_id`), so a client cannot give its entry the id of another
record, in its own repository or any other.

If anything the body depends on changed between the phases (a concurrent write changed which
rejected conclusions the new one re-asserts, say), the body hash differs from the one the client
signed and ``signed_write`` refuses with a Conflict before the store sees it: prepare again.

The operations themselves (which tool, its arguments) are looked up in
:mod:`mentis.service.operations`; this module holds the phases' rules and models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from mentis.api.signed import PrepareWriteResult, SignedWriteInput, SignedWriteResult
from mentis.errors import Conflict, InvalidInput
from mentis.ledger import signing
from mentis.service.access import Caller
from mentis.store.seal import Seal

MULTI_APPEND = frozenset({"import_memory_md"})
"""Write operations that append more than one ledger entry: one signature cannot cover them."""
PHASES = frozenset({"prepare_write", "signed_write"})
SERVER_HELD = frozenset({"accept_proposal", "reject_proposal"})
"""Writes whose content the server holds (the review queue's proposals), not the call: a client
cannot see what it would sign, and preparing one would decide it."""
CONFIGURATION = frozenset({"create_webhook", "delete_webhook", "redeliver_webhook"})
"""Write operations that change configuration outside the ledger (webhooks): no entry to sign."""


def check_signable(tool: str, writes: bool) -> None:
    """InvalidInput unless ``tool`` (an operation that ``writes`` or not) appends the one ledger
    entry a client can sign."""
    if tool in PHASES or tool in CONFIGURATION or not writes:
        raise InvalidInput(f"tool: {tool} writes nothing to sign; call it directly", field="tool")
    if tool in SERVER_HELD:
        raise InvalidInput(
            f"tool: {tool} decides a proposal the server holds; a client cannot sign it. Record the "
            "attempt yourself (record_attempt, signed) and reject the proposal, or decide it where "
            "the server signs (the CLI on the store, or a server with MENTIS_SIGNING_KEY)",
            field="tool",
        )
    if tool in MULTI_APPEND:
        raise InvalidInput(
            f"tool: {tool} appends one ledger entry per item, and one signature covers one entry; "
            "send its items one at a time (append_thought) instead",
            field="tool",
        )


def prepare(tool: str, write: Callable[[Seal], object]) -> PrepareWriteResult:
    """Phase 1: run ``write`` (the operation ``tool``) with a seal that does not commit, and
    return the unsigned fields and the body of the entry it would append; writes nothing."""
    seal = Seal(commit=False)
    write(seal)
    if not seal.sealed:
        raise InvalidInput(f"tool: this {tool} call appends no ledger entry; nothing to sign", field="tool")
    fields, body = seal.sealed[0]
    return PrepareWriteResult(tool=tool, **fields._asdict(), body=body.decode("utf-8"))


def write_signed(
    req: SignedWriteInput, caller: Caller, write: Callable[[Seal], BaseModel]
) -> SignedWriteResult:
    """Phase 2: run ``write`` (the operation ``req.tool``) with phase 1's id and time, its entry
    sealed with the client's signature, which the store verifies against the registry; refused
    when ``at`` is not within :data:`signing.SKEW_S` of the server's clock."""
    signing.Envelope.parse(req.sig)
    signing.check_skew(req.at)

    def sign(fields: signing.Unsigned) -> tuple[str, str]:
        if len(seal.sealed) > 1:
            raise Conflict(f"{req.tool} appended a second ledger entry; one signature covers one entry")
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
        return req.key_id, req.sig

    seal = Seal(id=req.id, at=req.at, sign=sign)
    out = write(seal)
    if not seal.sealed:
        raise InvalidInput(f"tool: this {req.tool} call appended no ledger entry", field="tool")
    result: dict[str, Any] = out.model_dump(mode="json", by_alias=True)
    return SignedWriteResult(tool=req.tool, result=result)
