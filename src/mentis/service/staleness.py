"""Which passed checks no longer speak for the code: attempts whose check passed on files whose
blob id is different now (``mentis stale``).

Mentis never reads a checkout: the caller passes today's blob ids (``mentis stale`` computes them
with git, as ``mentis context`` does), and this compares them with the ``file_hashes`` each
passed attempt recorded. A recorded path missing from the caller's map counts as deleted, so the
map must cover the whole working tree. Only repositories the caller may read are searched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mentis.api.attempts import StaleAttempt, StaleFile, StaleInput, StaleResult
from mentis.service.access import may_read

if TYPE_CHECKING:
    from mentis.service.access import Caller
    from mentis.store.protocol import Store

MAX_TASKS = 100_000


def stale_attempts(store: Store, caller: Caller, req: StaleInput) -> StaleResult:
    may_read(caller, req.repository)
    found = store.run_sql(
        "select distinct task_id from attempts where repository = :repository and status = 'passed'",
        {"repository": req.repository},
        visible=caller.reads_key,
        max_rows=MAX_TASKS,
        max_bytes=64 * 1024 * 1024,
        timeout_s=30.0,
    )
    current = req.current_file_hashes
    out: list[StaleAttempt] = []
    checked = 0
    for (task_id,) in found.rows:
        for stored in store.task_history(req.repository, str(task_id)):
            b = stored.body
            hashes = (b.code_context and b.code_context.file_hashes) or {}
            if b.check is None or b.status != "passed" or not hashes:
                continue
            checked += 1
            if stored.corrections and not req.include_outdated:
                continue
            changed = [
                StaleFile(path=p, recorded=h, current=current.get(p))
                for p, h in sorted(hashes.items())
                if current.get(p) != h
            ]
            if changed:
                out.append(
                    StaleAttempt(
                        attempt_id=b.attempt_id,
                        task_id=b.task_id,
                        title=b.task_title,
                        created_at=b.created_at,
                        agent_id=b.agent_id,
                        check_command=b.check.command,
                        commit=b.commit,
                        changed=changed,
                        outdated=bool(stored.corrections),
                    )
                )
    out.sort(key=lambda a: a.created_at, reverse=True)
    return StaleResult(repository=req.repository, attempts=out, passed_checked=checked)
