"""``mentis propose`` (proposed memories from coding-agent transcripts) and ``mentis review`` (the
review queue: list, show, accept, reject)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from mentis.cli.common import DbOpt, JsonOpt, emit, err, errors, open_memory, run_op, settings
from mentis.errors import InvalidInput

commands = typer.Typer()
propose_app = typer.Typer(
    name="propose",
    help="Propose memories from what agents did; they wait in the review queue (`mentis review`).",
    no_args_is_help=True,
)
review_app = typer.Typer(
    name="review",
    help="The review queue of proposed memories: list, show, accept (optionally edited), reject.",
    no_args_is_help=True,
)
commands.add_typer(propose_app)
commands.add_typer(review_app)

IdArg = Annotated[str, typer.Argument(help="The proposal's id (prop-…).", show_default=False)]


@propose_app.command("transcript")
def transcript(
    files: Annotated[list[Path], typer.Argument(help="Claude Code session transcripts (.jsonl).")],
    repository: Annotated[
        str | None,
        typer.Option(
            "--repository",
            "-r",
            help="Repository the checks ran in (default: from the session's directory, when it is a "
            "git checkout here).",
        ),
    ] = None,
    llm: Annotated[
        bool,
        typer.Option(
            "--llm",
            help="Also propose thoughts (decisions, findings, constraints, lessons) an LLM finds in the "
            "conversation, scrubbed before sending (the rerank provider's MENTIS_RERANK_* settings).",
        ),
    ] = False,
    llm_budget: Annotated[
        int,
        typer.Option(
            "--llm-budget",
            min=1,
            help="Tokens --llm may spend at most (input estimated, output capped per request); "
            "conversation past it is not sent, and the run says how much.",
        ),
    ] = 20_000,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Propose an attempt for each recognised check that ran in the transcripts (no LLM): the
    command, exit status, scrubbed output tail and the files edited before it, grouped into tasks
    by session and branch. The same check recogniser as the hooks (hooks.toml [checks])."""
    from mentis.integrations.hooks import config as hook_config
    from mentis.integrations.transcripts import Plan, drafts_from

    def announce(run: Plan) -> None:
        skipped = (
            f"; {run.skipped} chunks of conversation are over the budget and not sent" if run.skipped else ""
        )
        err.print(
            f"--llm: {len(run.chunks)} requests, about {run.estimate:,} tokens at most "
            f"(budget {run.budget:,}){skipped}",
            highlight=False,
            soft_wrap=True,
        )

    with errors():
        config = settings(db)
        cfg = hook_config.load(config.home, None)
        if llm:
            from mentis.providers.extract import Extractor

            with Extractor.from_env(os.environ) as extractor:
                drafts, report = drafts_from(
                    files, cfg, repository, extractor=extractor, budget_tokens=llm_budget, announce=announce
                )
        else:
            drafts, report = drafts_from(files, cfg, repository)
        if report is not None:
            err.print(
                f"--llm: {report.tokens_in:,} tokens in, {report.tokens_out:,} out (as the provider "
                f"reported); {report.thoughts} thoughts found",
                highlight=False,
                soft_wrap=True,
            )
    with open_memory(db) as (memory, caller), errors():
        result = memory.propose(caller, drafts)

    def human(_: Any) -> None:
        out = Console()
        out.print(
            f"{len(drafts)} found; {len(result.queued)} proposed, "
            f"{len(result.known)} already known (queued, accepted or rejected before)",
            highlight=False,
        )
        for p in result.queued:
            text = p.record.get("observation") or p.record.get("content", "")
            out.print(f"  {p.proposal_id}  {p.kind}  {p.repository}  {text[:100]}", highlight=False)

    data = result.model_dump(mode="json")
    if report is not None:
        data["llm"] = report.as_dict()
    emit(data, as_json, human)


def _print_proposal(p: Any) -> None:
    d = p if isinstance(p, dict) else p.model_dump(mode="json")
    out = Console()
    decided = f" by {d['decided_by']} at {d['decided_at']}" if d.get("decided_by") else ""
    out.print(f"[bold]{d['proposal_id']}[/] {d['status']}{decided}  {d['repository']}", highlight=False)
    src = d["source"]
    out.print(f"  from {src['transcript']} lines {src['from_line']}-{src['to_line']}", highlight=False)
    out.print(
        f"  {d['kind']}: {d['record'].get('observation') or d['record'].get('content', '')}", highlight=False
    )


@review_app.command("list")
def list_(
    status: Annotated[str, typer.Option(help="pending, accepted, rejected, or all.")] = "pending",
    repository: Annotated[
        str | None, typer.Option("--repository", "-r", help="Only this repository.")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many (oldest first).")] = 20,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List proposals awaiting review (the list_proposals tool)."""
    data: dict[str, Any] = {"status": None if status == "all" else status, "limit": limit}
    if repository is not None:
        data["repository"] = repository

    def human(r: Any) -> None:
        for p in r.proposals:
            _print_proposal(p)
        Console().print(f"{len(r.proposals)} of {r.total}", highlight=False)

    run_op("list_proposals", db, as_json, data, human)


@review_app.command("show")
def show(proposal_id: IdArg, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Show one proposal with its record and source (the show_proposal tool)."""
    run_op("show_proposal", db, as_json, {"proposal_id": proposal_id}, _print_proposal)


@review_app.command("accept")
def accept(
    proposal_id: IdArg,
    edit: Annotated[
        str | None,
        typer.Option(help='Fields to change first, as JSON, e.g. \'{"task_id": "cart-rounding"}\'.'),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Accept a proposal (optionally edited): it is recorded as you (the accept_proposal tool)."""
    data: dict[str, Any] = {"proposal_id": proposal_id}
    if edit is not None:
        with errors():
            try:
                data["edits"] = json.loads(edit)
            except ValueError as exc:
                raise InvalidInput(f"edits: --edit is not JSON ({exc})", field="edits") from None
    run_op(
        "accept_proposal",
        db,
        as_json,
        data,
        lambda r: Console().print(f"accepted {r.proposal_id}: recorded {r.record_id}", highlight=False),
    )


@review_app.command("reject")
def reject(
    proposal_id: IdArg,
    reason: Annotated[str, typer.Option(help="Why; the same proposal is not offered again.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Reject a proposal with a reason (the reject_proposal tool)."""
    run_op(
        "reject_proposal",
        db,
        as_json,
        {"proposal_id": proposal_id, "reason": reason},
        lambda r: Console().print(f"rejected {r.proposal_id}", highlight=False),
    )


__all__ = ["commands", "err"]
