"""``mentis branch``: branch and merge chains (from, list, merge); docs/branches.md."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mentis.api.branches import MergeBranchInput
from mentis.api.common import parse
from mentis.cli.common import DbOpt, JsonOpt, RepoOpt, emit, errors, run_op
from mentis.errors import InvalidInput
from mentis.integrations import git

commands = typer.Typer()
branch_app = typer.Typer(
    name="branch",
    help="Branch chains: fork a repository's memory for a git branch, list them, merge one back.",
    no_args_is_help=True,
)
commands.add_typer(branch_app)

NameArg = Annotated[str, typer.Argument(help="The branch's name (a git branch name).")]


def _table(branches: list[Any]) -> None:
    table = Table("branch", "parent", "fork", "head", "merged into")
    for b in branches:
        table.add_row(
            b.branch, b.parent, f"{b.fork.seq}", f"{b.head.seq} {b.head.hash[:12]}", ", ".join(b.merged_into)
        )
    Console().print(table)


@branch_app.command("from")
def branch_from(
    branch: NameArg,
    repository: RepoOpt,
    parent: Annotated[
        str | None, typer.Option(help="Fork from this branch (default: the main line).")
    ] = None,
    fork_seq: Annotated[
        int | None, typer.Option("--fork-seq", help="Fork at this seq of the parent.")
    ] = None,
    fork_hash: Annotated[
        str | None, typer.Option("--fork-hash", help="The hash that entry must have.")
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fork a branch chain at the parent's head, or at --fork-seq (the branch_from tool)."""
    data: dict[str, Any] = {"repository": repository, "branch": branch, "parent": parent}
    data |= {"fork_seq": fork_seq, "fork_hash": fork_hash}
    run_op(
        "branch_from",
        db,
        as_json,
        {k: v for k, v in data.items() if v is not None},
        lambda r: Console().print(f"{r.chain} forked from {r.parent} at seq {r.fork.seq}", highlight=False),
    )


@branch_app.command("list")
def list_branches(repository: RepoOpt, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List a repository's branches (the list_branches tool)."""
    run_op("list_branches", db, as_json, {"repository": repository}, lambda r: _table(r.branches))


@branch_app.command("merge")
def merge(
    branch: NameArg,
    repository: RepoOpt,
    into: Annotated[str | None, typer.Option(help="Merge into this branch (default: the main line).")] = None,
    if_git_merged: Annotated[
        bool,
        typer.Option(
            "--if-git-merged",
            help="Merge only when git has merged the git branch of that name into --into (default: the "
            "checkout's default branch): `git merge-base --is-ancestor`. Otherwise nothing is written.",
        ),
    ] = False,
    cwd: Annotated[
        Path | None, typer.Option("--cwd", help="With --if-git-merged: a directory inside the checkout.")
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Merge a branch into its parent line, copying nothing; prints the conflicts (the merge_branch tool)."""

    def human(r: Any) -> None:
        Console().print(f"merged {r.branch} into {r.into} at seq {r.merge.seq}", highlight=False)
        for c in r.conflicts:
            Console().print(
                f"conflict ({c.kind} {c.record_id}): branch {c.source}; target {c.target}", highlight=False
            )

    data = {"repository": repository, "branch": branch, "into": into}
    data = {k: v for k, v in data.items() if v is not None}
    if if_git_merged:
        with errors():
            parse(MergeBranchInput, data)  # a bad name is refused before git is asked about it
            top = git.toplevel(cwd or Path.cwd())
            target = into or git.default_branch(top)
            if target is None:
                raise InvalidInput(
                    "into: this checkout has no default branch git can name (no origin/HEAD, no main, "
                    "master or trunk); give --into",
                    field="into",
                )
            merged = git.is_ancestor(top, branch, target)
        if not merged:
            not_yet = {"merged": False, "branch": branch, "git_target": target}
            emit(
                not_yet,
                as_json,
                lambda d: Console().print(
                    f"git has not merged {branch} into {target}; nothing merged", highlight=False
                ),
            )
            return
    run_op("merge_branch", db, as_json, data, human)
