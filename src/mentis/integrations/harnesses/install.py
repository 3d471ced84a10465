"""Install, uninstall and inspect the Mentis entry (and hook entries) in a harness's config.

``plan_install`` / ``plan_uninstall`` compute the new text of every file they touch without writing;
``apply`` backs each changed file up and writes it atomically. A second install changes no byte,
and uninstall after install gives back the original bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mentis.errors import ConfigError, InvalidInput
from mentis.integrations.harnesses import files
from mentis.integrations.harnesses.base import ENTRY, TOKEN_ENV, Env, Harness, HookPlan, Server
from mentis.integrations.harnesses.files import ConfigDocument
from mentis.service.profiles import parse_profile


@dataclass
class Change:
    path: Path  # as named by the harness (may be a symlink)
    target: Path  # the real file written
    parts: list[str]  # what in it: "mcp", "hooks"
    before: str | None  # None: the file does not exist yet
    after: str
    private: bool

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        return files.unified_diff(self.path, self.before, self.after)


class _Files:
    """The documents being edited, one per real file, so two edits to one file compose."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.open: dict[Path, tuple[Change, ConfigDocument]] = {}

    def edit(
        self, path: Path, part: str, *, create: bool, private: bool, fmt: str | None = None
    ) -> ConfigDocument | None:
        target, before = files.read(path)
        if target in self.open:
            change, doc = self.open[target]
        else:
            if before is None and not create:
                return None
            doc = files.document(fmt or self.harness.fmt, before or "", str(path))
            change = Change(path, target, [], before, before or "", private)
            self.open[target] = (change, doc)
        if part not in change.parts:
            change.parts.append(part)
        return doc

    def changes(self) -> list[Change]:
        out = []
        for change, doc in self.open.values():
            text = doc.text
            change.after = change.before if change.before is not None and text == change.before else text
            out.append(change)
        return out


def server_for(
    argv: list[str], *, stdio: bool, url: str | None, token_file: Path | None, tools: str | None = None
) -> Server:
    """The server to install from the command's options: stdio (default) or HTTP at ``url``;
    ``tools`` is a stdio server's tool profile."""
    if stdio and url:
        raise InvalidInput("choose one of --stdio and --http URL")
    if token_file is not None and url is None:
        raise InvalidInput("--token-file goes with --http URL", "token_file")
    if tools is not None and url is not None:
        raise InvalidInput(
            "--tools goes with --stdio: an HTTP server offers the profile it was started with "
            "(`mentis serve --http --tools PROFILE`)",
            "tools",
        )
    spec = parse_profile(tools).spec if tools is not None else None
    server = Server(tuple(argv), url, token_file.absolute() if token_file else None, spec)
    check_server(server)
    return server


# Keys that say how a server is reached; every other key a user added to the Mentis entry
# (disabled, timeout, trust, tool filters…) is kept when the entry is written again.
TRANSPORT_KEYS = frozenset(
    {"type", "command", "args", "env", "environment", "url", "httpUrl", "serverUrl", "headers"}
    | {"bearer_token_env_var", "enabled"}
)


def merge_entry(current: Any, fresh: dict[str, Any]) -> dict[str, Any]:
    """``fresh`` plus what the user added to the entry already there: keys outside
    TRANSPORT_KEYS, and (when both launch a command) their own environment variables."""
    if not isinstance(current, dict):
        return fresh
    merged = {**fresh, **{k: v for k, v in current.items() if k not in TRANSPORT_KEYS}}
    for env_key in ("env", "environment"):
        old, new = current.get(env_key), fresh.get(env_key)
        if isinstance(old, dict) and isinstance(new, dict):
            merged[env_key] = {**old, **new}
    return merged


def token_note(harness: Harness, url: str | None, token_file: Path | None) -> str | None:
    """What to do so that an HTTP entry carries the token: set ``MENTIS_TOKEN`` where the harness
    starts, unless its entry names the token file itself; None for a stdio entry."""
    if url is None or (harness.reads_token_file and token_file is not None):
        return None
    source = f"$(cat {token_file})" if token_file else "<token>"
    return (
        f"{harness.title} reads the token from ${TOKEN_ENV}: set it where {harness.title} starts, "
        f"e.g. export {TOKEN_ENV}={source}"
    )


