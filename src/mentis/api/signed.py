"""The two phases of a remotely signed write (``prepare_write``, ``signed_write``): inputs and
outputs. How they run is :mod:`mentis.service.signed_writes`."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, JsonValue

from mentis.api.common import Identifier, Out, Strict, Timestamp, Uuid

Arguments = Annotated[dict[Identifier, JsonValue], Field(max_length=64)]
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
KeyId = Annotated[str, Field(min_length=1, max_length=80)]
Envelope = Annotated[str, Field(min_length=1, max_length=400)]


class PrepareWriteInput(Strict):
    tool: Identifier
    arguments: Arguments


class PrepareWriteResult(Out):
    tool: str
    chain: str
    kind: str
    id: str
    at: str
    agent: str
    body_hash: str
    body: str
    """The entry's body, canonical JSON text; its sha256 is ``body_hash``."""


class SignedWriteInput(Strict):
    tool: Identifier
    arguments: Arguments
    id: Uuid
    """The id prepare_write chose (a UUID); the store refuses one any ledger entry already has."""
    at: Timestamp
    key_id: KeyId
    sig: Envelope
    body_hash: Hex64 | None = None
    """The body hash the client signed (from prepare_write); when given, a write whose body came
    out otherwise is refused with a Conflict instead of a signature error."""


class SignedWriteResult(Out):
    tool: str
    result: dict[str, JsonValue]
    """What the tool itself returns (its output, as a direct call would give it)."""
