"""Malformed checkpoint files: each refused with an error naming the file and the field, and a
checkpoint's signed bytes are RFC 8785 (any JCS library reproduces them)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from mentis.errors import InvalidInput
from mentis.ledger import checkpoint, signing
from mentis.ledger.canonical import canonical
from mentis.service.memory import Memory
from tests.checkpoints.conftest import ADMIN, record


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def good(memory: Memory, operator_key: Path) -> dict[str, Any]:
    record(memory, 2)
    return dict(memory.checkpoint(ADMIN, operator_key).checkpoint.to_json())


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], bytes]:
    def edit(doc: dict[str, Any]) -> bytes:
        target: Any = doc
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value
        return orjson.dumps(doc)

    return edit


def _drop(name: str) -> Callable[[dict[str, Any]], bytes]:
    return lambda doc: orjson.dumps({k: v for k, v in doc.items() if k != name})


CASES: dict[str, tuple[Callable[[dict[str, Any]], bytes], str]] = {
    "not JSON": (lambda doc: b'{"schema": "mentis.checkpoint/1", ', "checkpoint"),
    "not an object": (lambda doc: b"[1, 2]", "checkpoint"),
    "wrong schema version": (_set("schema", "mentis.checkpoint/2"), "schema"),
    "missing chains": (_drop("chains"), "chains"),
    "missing sig": (_drop("sig"), "sig"),
    "empty chains": (_set("chains", []), "chains"),
    "unknown field": (_set("note", "x"), "note"),
    "bad time": (_set("at", "yesterday"), "at"),
    "bad key id": (_set("key_id", "rsa:1234"), "key_id"),
    "bad hash hex": (_set("chains.0.hash", "ZZ" * 32), "chains[0].hash"),
    "short hash": (_set("chains.0.hash", "ab" * 8), "chains[0].hash"),
    "negative seq": (_set("chains.0.seq", -1), "chains[0].seq"),
    "seq as text": (_set("chains.0.seq", "1"), "chains[0].seq"),
    "chain missing its name": (_set("chains.0", {"seq": 0, "hash": "ab" * 32}), "chains[0]"),
    "signature of the wrong form": (_set("sig", "not-a-signature"), "sig"),
    "signature over other content": (_set("chains.0.seq", 0), "sig"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_checkpoint_is_refused_naming_the_file_and_the_field(
    case: str, good: dict[str, Any], memory: Memory, tmp_path: Path
) -> None:
    edit, field = CASES[case]
    path = tmp_path / f"{case.replace(' ', '-')}.json"
    path.write_bytes(edit(orjson.loads(orjson.dumps(good))))
    with pytest.raises(InvalidInput) as refused:
        memory.verify_checkpoints(ADMIN, [path])
    assert refused.value.field == field, refused.value.message
    assert str(path) in refused.value.message
    if field not in ("checkpoint",):
        assert repr(field) in refused.value.message or field in refused.value.message


def test_the_signature_covers_the_rfc8785_bytes_of_the_document_without_sig(good: dict[str, Any]) -> None:
    cp = checkpoint.parse(orjson.dumps(good))
    unsigned = {k: v for k, v in good.items() if k != "sig"}
    assert rfc8785.dumps(unsigned) == canonical(cp.unsigned())
    assert len(base64.urlsafe_b64decode(good["sig"] + "==")) == 64


def test_a_checkpoint_verifies_with_the_public_key_of_its_key_id(
    good: dict[str, Any], memory: Memory
) -> None:
    key = memory.store.agent_registry().keys[good["key_id"]]
    public: Ed25519PublicKey = signing.parse_public(key.public_key)
    unsigned = {k: v for k, v in good.items() if k != "sig"}
    public.verify(base64.urlsafe_b64decode(good["sig"] + "=="), rfc8785.dumps(unsigned))  # raises if not