def check_server(server: Server) -> None:
    if server.url is not None:
        parts = urlsplit(server.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(
                f"--http {server.url!r}: expected an http(s) URL such as http://127.0.0.1:9471/mcp"
            )
    if server.token_file is not None and not server.token_file.is_file():
        raise InvalidInput(f"--token-file {server.token_file}: no such file", "token_file")


def _project(project: Path | None) -> Path | None:
    if project is None:
        return None
    if not project.is_dir():
        raise InvalidInput(f"--project {project}: not a directory", "project")
    return project.resolve()


def plan_install(
    harness: Harness, env: Env, server: Server, project: Path | None, *, hooks: bool, argv: list[str]
) -> tuple[list[Change], str | None]:
    """The changes an install makes; the second value says why no hooks were written, if so."""
    check_server(server)
    project = _project(project)
    fresh = harness.entry(server, project=project is not None)
    edits = _Files(harness)
    doc = edits.edit(harness.config(env, project), "mcp", create=True, private=project is None)
    assert doc is not None
    doc.set(harness.servers, ENTRY, merge_entry(doc.get((*harness.servers, ENTRY)), fresh))
    note = None
    plan = harness.hooks(env, project, argv) if hooks else None
    if hooks and plan is None:
        note = harness.no_hooks or f"{harness.title} has no hook system Mentis writes to"
    if plan is not None:
        hook_doc = edits.edit(plan.file, "hooks", create=True, private=project is None, fmt=plan.fmt)
        assert hook_doc is not None
        _install_hooks(hook_doc, harness, plan)
    return edits.changes(), note


def _install_hooks(doc: ConfigDocument, harness: Harness, plan: HookPlan) -> None:
    for hook in plan.items:
        current = doc.get(hook.path)
        if current is not None and not isinstance(current, list):
            raise ConfigError(f"{plan.file}: {'.'.join(hook.path)!r} is not a list; the file was not changed")
        ours = [i for i, item in enumerate(current or []) if harness.is_ours(item)]
        if current is not None and len(ours) == 1 and current[ours[0]] == hook.item:
            continue
        for i in reversed(ours):
            doc.remove((*hook.path, i))
        assert isinstance(doc, files.JsonDocument)
        doc.append(hook.path[:-1], hook.path[-1], hook.item)


def plan_uninstall(harness: Harness, env: Env, project: Path | None, argv: list[str]) -> list[Change]:
    """The changes an uninstall makes: the Mentis server entry and Mentis's hook entries go."""
    project = _project(project)
    edits = _Files(harness)
    doc = edits.edit(harness.config(env, project), "mcp", create=False, private=project is None)
    if doc is not None:
        doc.remove((*harness.servers, ENTRY), prune=len(harness.servers))
    plan = harness.hooks(env, project, argv)
    if plan is not None:
        hook_doc = edits.edit(plan.file, "hooks", create=False, private=project is None, fmt=plan.fmt)
        if hook_doc is not None:
            for hook in plan.items:
                current = doc_list(hook_doc, hook.path)
                for i in reversed([i for i, item in enumerate(current) if harness.is_ours(item)]):
                    hook_doc.remove((*hook.path, i), prune=len(hook.path))
    return edits.changes()


def doc_list(doc: ConfigDocument, path: tuple[str, ...]) -> list[Any]:
    current = doc.get(path)
    return current if isinstance(current, list) else []


def apply(changes: list[Change]) -> list[dict[str, Any]]:
    """Back up and write every changed file; report each one."""
    report = []
    for change in changes:
        backup = None
        if change.changed:
            if files.read(change.path)[1] != change.before:
                raise ConfigError(
                    f"{change.path} changed while Mentis was editing it (another program wrote it); "
                    "it was left as that program wrote it: run the command again"
                )
            if change.before is not None:
                backup = files.backup(change.target)
            files.write_atomic(change.target, change.after, private=change.private)
        report.append(describe(change, backup))
    return report


def describe(change: Change, backup: Path | None = None) -> dict[str, Any]:
    return {
        "file": str(change.path),
        "target": str(change.target),
        "parts": change.parts,
        "changed": change.changed,
        "created": change.before is None and change.changed,
        "backup": None if backup is None else str(backup),
    }


def status(harness: Harness, env: Env, project: Path | None, argv: list[str]) -> dict[str, Any]:
    """Whether the harness's config exists, holds Mentis, and holds Mentis's hooks."""
    row: dict[str, Any] = {"harness": harness.name, "title": harness.title}
    try:
        path = harness.config(env, project)
    except ConfigError as exc:
        return {**row, "file": None, "found": False, "mentis": False, "hooks": None, "note": str(exc)}
    row.update(file=str(path), found=path.exists(), mentis=False, hooks=None)
    try:
        _, text = files.read(path)
        if text is not None:
            row["mentis"] = (
                files.document(harness.fmt, text, str(path)).get((*harness.servers, ENTRY)) is not None
            )
        plan = harness.hooks(env, project, argv)
        if plan is not None:
            _, hook_text = files.read(plan.file)
            hook_doc = None if hook_text is None else files.document(plan.fmt, hook_text, str(plan.file))
            row["hooks"] = hook_doc is not None and all(
                any(harness.is_ours(item) for item in doc_list(hook_doc, hook.path)) for hook in plan.items
            )
    except ConfigError as exc:
        row["error"] = str(exc)
    return row
