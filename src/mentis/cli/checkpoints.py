"""``mentis checkpoint``: sign every chain's head with an operator key, record it in the ledger and
keep it where the store's writer cannot reach: a file (``--out``), the repository's checkout
(``--git``), a witness URL (``--post``), or stdout for a person to keep. ``mentis verify
--checkpoint`` (in ``attempts``) checks the store still holds it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from mentis.cli.common import DbOpt, JsonOpt, emit, errors, open_memory
from mentis.errors import ConfigError, InvalidInput
from mentis.integrations import checkpoint_git
from mentis.integrations.git import repository_identity, toplevel
from mentis.service import checkpoint_post

commands = typer.Typer()


@commands.command("checkpoint")
def checkpoint(
    repositories: Annotated[
        list[str] | None,
        typer.Option("--repository", "-r", help="Only this chain (repeatable; default: every chain)."),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option("--key", help="Operator key (PEM) to sign with (default: $MENTIS_SIGNING_KEY)."),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the checkpoint to this new file.")] = None,
    to_git: Annotated[
        bool,
        typer.Option(
            "--git",
            help="Write it into the current checkout, .mentis/checkpoints/<chain>/<time>-<seq>.json "
            "(default chain: the checkout's origin remote).",
        ),
    ] = False,
    commit: Annotated[bool, typer.Option("--commit", help="With --git: commit that one file.")] = False,
    post: Annotated[
        str | None,
        typer.Option(
            "--post", help="POST it to this witness URL (https, or http to loopback), webhook-signed."
        ),
    ] = None,
    secret_file: Annotated[
        Path | None,
        typer.Option(
            "--post-secret-file", help="The witness's whsec_ secret (default: $MENTIS_CHECKPOINT_SECRET)."
        ),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Sign each chain's head (seq and hash) with an operator key and record it in the ledger."""
    with errors():
        chains = list(repositories or [])
        if commit and not to_git:
            raise InvalidInput("--commit commits the file --git writes; add --git", field="commit")
        if to_git and len(chains) > 1:
            raise InvalidInput(
                "--git writes one repository's checkpoint; name at most one --repository", field="git"
            )
        if to_git and not chains:
            chains = [repository_identity(toplevel(Path.cwd()))]
        secret = _secret(secret_file) if post is not None else None
        if post is not None:  # checked before anything is written
            checkpoint_post.check_url(post)
            checkpoint_post.secret_key(secret)
    with open_memory(db) as (memory, who), errors():
        made = memory.checkpoint(who, key, chains)
        cp = made.checkpoint
        result: dict[str, Any] = made.to_json()
        if out is not None:
            result["out"] = str(_write_new(out, cp.text()))
        if to_git:
            path = checkpoint_git.write(cp, chains[0], Path.cwd(), commit=commit)
            result["git"] = {"path": str(path), "committed": commit}
            if not commit:
                result["git"]["commit"] = checkpoint_git.commit_hint(path)
        if post is not None:
            delivery = checkpoint_post.post(post, cp.text(), secret)
            result["post"] = {
                "url": delivery.url,
                "webhook_id": delivery.message_id,
                "status": delivery.status,
            }
    if out is None and not to_git and post is None and not as_json:
        sys.stdout.write(cp.text().decode())  # for a person to keep
        return
    emit(result, as_json, _print_made)


def _secret(path: Path | None) -> str | None:
    if path is None:
        return os.environ.get("MENTIS_CHECKPOINT_SECRET") or None
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the webhook secret {path}: {exc.strerror or exc}") from None


def _write_new(path: Path, data: bytes) -> Path:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise InvalidInput(f"{path} already exists; choose another --out", field="out") from None
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _print_made(result: dict[str, Any]) -> None:
    console = Console()
    cp = result["checkpoint"]
    console.print(
        f"checkpoint of {len(cp['chains'])} chain(s) signed by {cp['agent']} ({cp['key_id']}) at {cp['at']}, "
        f"recorded at {result['ledger']['chain']} seq {result['ledger']['seq']}",
        highlight=False,
    )
    if "out" in result:
        console.print(f"written to {result['out']}", highlight=False)
    if "git" in result:
        console.print(f"written to {result['git']['path']}", highlight=False)
        if not result["git"]["committed"]:
            console.print(f"commit it with: {result['git']['commit']}", highlight=False)
    if "post" in result:
        console.print(f"posted to {result['post']['url']} ({result['post']['status']})", highlight=False)
