"""The text an agent reads from a tool: each result rendered for a model, not as indented JSON.

An MCP tool result carries two things: the structured content (the complete typed result, checked
against the tool's output schema: what a program reads) and a text block (what most harnesses hand
the model). This module writes the text block, one function per result type. The rules:

- Progressive disclosure: a search gives one short block per task — status, title, task id, a
  preview of the matched attempt cut to :data:`PREVIEW_CHARS`, outdated reason, stale files, how
  many attempts — and ``recall`` with repository + task_id gives the rest.
- Nothing an agent acts on is dropped: a status, a correction's reason, stale files, warnings,
  re-asserted rejections, truncation, ids it passes back (task ids to ``recall``; full attempt,
  thought and skill ids wherever a tool takes one — a UUID costs about 22 tokens, so a search
  block names its task, not its attempts).
- Nulls, empty lists, score parts and ledger hashes are left out (the structured content has them).

A result type without a renderer of its own gets compact JSON without nulls or empty values.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import singledispatch
from typing import Any

import orjson
from pydantic import BaseModel

from mentis.api.agents import AgentOut, AgentResult, ListAgentsResult
from mentis.api.attempts import (
    AttemptPreview,
    ForgetResult,
    MarkOutdatedResult,
    RecallResult,
    RecordAttemptResult,
    SearchResult,
    TaskResult,
)
from mentis.api.common import Rejection
from mentis.api.federation import FederatedSearchResult
from mentis.api.skills import (
    DeleteSkillResult,
    ListSkillsResult,
    ReadSkillResult,
    SearchSkillsResult,
    SkillStatusResult,
    SkillSummary,
    SkillVersionsResult,
    UploadSkillResult,
)
from mentis.api.stats import StatsResult
from mentis.api.thoughts import (
    AppendRetrospectiveResult,
    AppendThoughtResult,
    ContextBundleResult,
    ForgetThoughtResult,
    MemoryMdExportResult,
    MemoryMdImportResult,
    RecentContextResult,
    SearchThoughtsResult,
    ThoughtOut,
    TraverseResult,
)
from mentis.api.verify import VerifyResult

PREVIEW_CHARS = 150
"""A search block's preview of its matched attempt (action, then conclusion or observation)."""
THOUGHT_CHARS = 240
"""A thought's content in a list (search_thoughts, context bundles, traversals)."""
HISTORY_COLUMNS = ("attempt_id", "created_at", "agent_id", "status", "action", "observation")
"""The first columns of recall's task history (``Memory.HISTORY_COLUMNS``): rendered as attempts."""


def cut(text: str | None, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _when(at: str | None) -> str:
    return (at or "")[:16].replace("T", " ")


def _lines(*parts: str | None) -> str:
    return "\n".join(p for p in parts if p)


def _compact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v not in (None, [], {}, "")}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


@singledispatch
def render(result: BaseModel) -> str:
    """Compact JSON without nulls or empty values (a result type without a renderer of its own)."""
    return orjson.dumps(_compact(result.model_dump(mode="json"))).decode()


def _warnings(warnings: Iterable[str]) -> list[str]:
    return [f"warning: {w}" for w in warnings]


def _reasserts(rejections: Iterable[Rejection]) -> list[str]:
    return [
        f"re-asserts a rejected conclusion ({r.match}, {r.rejected_kind} {r.rejected_id}, rejected by "
        f"{r.by_id} {_when(r.at)}): {cut(r.reason, 200)}"
        for r in rejections
    ]


# ---------------------------------------------------------------- attempts


@render.register
def _(r: RecordAttemptResult) -> str:
    head = f"recorded attempt {r.attempt_id} [{r.status}] (ledger seq {r.ledger.seq})"
    return _lines(head, *_warnings(r.warnings), *_reasserts(r.reasserts))


@render.register
def _(r: SearchResult) -> str:
    if not r.tasks:
        return f"no matching tasks ({r.ranking})"
    repos = {t.repository for t in r.tasks}
    where = f" in {next(iter(repos))}" if len(repos) == 1 else ""
    head = f"{len(r.tasks)} tasks{where}, best first (a task's attempts: recall repository + task_id)"
    blocks = [_task(i, t, show_repo=len(repos) > 1) for i, t in enumerate(r.tasks, 1)]
    note = f"ranking: {r.ranking}" if "rerank" in r.ranking or "left out" in r.ranking else None
    return _lines(head, *blocks, note)


