"""CLI commands for harness hooks and git code context: ``hook``, ``task``, ``context``, ``stale``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console

from mentis.api.attempts import StaleInput, StaleResult
from mentis.api.common import Identifier, Title, parse
from mentis.cli.common import DbOpt, JsonOpt, RepoOpt, emit, errors, run, settings
from mentis.errors import InvalidInput
from mentis.integrations import git
from mentis.integrations.hooks import config as hook_config
from mentis.integrations.hooks import payload, state

commands = typer.Typer()

task_app = typer.Typer(help="The task the hooks record checks under, per checkout.", no_args_is_help=True)
commands.add_typer(task_app, name="task")

CwdOpt = Annotated[
    Path | None, typer.Option("--cwd", help="A directory inside the checkout (default: the current one).")
]


@commands.command()
def hook(
    harness: Annotated[str, typer.Argument(help=f"One of: {', '.join(payload.HARNESSES)}.")],
    event: Annotated[str, typer.Argument(help=f"One of: {', '.join(payload.EVENTS)}.")],
) -> None:
    """Run a harness hook: read its JSON payload on stdin, record a check (post-tool-use) or print
    related attempts as additional context (session-start, user-prompt-submit). Always exits 0;
    errors go to $MENTIS_HOME/logs/hook-errors.jsonl."""
    from mentis.integrations.hooks.run import main

    raise typer.Exit(main([harness, event]))


def _memory_branch(top: Path, branch: str | None) -> str | None:
    """The memory branch the hooks use in this checkout (``[branches] follow_git``), None for the
    repository's main line."""
    return state.memory_branch(hook_config.load(settings(None).home, top).follow_git, top, branch)


def _on(memory_branch: str | None) -> str:
    return f"memory branch {memory_branch}" if memory_branch else "the memory's main line"


def _checked(adapter: TypeAdapter[str], value: str, name: str) -> str:
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise InvalidInput(f"{name}: {exc.errors()[0]['msg']}", field=name) from None


@task_app.command("start")
def task_start(
    task_id: Annotated[str, typer.Argument(help="Task id, e.g. an issue key: fix-cart-rounding.")],
    title: Annotated[
        str | None, typer.Option(help="What the task is about (searched at session start).")
    ] = None,
    cwd: CwdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set the task that hooks record this checkout's checks under (else they use the branch name),
    and say where they record it: the memory's main line, or with `[branches] follow_git` the
    memory branch of the checkout's git branch."""
    with errors():
        task_id = _checked(TypeAdapter(Identifier), task_id, "task_id")
        title = _checked(TypeAdapter(Title), title, "title") if title is not None else None
        top = git.toplevel(cwd or Path.cwd())
        branch = git.head(top)[1]
        memory_branch = _memory_branch(top, branch)
        st = state.set_task(settings(None).home, top, task_id, title)
        data: dict[str, Any] = {**st.to_json(), "branch": branch, "memory_branch": memory_branch}
    emit(
        data,
        as_json,
        lambda d: Console().print(
            f"task {task_id} started in {top}, on {_on(memory_branch)}", highlight=False
        ),
    )


@task_app.command("show")
def task_show(cwd: CwdOpt = None, as_json: JsonOpt = False) -> None:
    """Show the checkout's task (and the branch the hooks fall back to) and the memory branch the
    hooks record on."""
    with errors():
        top = git.toplevel(cwd or Path.cwd())
        st = state.load(settings(None).home, top)
        branch = git.head(top)[1]
        data: dict[str, Any] = {
            **st.to_json(),
            "branch": branch,
            "memory_branch": _memory_branch(top, branch),
        }
    emit(
        data,
        as_json,
        lambda d: Console().print(
            f"task: {d['task_id'] or '-'} (branch {d['branch']}), recorded on {_on(d['memory_branch'])}",
            highlight=False,
        ),
    )


@task_app.command("stop")
def task_stop(cwd: CwdOpt = None, as_json: JsonOpt = False) -> None:
    """Forget the checkout's task: hooks go back to the branch name."""
    with errors():
        top = git.toplevel(cwd or Path.cwd())
        st = state.set_task(settings(None).home, top, None)
    emit(st.to_json(), as_json, lambda d: Console().print(f"no task in {top}; hooks use the branch name"))


@commands.command()
def context(
    paths: Annotated[
        list[str] | None, typer.Argument(help="Files (default: every file changed vs HEAD).")
    ] = None,
    cwd: CwdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """HEAD commit, branch, dirty flag and git blob ids (as `git hash-object`) of files: what
    record_attempt takes as code_context and search as current_commit / current_file_hashes; and
    the memory branch the hooks record on here (`memory_branch`, null for the main line)."""
    with errors():
        ctx = git.context(cwd or Path.cwd(), paths or None)
        data = {
            **ctx.to_json(),
            "repository": git.repository_identity(ctx.toplevel),
            "memory_branch": _memory_branch(ctx.toplevel, ctx.branch),
            "code_context": ctx.code_context(),
        }
    emit(data, as_json, _print_context)


def _print_context(data: dict[str, Any]) -> None:
    out = Console()
    out.print(f"repository {data['repository']}  branch {data['branch'] or '(detached)'}", highlight=False)
    out.print(f"recorded on {_on(data['memory_branch'])}", highlight=False)
    out.print(f"commit {data['commit'] or '(none yet)'}  dirty {str(data['dirty']).lower()}", highlight=False)
    for path, blob in data["file_hashes"].items():
        out.print(f"{blob}  {path}", highlight=False)
    for path in data["deleted_files"]:
        out.print(f"{'(deleted)':40}  {path}", highlight=False)


@commands.command()
def stale(
    repository: RepoOpt,
    cwd: CwdOpt = None,
    include_outdated: Annotated[
        bool, typer.Option(help="Also list attempts already marked outdated.")
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Attempts whose passed checks ran on files whose blob id differs in this checkout now: candidates
    to mark outdated (run inside the repository's checkout)."""
    with errors():
        tree = git.tree_hashes(git.toplevel(cwd or Path.cwd()))
        req = parse(
            StaleInput,
            {"repository": repository, "current_file_hashes": tree, "include_outdated": include_outdated},
        )
    run(db, as_json, lambda m, c: m.stale_attempts(c, req), _print_stale)


def _print_stale(result: StaleResult) -> None:
    out = Console()
    if not result.attempts:
        out.print(f"no stale passed checks in {result.repository} ({result.passed_checked} compared)")
    for a in result.attempts:
        files = ", ".join(f"{f.path}{' (deleted)' if f.current is None else ''}" for f in a.changed)
        out.print(f"{a.attempt_id}  {a.task_id}  `{a.check_command}`  {a.created_at[:16]}", highlight=False)
        out.print(f"    changed since: {files}", highlight=False)
