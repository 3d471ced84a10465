"""CLI commands for thoughts: one per operation, named as the operation in kebab-case."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from mentis.cli.common import BranchOpt, DbOpt, JsonOpt, RepoOpt, errors, run_op
from mentis.errors import InvalidInput

commands = typer.Typer()

Many = Annotated[list[str] | None, typer.Option(help="Repeatable.")]


def _relations(specs: list[str] | None) -> list[dict[str, str]]:
    out = []
    for spec in specs or []:
        kind, sep, target = spec.partition(":")
        if not sep or not kind or not target:
            raise InvalidInput(
                f"--relation {spec!r}: expected KIND:THOUGHT_ID, e.g. Supersedes:<id>", "relations"
            )
        out.append({"kind": kind, "target_id": target})
    return out


def _clean(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None and v != []}


def _episode(transcript: str | None, session: str | None, lines: str | None) -> dict[str, Any] | None:
    """The ``source_episode`` the three options give (None when none is given; a missing one is
    left out, so the error names it)."""
    if transcript is None and session is None and lines is None:
        return None
    out: dict[str, Any] = _clean({"transcript": transcript, "session_id": session})
    if lines is not None:
        first, sep, last = lines.partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise InvalidInput(f"--source-lines {lines!r}: expected FROM-TO, e.g. 7-19", "source_episode")
        out |= {"from_line": int(first), "to_line": int(last or first)}
    return out


@commands.command("append-thought")
def append_thought(
    repository: RepoOpt,
    type_: Annotated[str, typer.Option("--type", help="Decision, Finding, Constraint, LessonLearned, ...")],
    content: Annotated[str, typer.Argument(help="The thought.")],
    role: Annotated[str | None, typer.Option(help="Memory (default), WorkingMemory, Summary, ...")] = None,
    importance: Annotated[float | None, typer.Option(help="0 to 1 (default 0.5).")] = None,
    confidence: Annotated[float | None, typer.Option(help="0 to 1.")] = None,
    tag: Many = None,
    concept: Many = None,
    ref: Annotated[list[str] | None, typer.Option(help="Id of a thought or attempt (repeatable).")] = None,
    relation: Annotated[list[str] | None, typer.Option(help="KIND:THOUGHT_ID (repeatable).")] = None,
    task_id: Annotated[str | None, typer.Option("--task", "-t", help="Task the thought belongs to.")] = None,
    visibility: Annotated[
        str | None, typer.Option(help="repository (default), agent or session: who may read it.")
    ] = None,
    entity_type: Annotated[
        str | None,
        typer.Option(help="What it is about: a registered entity type (`mentis entity-type list`)."),
    ] = None,
    source_transcript: Annotated[
        str | None, typer.Option(help="Source episode: the transcript it came from (path or name).")
    ] = None,
    source_session: Annotated[str | None, typer.Option(help="Source episode: its session id.")] = None,
    source_lines: Annotated[
        str | None, typer.Option(help="Source episode: its lines or turns, FROM-TO (1-based, inclusive).")
    ] = None,
    branch: BranchOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Store a typed thought (the append_thought tool)."""
    with errors():
        relations = _relations(relation)
        episode = _episode(source_transcript, source_session, source_lines)
    data = {
        "repository": repository,
        "branch": branch,
        "type": type_,
        "content": content,
        "role": role,
        "tags": tag,
        "importance": importance,
        "confidence": confidence,
        "concepts": concept,
        "refs": ref,
        "relations": relations,
        "task_id": task_id,
        "visibility": visibility,
        "entity_type": entity_type,
        "source_episode": episode,
    }
    run_op("append_thought", db, as_json, _clean(data))