@render.register
def _(r: FederatedSearchResult) -> str:
    down = [f"unavailable: {d.memory}: {cut(d.reason, 200)}" for d in r.unavailable]
    if not r.tasks:
        return _lines(f"no matching tasks in {', '.join(r.answered) or 'any memory'}", *down)
    head = (
        f"{len(r.tasks)} tasks from {', '.join(r.answered)}, best first by rank fusion "
        "(recall repository + task_id in the memory named)"
    )
    blocks = []
    for i, t in enumerate(r.tasks, 1):
        ranks = ", ".join(f"{m.memory} #{m.rank}" for m in t.ranks)
        blocks.append(_task(i, t.task, show_repo=True, where=f"memory={t.memory}; ranks {ranks}; "))
    return _lines(head, *blocks, *down)


def _task(i: int, t: TaskResult, *, show_repo: bool, where: str = "") -> str:
    a = t.attempt
    title = f" {cut(t.title, 80)}" if t.title else ""
    repo = f" repository={t.repository}" if show_repo else ""
    count = f"{t.attempt_count} attempt{'s' if t.attempt_count != 1 else ''}"
    head = f"{i}. [{a.status}]{title} (task_id={t.task_id}{repo}; {where}{count}; {a.created_at[:10]})"
    retro = t.retrospective
    summary = (
        f"   retrospective ({retro.created_at[:10]}): {cut(retro.summary, PREVIEW_CHARS)}" if retro else None
    )
    return _lines(head, summary, f"   {_preview(a)}", *_flags(a))


def _preview(a: AttemptPreview) -> str:
    said = a.inference or a.observation
    return cut(f"{a.action} → {said}", PREVIEW_CHARS)


def _flags(a: AttemptPreview) -> list[str]:
    out = []
    if a.correction is not None:
        n = f", {a.corrections_count} corrections" if a.corrections_count > 1 else ""
        out.append(f"   OUTDATED ({_when(a.correction.at)[:10]}{n}): {cut(a.correction.reason, 200)}")
    if a.stale_files:
        out.append(f"   stale, changed since: {cut(', '.join(a.stale_files), 200)}")
    if a.reasserts:
        more = f" (and {len(a.reasserts) - 1} more)" if len(a.reasserts) > 1 else ""
        out.append(f"   re-asserts a rejected conclusion{more}: {cut(a.reasserts[0].reason, 100)}")
    return out


@render.register
def _(r: RecallResult) -> str:
    more = f"\n(truncated: {r.truncation_reason})" if r.truncated else ""
    if tuple(r.columns[: len(HISTORY_COLUMNS)]) == HISTORY_COLUMNS:
        return "\n".join(_attempt_row(dict(zip(r.columns, row, strict=True))) for row in r.rows) + more
    if not r.rows:
        return f"no rows (columns: {', '.join(r.columns)}){more}"
    table = [" | ".join(r.columns), *(" | ".join(_cell(v) for v in row) for row in r.rows)]
    return "\n".join(table) + more


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.replace("\n", "\\n")
    return orjson.dumps(value).decode()


def _attempt_row(a: dict[str, Any]) -> str:
    where = ", ".join(
        x
        for x in (
            f"commit {a['commit'][:12]}" if a.get("commit") else "",
            f"branch {a['branch']}" if a.get("branch") else "",
        )
        if x
    )
    head = f"attempt {a['attempt_id']} [{a['status']}] {_when(a['created_at'])} by {a['agent_id']}"
    lines = [head + (f" ({where})" if where else ""), f"  action: {a['action']}"]
    lines.append(f"  observed: {a['observation']}")
    if a.get("inference"):
        lines.append(f"  concluded: {a['inference']}")
    if a.get("files"):
        lines.append(f"  files: {', '.join(a['files'])}")
    if a.get("check_command"):
        code = f" (exit {a['check_exit_code']})" if a.get("check_exit_code") is not None else ""
        lines.append(f"  check: {a['check_command']}{code}")
    if a.get("check_output"):
        lines.append(f"  output: {a['check_output']}")
    if a.get("tags"):
        lines.append(f"  tags: {', '.join(a['tags'])}")
    for c in a.get("corrections") or []:
        at = f" at {c['latest_commit'][:12]}" if c.get("latest_commit") else ""
        lines.append(f"  OUTDATED {_when(c['at'])} by {c['agent_id']}{at}: {c['reason']}")
    return "\n".join(lines)


@render.register
def _(r: MarkOutdatedResult) -> str:
    return (
        f"attempt {r.attempt_id} marked outdated ({r.corrections_count} corrections, ledger seq "
        f"{r.ledger.seq}): {cut(r.correction.reason, 200)}"
    )


