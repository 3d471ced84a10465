"""CLI commands for thoughts: one per operation, named as the operation in kebab-case."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from mentis.cli import DbOpt, JsonOpt, RepoOpt, _errors, _run, app
from mentis.errors import InvalidInput
from mentis.model import (
    AppendThoughtInput,
    ContextBundleInput,
    ForgetThoughtInput,
    GetThoughtInput,
    MemoryMdExportInput,
    MemoryMdImportInput,
    RecentContextInput,
    SearchThoughtsInput,
    TraverseInput,
    parse,
)

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


@app.command("append-thought")
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
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Store a typed thought (the append_thought tool)."""
    with _errors():
        data = {
            "repository": repository,
            "type": type_,
            "content": content,
            "role": role,
            "tags": tag,
            "importance": importance,
            "confidence": confidence,
            "concepts": concept,
            "refs": ref,
            "relations": _relations(relation),
            "task_id": task_id,
        }
        req = parse(AppendThoughtInput, _clean(data))
    _run(db, as_json, lambda m, c: m.append_thought(c, req))


@app.command("search-thoughts")
def search_thoughts(
    query: Annotated[str | None, typer.Argument(help="What you are looking for (omit to list).")] = None,
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this repository.")] = None,
    type_: Annotated[list[str] | None, typer.Option("--type", help="Thought type (repeatable).")] = None,
    tag: Many = None,
    as_of: Annotated[str | None, typer.Option(help="ISO time: what was believed then.")] = None,
    include_invalidated: Annotated[bool, typer.Option(help="Also superseded/corrected ones.")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", help="1-50.")] = 10,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search or list thoughts (the search_thoughts tool)."""
    with _errors():
        data = {
            "query": query,
            "repository": repository,
            "filters": _clean({"types": type_, "tags": tag}),
            "as_of": as_of,
            "include_invalidated": include_invalidated,
            "limit": limit,
        }
        req = parse(SearchThoughtsInput, _clean(data))
    _run(db, as_json, lambda m, c: m.search_thoughts(c, req))


@app.command("get-thought")
def get_thought(
    thought_id: Annotated[str | None, typer.Argument(help="The thought's id.")] = None,
    hash_: Annotated[str | None, typer.Option("--hash", help="Or its ledger entry hash.")] = None,
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Or its chain, with --seq.")] = None,
    seq: Annotated[int | None, typer.Option(help="Its seq in that chain.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read one thought (the get_thought tool)."""
    with _errors():
        req = parse(
            GetThoughtInput,
            _clean({"thought_id": thought_id, "hash": hash_, "repository": repository, "seq": seq}),
        )
    _run(db, as_json, lambda m, c: m.get_thought(c, req))


@app.command("traverse-thoughts")
def traverse_thoughts(
    thought_id: Annotated[str, typer.Argument(help="Where to start.")],
    direction: Annotated[str, typer.Option(help="out, in or both.")] = "both",
    depth: Annotated[int, typer.Option(help="1-5.")] = 2,
    limit: Annotated[int, typer.Option("--limit", "-n", help="At most this many thoughts.")] = 50,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Follow refs and relations from a thought (the traverse_thoughts tool)."""
    with _errors():
        req = parse(
            TraverseInput, {"thought_id": thought_id, "direction": direction, "depth": depth, "limit": limit}
        )
    _run(db, as_json, lambda m, c: m.traverse_thoughts(c, req))


@app.command("context-bundle")
def context_bundle(
    query: Annotated[str, typer.Argument(help="What you are about to work on.")],
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this repository.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Seed thoughts (1-20).")] = 5,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Seed thoughts with their related thoughts (the context_bundle tool)."""
    with _errors():
        req = parse(ContextBundleInput, _clean({"query": query, "repository": repository, "limit": limit}))
    _run(db, as_json, lambda m, c: m.context_bundle(c, req))


@app.command("recent-context")
def recent_context(
    repository: RepoOpt,
    agent_id: Annotated[str | None, typer.Option("--agent", help="Only this agent's thoughts.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="1-200.")] = 20,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The newest thoughts as a catch-up prompt (the recent_context tool)."""
    with _errors():
        req = parse(
            RecentContextInput, _clean({"repository": repository, "agent_id": agent_id, "limit": limit})
        )
    _run(db, as_json, lambda m, c: m.recent_context(c, req), lambda r: print(r.prompt))


@app.command("export-memory-md")
def export_memory_md(
    repository: RepoOpt,
    output: Annotated[Path | None, typer.Argument(help="File to write (default: stdout).")] = None,
    db: DbOpt = None,
) -> None:
    """Write a repository's current thoughts as MEMORY.md (the export_memory_md tool)."""
    with _errors():
        req = parse(MemoryMdExportInput, {"repository": repository})

    def write(result: Any) -> None:
        if output is None:
            sys.stdout.write(result.markdown + "\n")
        else:
            output.write_text(result.markdown + "\n", encoding="utf-8")

    _run(db, False, lambda m, c: m.export_memory_md(c, req), write, human_only=True)


@app.command("import-memory-md")
def import_memory_md(
    repository: RepoOpt,
    source: Annotated[Path, typer.Argument(help="A MEMORY.md file.", exists=True, dir_okay=False)],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Append the thoughts of a MEMORY.md to a repository (the import_memory_md tool)."""
    with _errors():
        try:
            text = source.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"{source}: not valid UTF-8 ({exc.reason} at byte {exc.start})", "markdown"
            ) from None
        req = parse(MemoryMdImportInput, {"repository": repository, "markdown": text})
    _run(db, as_json, lambda m, c: m.import_memory_md(c, req))


@app.command("forget-thought")
def forget_thought(
    repository: RepoOpt,
    thought_id: Annotated[str, typer.Argument(help="The thought to erase.")],
    reason: Annotated[str | None, typer.Option(help="Why (kept in the tombstone).")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Erase a thought's content; the ledger keeps a tombstone (the forget_thought tool)."""
    with _errors():
        req = parse(
            ForgetThoughtInput, {"repository": repository, "thought_id": thought_id, "reason": reason}
        )
    _run(db, as_json, lambda m, c: m.forget_thought(c, req))
