"""``mentis agent``: the agent registry (keygen, register, add-key, list, show, revoke-key, disable)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mentis.cli.common import DbOpt, JsonOpt, emit, err, errors, open_memory, run_op

commands = typer.Typer()
agent_app = typer.Typer(
    name="agent",
    help="The agent registry: agents and their Ed25519 keys (an agent with a key must sign its writes).",
    no_args_is_help=True,
)
commands.add_typer(agent_app)

AgentOpt = Annotated[str, typer.Option("--agent", "-a", help="Agent id, e.g. claude-code@laptop.")]


def _print_agent(agent: Any) -> None:
    a = agent if isinstance(agent, dict) else agent.model_dump(mode="json")
    state = f"disabled at {a['disabled_at']} ({a['disabled_reason']})" if a["disabled_at"] else "enabled"
    Console().print(f"[bold]{a['agent_id']}[/] {a['display_name']!r}: {state}", highlight=False)
    for key in a["keys"]:
        revoked = f"revoked at {key['revoked_at']} ({key['reason']})" if key["revoked_at"] else "active"
        Console().print(f"  {key['key_id']}  added {key['added_at']}  {revoked}", highlight=False)


@agent_app.command("keygen")
def keygen(
    agent: AgentOpt,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Private key file to write (mode 0600; default $MENTIS_HOME/keys/<agent>-<key>.pem)."
        ),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Make an Ed25519 key for an agent: write the private key (PEM, 0600, never printed), register
    the agent if it is new and add the public key."""
    from mentis.service.agent_keys import create_agent_key

    with open_memory(db) as (memory, caller), errors():
        made = create_agent_key(memory, caller, agent, out)
    show = f"{made.key_id}\n{made.path}\n{made.env}"
    emit(made.to_json(), as_json, lambda _: Console().print(show, highlight=False))
    hint = f"set {made.env} (and MENTIS_AGENT_ID={agent}) where agent {agent} runs `mentis serve`"
    err.print(hint, highlight=False)


@agent_app.command("register")
def register(
    agent: AgentOpt,
    display_name: Annotated[str | None, typer.Option(help="Name to show (default: the id).")] = None,
    description: Annotated[str, typer.Option(help="What the agent is.")] = "",
    alias: Annotated[list[str] | None, typer.Option(help="Another name it writes as (repeatable).")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Register an agent (the register_agent tool)."""
    data = {"agent_id": agent, "display_name": display_name or "", "description": description}
    run_op("register_agent", db, as_json, {**data, "aliases": alias or []}, lambda r: _print_agent(r.agent))


@agent_app.command("add-key")
def add_key(
    agent: AgentOpt,
    public_key: Annotated[str, typer.Option(help="Ed25519 public key: base64url of its 32 bytes.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a public key to an agent (the add_agent_key tool)."""
    run_op(
        "add_agent_key",
        db,
        as_json,
        {"agent_id": agent, "public_key": public_key},
        lambda r: _print_agent(r.agent),
    )


@agent_app.command("list")
def list_agents(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List the registered agents and their keys (the list_agents tool)."""

    def human(result: Any) -> None:
        table = Table("agent", "name", "keys (active)", "state")
        for a in result.agents:
            active = sum(1 for k in a.keys if k.revoked_at is None)
            table.add_row(
                a.agent_id,
                a.display_name,
                f"{len(a.keys)} ({active})",
                "disabled" if a.disabled_at else "enabled",
            )
        Console().print(table)

    run_op("list_agents", db, as_json, {}, human)


@agent_app.command("show")
def show(agent: AgentOpt, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Show one agent and its keys (the show_agent tool)."""
    run_op("show_agent", db, as_json, {"agent_id": agent}, _print_agent)


@agent_app.command("revoke-key")
def revoke_key(
    agent: AgentOpt,
    key_id: Annotated[str, typer.Option("--key-id", help="The key to revoke (ed25519:…).")],
    reason: Annotated[str, typer.Option(help="Why (kept on record).")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke an agent's key (the revoke_agent_key tool); earlier signatures stay valid."""
    data = {"agent_id": agent, "key_id": key_id, "reason": reason}
    run_op("revoke_agent_key", db, as_json, data, lambda r: _print_agent(r.agent))


@agent_app.command("disable")
def disable(
    agent: AgentOpt,
    reason: Annotated[str, typer.Option(help="Why (kept on record).")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Disable an agent (the disable_agent tool): its later writes are refused."""
    run_op(
        "disable_agent", db, as_json, {"agent_id": agent, "reason": reason}, lambda r: _print_agent(r.agent)
    )