@render.register
def _(r: ForgetResult) -> str:
    return f"attempt {r.attempt_id} forgotten; the ledger keeps a tombstone (seq {r.ledger.seq})"


@render.register
def _(r: ForgetThoughtResult) -> str:
    return f"thought {r.thought_id} forgotten; the ledger keeps a tombstone (seq {r.ledger.seq})"


@render.register
def _(r: VerifyResult) -> str:
    entries = sum(c.entries for c in r.chains)
    head = f"{'ok' if r.ok else 'FAILED'}: {len(r.chains)} chains, {entries} entries verified"
    bad = [f"{c.chain}: does not verify at seq {c.head_seq}" for c in r.chains if not c.ok]
    return _lines(head, *bad)


@render.register
def _(r: StatsResult) -> str:
    by_status = ", ".join(f"{k} {v}" for k, v in r.attempts_by_status.items())
    types = ", ".join(f"{k} {v}" for k, v in r.thoughts_by_type.items())
    return _lines(
        f"{r.repositories} repositories, {r.tasks} tasks, {r.attempts} attempts"
        + (f" ({by_status})" if by_status else ""),
        f"{r.outdated} outdated, {r.forgotten} forgotten; {r.thoughts} thoughts"
        + (f" ({types})" if types else "")
        + f"; {r.skills} skills; {r.ledger_entries} ledger entries",
        f"newest activity {_when(r.newest_activity)}" if r.newest_activity else None,
        *(f"{s.repository}: newest {_when(s.newest)}" for s in r.by_repository),
        *(f"left out: {x}" for x in r.refused),
    )


# ---------------------------------------------------------------- thoughts


def _thought_line(t: ThoughtOut, *, score: float | None = None, limit: int = THOUGHT_CHARS) -> str:
    meta = [f"importance {t.importance:g}"]
    if t.confidence is not None:
        meta.append(f"confidence {t.confidence:g}")
    meta += [_when(t.created_at), t.agent_id]
    if t.task_id:
        meta.append(f"task {t.task_id}")
    if t.entity_type:
        meta.append(f"about {t.entity_type}")
    if score is not None:
        meta.append(f"score {score:.3f}")
    line = f"{t.type} {t.thought_id} ({'; '.join(meta)}): {cut(t.content, limit)}"
    extra = []
    if t.tags or t.concepts:
        extra.append(f"tags: {', '.join([*t.tags, *t.concepts])}")
    if t.invalidated_by:
        extra.append(f"INVALIDATED by {', '.join(t.invalidated_by)}")
    if t.source_episode:
        e = t.source_episode
        extra.append(f"source: session {e['session_id']} lines {e['from_line']}-{e['to_line']}")
    extra += _reasserts(t.reasserts)
    return _lines(line, *(f"  {e}" for e in extra))


@render.register
def _(r: AppendThoughtResult) -> str:
    head = f"stored thought {r.thought_id} (ledger seq {r.ledger.seq})"
    superseded = f"supersedes near-duplicates: {', '.join(r.superseded)}" if r.superseded else None
    return _lines(head, superseded, *_warnings(r.warnings), *_reasserts(r.reasserts))


@render.register
def _(r: AppendRetrospectiveResult) -> str:
    head = (
        f"stored retrospective {r.thought_id} (ledger seq {r.ledger.seq}) covering "
        f"{len(r.attempts)} attempts and {len(r.thoughts)} thoughts"
    )
    return _lines(head, *_warnings(r.warnings))


@render.register
def _(r: SearchThoughtsResult) -> str:
    if not r.thoughts:
        return f"no matching thoughts ({r.ranking})"
    head = f"{len(r.thoughts)} thoughts, best first (as of {_when(r.as_of)}); get_thought reads one whole"
    return _lines(head, *(f"- {_thought_line(s.thought, score=s.score)}" for s in r.thoughts))


@render.register
def _(t: ThoughtOut) -> str:
    meta = f"{t.type}/{t.role} in {t.repository}, ledger seq {t.ledger.seq}"
    links = [f"ref {ref}" for ref in t.refs] + [f"{x.kind} {x.target_id}" for x in t.relations]
    return _lines(
        _thought_line(t, limit=len(t.content) + 1),
        f"  {meta}",
        f"  links: {', '.join(links)}" if links else None,
        f"  transcript: {t.source_episode['transcript']}" if t.source_episode else None,
    )


