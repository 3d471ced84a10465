"""``mentis skills``: the skill registry (one command per operation) and the SKILL.md folders
harnesses load (``export``, ``import``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from mentis.cli.common import DbOpt, JsonOpt, errors, run, run_op
from mentis.errors import InvalidInput
from mentis.service.skill_files import read_capped

commands = typer.Typer()
skills_app = typer.Typer(
    name="skills",
    help="The skill registry: procedures agents share, versioned on the ledger; SKILL.md folders in and out.",
    no_args_is_help=True,
)
commands.add_typer(skills_app)

RepoOpt = Annotated[
    str, typer.Option("--repository", "--repo", "-r", help="Repository identity, e.g. github.com/acme/shop.")
]
SkillArg = Annotated[str, typer.Argument(help="The skill's id (its name unless uploaded under another).")]


def _clean(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


def _read_text(path: Path, field: str) -> str:
    """The UTF-8 text of ``path`` (``-``: stdin), read only up to the skill size limit."""
    try:
        if str(path) == "-":
            raw = read_capped(sys.stdin.buffer.read, "stdin", field)
        else:
            with path.open("rb") as handle:
                raw = read_capped(handle.read, path, field)
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{field}: {path} is not UTF-8 ({exc.reason} at byte {exc.start})", field
        ) from None
    except OSError as exc:
        raise InvalidInput(f"{field}: cannot read {path}: {exc.strerror or exc}", field) from None


@skills_app.command("upload")
def upload(
    repository: RepoOpt,
    source: Annotated[Path, typer.Argument(help="A SKILL.md (or JSON) file, or - for stdin.")],
    skill_id: Annotated[
        str | None, typer.Option("--id", help="Upload under this id (default: its name).")
    ] = None,
    diff: Annotated[
        bool, typer.Option("--diff", help="SOURCE is a unified diff against the newest version.")
    ] = False,
    base_version: Annotated[int | None, typer.Option(help="With --diff: the version it is against.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Store a new version of a skill (the upload_skill tool)."""
    with errors():
        text = _read_text(source, "diff" if diff else "content")
    data = {"repository": repository, "skill_id": skill_id, "base_version": base_version}
    run_op("upload_skill", db, as_json, _clean({**data, ("diff" if diff else "content"): text}))


@skills_app.command("read")
def read(
    repository: RepoOpt,
    skill_id: SkillArg,
    version: Annotated[int | None, typer.Option(help="A version number (default: the newest).")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a skill's text, status and versions (the read_skill tool)."""

    def human(result: Any) -> None:
        for warning in [result.notice, *result.warnings]:
            typer.echo(f"warning: {warning}", err=True)
        sys.stdout.write(result.content)

    data = _clean({"repository": repository, "skill_id": skill_id, "version": version})
    run_op("read_skill", db, as_json, data, human)


@skills_app.command("search")
def search(
    query: Annotated[str, typer.Argument(help="What you are about to do, in your own words.")],
    repository: Annotated[
        str | None, typer.Option("--repository", "--repo", "-r", help="Only this one.")
    ] = None,
    include_deprecated: Annotated[bool, typer.Option(help="Also deprecated skills.")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", help="1-50.")] = 10,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Find skills by meaning and words (the search_skills tool)."""
    data = {
        "query": query,
        "repository": repository,
        "include_deprecated": include_deprecated,
        "limit": limit,
    }
    run_op("search_skills", db, as_json, _clean(data))


@skills_app.command("list")
def list_(
    repository: Annotated[
        str | None, typer.Option("--repository", "--repo", "-r", help="Only this one.")
    ] = None,
    status: Annotated[
        list[str] | None,
        typer.Option(help="active, deprecated, revoked (repeatable; default: the first two)."),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List skills (the list_skills tool)."""
    run_op("list_skills", db, as_json, _clean({"repository": repository, "statuses": status}))


@skills_app.command("versions")
def versions(repository: RepoOpt, skill_id: SkillArg, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """A skill's versions, authors and signature states (the skill_versions tool)."""
    run_op("skill_versions", db, as_json, {"repository": repository, "skill_id": skill_id})


@skills_app.command("deprecate")
def deprecate(
    repository: RepoOpt,
    skill_id: SkillArg,
    reason: Annotated[str | None, typer.Option(help="Why (kept on the ledger).")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Mark a skill deprecated; a later upload re-activates it (the deprecate_skill tool)."""
    run_op(
        "deprecate_skill",
        db,
        as_json,
        _clean({"repository": repository, "skill_id": skill_id, "reason": reason}),
    )


@skills_app.command("revoke")
def revoke(
    repository: RepoOpt,
    skill_id: SkillArg,
    reason: Annotated[str, typer.Option(help="Why (kept on the ledger).")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a skill for good (the revoke_skill tool)."""
    run_op("revoke_skill", db, as_json, {"repository": repository, "skill_id": skill_id, "reason": reason})


@skills_app.command("delete")
def delete(
    repository: RepoOpt,
    skill_id: SkillArg,
    reason: Annotated[str | None, typer.Option(help="Why (kept in the tombstone).")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Erase every version of a skill; the ledger keeps a tombstone (the delete_skill tool)."""
    run_op(
        "delete_skill",
        db,
        as_json,
        _clean({"repository": repository, "skill_id": skill_id, "reason": reason}),
    )


@skills_app.command("export")
def export(
    repository: RepoOpt,
    to: Annotated[Path, typer.Option("--to", help="Directory to write <name>/SKILL.md folders into.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the active, verified skills as SKILL.md folders (e.g. --to .claude/skills)."""
    run(db, as_json, lambda m, c: m.export_skills(c, repository, to))


@skills_app.command("import")
def import_(
    source: Annotated[Path, typer.Argument(help="A skills folder (<name>/SKILL.md), e.g. .claude/skills.")],
    repository: RepoOpt,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Upload every SKILL.md of a skills folder; one bad file rejects them all."""
    run(db, as_json, lambda m, c: m.import_skills(c, repository, source))