@commands.command("append-retrospective")
def append_retrospective(
    repository: RepoOpt,
    task_id: Annotated[str, typer.Option("--task", "-t", help="The task it sums up.")],
    summary: Annotated[str, typer.Argument(help="What worked, what did not, what to do next.")],
    cover: Annotated[
        list[str] | None,
        typer.Option(
            help="Id of an attempt of the task or of a thought it covers (repeatable; "
            "default: the task's attempts)."
        ),
    ] = None,
    tag: Many = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Sum up a task in a Retrospective thought (the append_retrospective tool)."""
    data = {"repository": repository, "task_id": task_id, "summary": summary, "covers": cover, "tags": tag}
    run_op("append_retrospective", db, as_json, _clean(data))


@commands.command("search-thoughts")
def search_thoughts(
    query: Annotated[str | None, typer.Argument(help="What you are looking for (omit to list).")] = None,
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this repository.")] = None,
    type_: Annotated[list[str] | None, typer.Option("--type", help="Thought type (repeatable).")] = None,
    tag: Many = None,
    entity_type: Annotated[
        list[str] | None, typer.Option(help="Entity type it is about (repeatable).")
    ] = None,
    source_session: Annotated[str | None, typer.Option(help="Session of its source episode.")] = None,
    as_of: Annotated[str | None, typer.Option(help="ISO time: what was believed then.")] = None,
    include_invalidated: Annotated[bool, typer.Option(help="Also superseded/corrected ones.")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", help="1-50.")] = 10,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search or list thoughts (the search_thoughts tool)."""
    data = {
        "query": query,
        "repository": repository,
        "filters": _clean(
            {"types": type_, "tags": tag, "entity_types": entity_type, "source_session": source_session}
        ),
        "as_of": as_of,
        "include_invalidated": include_invalidated,
        "limit": limit,
    }
    run_op("search_thoughts", db, as_json, _clean(data))


@commands.command("get-thought")
def get_thought(
    thought_id: Annotated[str | None, typer.Argument(help="The thought's id.")] = None,
    hash_: Annotated[str | None, typer.Option("--hash", help="Or its ledger entry hash.")] = None,
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Or its chain, with --seq.")] = None,
    seq: Annotated[int | None, typer.Option(help="Its seq in that chain.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read one thought (the get_thought tool)."""
    data = {"thought_id": thought_id, "hash": hash_, "repository": repository, "seq": seq}
    run_op("get_thought", db, as_json, _clean(data))


@commands.command("traverse-thoughts")
def traverse_thoughts(
    thought_id: Annotated[str, typer.Argument(help="Where to start.")],
    direction: Annotated[str, typer.Option(help="out, in or both.")] = "both",
    depth: Annotated[int, typer.Option(help="1-5.")] = 2,
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many thoughts.")] = 50,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Follow refs and relations from a thought (the traverse_thoughts tool)."""
    data = {"thought_id": thought_id, "direction": direction, "depth": depth, "limit": limit}
    run_op("traverse_thoughts", db, as_json, data)


@commands.command("context-bundle")
def context_bundle(
    query: Annotated[str, typer.Argument(help="What you are about to work on.")],
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this repository.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Seed thoughts (1-20).")] = 5,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Seed thoughts with their related thoughts (the context_bundle tool)."""
    run_op("context_bundle", db, as_json, _clean({"query": query, "repository": repository, "limit": limit}))


@commands.command("recent-context")
def recent_context(
    repository: RepoOpt,
    agent_id: Annotated[str | None, typer.Option("--agent", help="Only this agent's thoughts.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="1-200.")] = 20,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The newest thoughts as a catch-up prompt (the recent_context tool)."""
    data = _clean({"repository": repository, "agent_id": agent_id, "limit": limit})
    run_op("recent_context", db, as_json, data, lambda r: print(r.prompt))


@commands.command("export-memory-md")
def export_memory_md(
    repository: RepoOpt,
    output: Annotated[Path | None, typer.Argument(help="File to write (default: stdout).")] = None,
    db: DbOpt = None,
) -> None:
    """Write a repository's current thoughts as MEMORY.md (the export_memory_md tool)."""

    def write(result: Any) -> None:
        if output is None:
            sys.stdout.write(result.markdown + "\n")
        else:
            output.write_text(result.markdown + "\n", encoding="utf-8")

    run_op("export_memory_md", db, False, {"repository": repository}, write, human_only=True)


@commands.command("import-memory-md")
def import_memory_md(
    repository: RepoOpt,
    source: Annotated[Path, typer.Argument(help="A MEMORY.md file.", exists=True, dir_okay=False)],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Append the thoughts of a MEMORY.md to a repository (the import_memory_md tool)."""
    with errors():
        try:
            text = source.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"{source}: not valid UTF-8 ({exc.reason} at byte {exc.start})", "markdown"
            ) from None
    run_op("import_memory_md", db, as_json, {"repository": repository, "markdown": text})


@commands.command("publish")
def publish(
    repository: RepoOpt,
    record_id: Annotated[str, typer.Argument(help="The private attempt or thought.")],
    visibility: Annotated[str, typer.Option(help="agent or repository (default): who may read it now.")] = (
        "repository"
    ),
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Widen who may read a private attempt or thought; never narrows (the publish tool)."""
    data = {"repository": repository, "record_id": record_id, "visibility": visibility}
    run_op("publish", db, as_json, data)


@commands.command("forget-thought")
def forget_thought(
    repository: RepoOpt,
    thought_id: Annotated[str, typer.Argument(help="The thought to erase.")],
    reason: Annotated[str | None, typer.Option(help="Why (kept in the tombstone).")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Erase a thought's content; the ledger keeps a tombstone (the forget_thought tool)."""
    data = {"repository": repository, "thought_id": thought_id, "reason": reason}
    run_op("forget_thought", db, as_json, data)