@render.register
def _(r: TraverseResult) -> str:
    nodes = [f"- {_thought_line(t)}" for t in r.nodes]
    edges = [f"{e.from_id} -{e.kind}-> {e.to_id}" for e in r.edges]
    dangling = [f"dangling: {e.from_id} -{e.kind}-> {e.to_id}" for e in r.dangling]
    more = "(truncated at the node limit)" if r.truncated else None
    return _lines(f"{len(r.nodes)} thoughts, {len(r.edges)} edges", *nodes, *edges, *dangling, more)


@render.register
def _(r: ContextBundleResult) -> str:
    if not r.bundles:
        return "no matching thoughts"
    out = []
    for b in r.bundles:
        out.append(f"- {_thought_line(b.seed.thought, score=b.seed.score)}")
        out += [f"  - related: {_thought_line(t)}" for t in b.related]
    return "\n".join(out)


@render.register
def _(r: RecentContextResult) -> str:
    return r.prompt


@render.register
def _(r: MemoryMdExportResult) -> str:
    return r.markdown


@render.register
def _(r: MemoryMdImportResult) -> str:
    return f"imported {r.imported} thoughts: {', '.join(r.thought_ids)}"


# ---------------------------------------------------------------- skills


def _skill_line(s: SkillSummary, score: float | None = None) -> str:
    scored = f"; score {score:.3f}" if score is not None else ""
    where = f"{s.repository} skill_id={s.skill_id} v{s.version} [{s.status}]{scored}"
    triggers = f" (when: {cut('; '.join(s.triggers), 160)})" if s.triggers else ""
    return f"{s.name} — {cut(s.description, 200)}{triggers}\n  {where}"


@render.register
def _(r: SearchSkillsResult) -> str:
    if not r.skills:
        return "no matching skills"
    skills = [f"- {_skill_line(s.skill, s.score)}" for s in r.skills]
    return _lines(f"{len(r.skills)} skills, best first; read_skill gives one's text", *skills, r.notice)


@render.register
def _(r: ListSkillsResult) -> str:
    return _lines(f"{len(r.skills)} skills", *(f"- {_skill_line(s)}" for s in r.skills))


@render.register
def _(r: ReadSkillResult) -> str:
    signed = [v for v in r.versions if v.version == r.version]
    state = f", signature {signed[0].signature}" if signed else ""
    head = f"{_skill_line(r.skill)}\n  showing v{r.version} ({r.format}{state})"
    return _lines(head, r.notice, *_warnings(w for w in r.warnings if w != r.notice), "", r.content)


@render.register
def _(r: SkillVersionsResult) -> str:
    rows = [
        f"v{v.version} {_when(v.at)} by {v.agent_id}, sha256 {v.content_hash[:12]}, signature {v.signature}"
        for v in r.versions
    ]
    return _lines(f"{r.skill_id} in {r.repository} [{r.status}]", *rows)


@render.register
def _(r: UploadSkillResult) -> str:
    what = "unchanged (same text as the newest version)" if r.unchanged else f"stored v{r.version}"
    return _lines(f"{r.skill_id} in {r.repository}: {what} [{r.status}]", *_warnings(r.warnings))


@render.register
def _(r: SkillStatusResult) -> str:
    return f"{r.skill_id} in {r.repository} is now {r.status} (v{r.version}; ledger seq {r.ledger.seq})"


@render.register
def _(r: DeleteSkillResult) -> str:
    return (
        f"{r.skill_id} in {r.repository} deleted: {r.versions_erased} versions erased; the ledger keeps "
        f"a tombstone (seq {r.ledger.seq})"
    )


# ---------------------------------------------------------------- agents


def _agent(a: AgentOut) -> str:
    state = f"DISABLED {_when(a.disabled_at)}: {a.disabled_reason}" if a.disabled_at else "active"
    keys = [
        f"  key {k.key_id} added {_when(k.added_at)}"
        + (f", REVOKED {_when(k.revoked_at)}: {k.reason}" if k.revoked_at else "")
        for k in a.keys
    ]
    aliases = f" (aliases: {', '.join(a.aliases)})" if a.aliases else ""
    must = "; writes must be signed" if a.must_sign else ""
    return _lines(f"{a.agent_id}{aliases}: {state}{must}", *keys)


@render.register
def _(r: AgentOut) -> str:
    return _agent(r)


@render.register
def _(r: AgentResult) -> str:
    key = f" (key {r.key_id})" if r.key_id else ""
    return f"{_agent(r.agent)}\nledger seq {r.ledger.seq}{key}"


@render.register
def _(r: ListAgentsResult) -> str:
    return _lines(f"{len(r.agents)} agents", *(_agent(a) for a in r.agents)) if r.agents else "no agents"
