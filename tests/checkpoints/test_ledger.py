"""The ``checkpoint`` entry on the ledger: it stands only in ``__checkpoints__`` and links nothing,
its body is a checkpoint document, only an admin imports that chain and only an admin's export
carries it (it names every chain's head)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from mentis.errors import Forbidden
from mentis.ledger.links import CHECKPOINTS_CHAIN, body_links
from mentis.service.memory import Caller, Memory
from tests.checkpoints.conftest import ADMIN, REPO, record

BODY = orjson.dumps({"schema": "mentis.checkpoint/1", "chains": []})


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_checkpoint_entry_stands_only_in_the_checkpoints_chain_and_links_nothing() -> None:
    assert body_links(CHECKPOINTS_CHAIN, "checkpoint", "id", BODY) == []
    assert "only checkpoints stand" in str(body_links(REPO, "checkpoint", "id", BODY))
    attempt = orjson.dumps({"repository": CHECKPOINTS_CHAIN, "attempt_id": "id"})
    assert "only checkpoints stand" in str(body_links(CHECKPOINTS_CHAIN, "attempt", "id", attempt))
    assert "checkpoint body" in str(body_links(CHECKPOINTS_CHAIN, "checkpoint", "id", b'{"chains": []}'))


def test_only_an_admin_exports_or_imports_the_checkpoints_chain(
    memory: Memory, operator_key: Path, other_settings_memory: Memory
) -> None:
    record(memory, 1)
    memory.checkpoint(ADMIN, operator_key)
    scoped = Caller(agent_id="reader", repositories=("github.com/*",))
    out = io.BytesIO()
    memory.export(scoped, out)
    chains = {orjson.loads(line)["entry"]["chain"] for line in out.getvalue().splitlines()[1:]}
    assert CHECKPOINTS_CHAIN not in chains and REPO in chains
    full = io.BytesIO()
    memory.export(ADMIN, full)
    header, *rows = [orjson.loads(line) for line in full.getvalue().splitlines()]
    del header["heads"]["__agents__"]  # the registry's chain is the admin's anyway: leave it out
    lines = [orjson.dumps(header)] + [orjson.dumps(r) for r in rows if r["entry"]["chain"] != "__agents__"]
    writer = Caller(agent_id="writer", repositories=("*",))
    with pytest.raises(Forbidden, match="admin"):
        other_settings_memory.import_(writer, lines)
    assert other_settings_memory.store.chain_heads() == {}


@pytest.fixture
def other_settings_memory(tmp_path: Path) -> Iterator[Memory]:
    from mentis.config import Settings
    from mentis.providers.embed import HashEmbedder

    m = Memory.open(
        Settings(home=tmp_path / "other", db_path=tmp_path / "other" / "m.db", embedder="hash"),
        HashEmbedder(),
    )
    yield m
    m.close()
