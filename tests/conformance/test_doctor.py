"""``mentis doctor`` on either store: every chain reported, a store that does not verify is a fail."""

from __future__ import annotations

import socket
from collections.abc import Callable
from contextlib import closing

from mentis.config import Settings
from mentis.service import doctor
from mentis.service.memory import Caller, Memory

from .helpers import REPOS, fill


def _free() -> tuple[str, int]:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return "127.0.0.1", int(sock.getsockname()[1])


def test_doctor_reports_every_chain_head_of_either_store(
    memory: Memory, caller: Caller, settings: Settings
) -> None:
    fill(memory, caller)
    heads = {r.chain: r.head_seq for r in memory.store.verify()}
    memory.close()
    findings = doctor.run(settings, _free())
    assert [f for f in findings if f.status == "fail"] == []
    chains = {f.check.removeprefix("chain "): f.detail for f in findings if f.check.startswith("chain ")}
    assert {c: d.split(",")[0] for c, d in chains.items()} == {c: f"head seq {s}" for c, s in heads.items()}


def test_doctor_reports_a_chain_that_does_not_verify_as_a_fail_with_how_to_recover(
    memory: Memory, caller: Caller, settings: Settings, raw_sql: Callable[[str], object]
) -> None:
    fill(memory, caller)
    memory.close()
    raw_sql(f"UPDATE entries SET agent = agent || 'x' WHERE chain = '{REPOS[0]}' AND seq = 1")
    findings = doctor.run(settings, _free())
    (ledger,) = [f for f in findings if f.check == "ledger"]
    assert ledger.status == "fail" and "1 chain(s) do not verify" in ledger.detail
    chains = {f.check.removeprefix("chain "): f for f in findings if f.check.startswith("chain ")}
    assert {c: f.status for c, f in chains.items()} == {REPOS[0]: "fail", REPOS[1]: "ok"}
    assert "seq 1" in chains[REPOS[0]].detail and "refused" in chains[REPOS[0]].detail
    assert "mentis export --skip-damaged" in chains[REPOS[0]].fix


def test_doctor_reports_a_store_that_does_not_verify_as_a_whole_as_a_fail(
    memory: Memory, caller: Caller, settings: Settings, raw_sql: Callable[[str], object]
) -> None:
    fill(memory, caller)
    memory.close()
    raw_sql("INSERT INTO bodies(rowid, body) SELECT max(rowid) + 100, body FROM bodies GROUP BY body LIMIT 1")
    findings = doctor.run(settings, _free())
    (ledger,) = [f for f in findings if f.check == "ledger"]
    assert ledger.status == "fail" and "belongs to no entry" in ledger.detail
    assert "mentis verify-integrity" in ledger.fix
    assert not [f for f in findings if f.check.startswith("chain ")]
