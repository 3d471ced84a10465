"""Retrospectives: a thought of role Retrospective (type Summary) that sums up a task, linked to
the attempts it covers (as refs; relations link thoughts only) and to the thoughts it covers
(Summarizes relations); and the freshest one of a task, which ``search`` shows first in that task's
preview while no attempt of the task is newer (docs/thoughts.md#retrospectives).
"""

from __future__ import annotations

from collections.abc import Sequence

from mentis.api.attempts import RetrospectiveOut
from mentis.api.thoughts import (
    MAX_REFS,
    MAX_RELATIONS,
    AppendRetrospectiveInput,
    AppendRetrospectiveResult,
    AppendThoughtInput,
    Relation,
)
from mentis.errors import InvalidInput
from mentis.ledger.signing import now_iso
from mentis.service.access import Caller, may_read, may_write
from mentis.service.thoughts import ThoughtOps
from mentis.store.protocol import Store
from mentis.store.seal import Seal

ROLE = "Retrospective"
TYPE = "Summary"


def append_retrospective(
    thoughts: ThoughtOps, caller: Caller, req: AppendRetrospectiveInput, seal: Seal
) -> AppendRetrospectiveResult:
    """Check the task and every covered id before anything is written, then append the thought."""
    may_write(caller, req.repository)
    store = thoughts.store
    readable = None if caller.admin else caller.own_scopes(req.repository)  # never another's private one
    history = store.task_history(req.repository, req.task_id, readable)
    if not history:
        raise InvalidInput(
            f"task_id: no task {req.task_id!r} in {req.repository} (or all its attempts were forgotten); "
            "a retrospective sums up a task with attempts",
            field="task_id",
        )
    own = [a.body.attempt_id for a in history]
    covers = list(dict.fromkeys(req.covers if req.covers is not None else own[-MAX_REFS:]))
    known = store.find_records(covers)
    attempts, covered_thoughts = [], []
    for target in covers:
        repo_kind = known.get(target)
        if repo_kind is None or repo_kind[0] != req.repository:
            raise InvalidInput(f"covers: no attempt or thought {target} in {req.repository}", field="covers")
        if repo_kind[1] == "thought":
            covered_thoughts.append(target)
        elif target in own:
            attempts.append(target)
        else:
            raise InvalidInput(f"covers: attempt {target} is not of task {req.task_id}", field="covers")
    if not attempts:
        raise InvalidInput(
            f"covers: name at least one attempt of task {req.task_id} (or leave covers out: all of them)",
            field="covers",
        )
    if len(attempts) > MAX_REFS or len(covered_thoughts) > MAX_RELATIONS:
        raise InvalidInput(
            f"covers: at most {MAX_REFS} attempts and {MAX_RELATIONS} thoughts", field="covers"
        )
    thought = AppendThoughtInput(
        repository=req.repository,
        type=TYPE,
        role=ROLE,
        content=req.summary,
        refs=attempts,
        relations=[Relation(kind="Summarizes", target_id=t) for t in covered_thoughts],
        task_id=req.task_id,
        tags=req.tags,
        session_id=req.session_id,
        thought_id=None,
    )
    # no near-duplicate supersession: another task's retrospective may read alike
    stored = thoughts.append_thought(caller, thought, seal, link_duplicates=False)
    return AppendRetrospectiveResult(
        thought_id=stored.thought_id,
        ledger=stored.ledger,
        attempts=attempts,
        thoughts=covered_thoughts,
        warnings=stored.warnings,
    )


def fresh_retrospectives(
    store: Store, caller: Caller, tasks: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], RetrospectiveOut]:
    """Per (repository, task_id): its newest retrospective still standing (not forgotten nor
    invalidated), when it is newer than every attempt of the task. A retrospective covers at least
    one attempt of its task, so the store finds them through its attempts' edges, by index."""
    out: dict[tuple[str, str], RetrospectiveOut] = {}
    for repository, _ in tasks:
        may_read(caller, repository)
    for (repository, task_id), rowids in store.task_thoughts(tasks, ROLE).items():
        loaded = store.load_thoughts(rowids[:8])
        bodies = [loaded[r].body for r in rowids[:8] if r in loaded]
        scopes = store.record_scopes([b.thought_id for b in bodies])  # as they stand: published or not
        bodies = [b for b in bodies if caller.reads(repository, scopes.get(b.thought_id, b.scope))]
        invalid = store.invalidations([b.thought_id for b in bodies], now_iso())
        standing = [b for b in bodies if b.thought_id not in invalid]
        if not standing:
            continue
        newest = max(standing, key=lambda b: b.created_at)
        readable = (
            None if caller.admin else caller.own_scopes(repository)
        )  # another's private attempt counts not
        last = max((a.body.created_at for a in store.task_history(repository, task_id, readable)), default="")
        if newest.created_at > last:
            out[(repository, task_id)] = RetrospectiveOut(
                thought_id=newest.thought_id,
                summary=newest.content,
                created_at=newest.created_at,
                agent_id=newest.agent_id,
            )
    return out


__all__ = ["append_retrospective", "fresh_retrospectives"]
