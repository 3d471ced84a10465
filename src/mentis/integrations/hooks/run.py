"""``mentis hook <harness> <event>``: read the harness's payload on stdin, act, exit 0.

- ``post-tool-use``: a shell command that is a recognised check is recorded as an attempt of the
  checkout's current task, with its exit status, the scrubbed tail of its output, the files
  changed since the last recorded attempt and the git code context.
- ``session-start`` / ``user-prompt-submit``: search with the prompt (or the current task) and
  answer with the related attempts as additional context, or with nothing.

A hook never breaks the harness: every error is appended as one JSON line to
``Settings.hook_error_log`` and the exit status is still 0.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mentis.config import Settings
from mentis.errors import MentisError, NothingToRecord
from mentis.integrations import git
from mentis.integrations.hooks import config as hook_config
from mentis.integrations.hooks import payload, recorder, state, surface
from mentis.integrations.hooks.checks import MAX_FILES, clean, recognise, storable_path
from mentis.integrations.hooks.error_log import log_error

MAX_QUERY_CHARS = 8192


def main(args: list[str]) -> int:
    harness = args[0] if args else ""
    event = args[1] if len(args) > 1 else ""
    try:
        if len(args) != 2:
            raise MentisError("usage: mentis hook <harness> <event> (the payload JSON on stdin)")
        payload.check_names(harness, event)
        if sys.stdin is None or sys.stdin.isatty():
            raise MentisError("mentis hook reads the harness's hook JSON on stdin; it is a terminal")
        hook = payload.parse(harness, event, sys.stdin.buffer.read(payload.MAX_PAYLOAD_BYTES + 1))
        answer = handle(hook)
    except Exception as exc:  # a hook must never break the harness
        log_error(harness, event, exc)
        answer = payload.output(harness, _empty(harness, event), None) if harness in payload.SUPPORTED else ""
    if answer:
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()
    return 0


def _empty(harness: str, event: str) -> payload.HookInput:
    return payload.HookInput(harness, event if event in payload.EVENTS else "post-tool-use", None, None)


def handle(hook: payload.HookInput) -> str | None:
    settings = Settings.from_env()
    cwd = Path(hook.cwd) if hook.cwd else Path.cwd()
    top = git.toplevel(cwd)
    cfg = hook_config.load(settings.home, top)
    checkpoint_if_due(hook, cfg, settings, top)
    if hook.event == "post-tool-use":
        record(hook, cfg, settings, top)
        return payload.output(hook.harness, hook, None)
    return payload.output(hook.harness, hook, related(hook, cfg, settings, top))


def checkpoint_if_due(
    hook: payload.HookInput, cfg: hook_config.HookConfig, settings: Settings, top: Path
) -> None:
    """Start ``mentis checkpoint --git`` in the background when ``[checkpoint]`` says one is due
    (``hooks/checkpoint.py``); a failure is logged and the hook goes on."""
    if cfg.checkpoint_every is None or cfg.checkpoint_key is None or cfg.url is not None:
        return
    try:
        from mentis.integrations.hooks import checkpoint

        if hook_config.local_allowed() and checkpoint.due(
            cfg.checkpoint_every, top, git.repository_identity(top)
        ):
            checkpoint.start(settings.home, top, cfg.checkpoint_key, cfg.checkpoint_commit)
    except Exception as exc:  # a checkpoint must not cost the harness its hook
        log_error(hook.harness, hook.event, exc)


def record(hook: payload.HookInput, cfg: hook_config.HookConfig, settings: Settings, top: Path) -> str | None:
    """Record the check this shell command ran; None (and nothing written) for any other command."""
    home = settings.home
    checked = recognise(hook.run, cfg)
    if checked is None:
        return None
    ctx = git.context(top)
    st = state.load(home, top)
    task_id, title = state.task_for(st, ctx)
    if task_id is None:
        raise NothingToRecord(
            f"a check ran in {top} on a detached HEAD with no task; run `mentis task start <id>` there"
        )
    since, since_hashes = state.changed_since_last(st, ctx)
    hashes = {p: h for p, h in {**ctx.file_hashes, **since_hashes}.items() if storable_path(p)}
    hashes = dict(list(hashes.items())[:MAX_FILES])
    body: dict[str, Any] = {
        "repository": git.repository_identity(top),
        "task_id": task_id,
        "code_context": {**ctx.code_context(), "file_hashes": hashes} if hashes else ctx.code_context(),
        **checked.attempt_fields(since),
        "tags": ["hook", hook.harness],
    }
    if title:
        body["task_title"] = title
    if hook.session_id:
        body["session_id"] = hook.session_id[:256]
    if (branch := state.memory_branch(cfg.follow_git, top, ctx.branch)) is not None:
        body["branch"] = branch  # the memory branch of this git branch, created on first use
    if cfg.url is None and os.environ.get("MENTIS_HOOK_DETACH", "1") != "0":
        hook_config.check_local_allowed()
        recorder.detach(home, hook.harness, body)  # a child reaches the background server
        attempt_id = None
    else:
        from mentis.integrations.hooks.backend import open_backend, record_attempt  # here: see related()

        backend = open_backend(cfg.url, cfg.token_file, settings, hook.harness, cfg.idle_s)
        try:
            attempt_id = str(record_attempt(backend, body).get("attempt_id"))
        finally:
            backend.close()
    st.last_commit, st.last_hashes, st.recorded = ctx.commit, dict(ctx.file_hashes), True
    state.save(home, st)
    return attempt_id


def related(
    hook: payload.HookInput, cfg: hook_config.HookConfig, settings: Settings, top: Path
) -> str | None:
    """The related attempts as additional context, or None when nothing reaches the threshold.
    Following git (``[branches] follow_git``), the search reads through the checkout's memory
    branch when the memory has it."""
    git_branch = git.head(top)[1] if cfg.follow_git else None  # a prompt's hook reads git only then
    if hook.event == "user-prompt-submit":
        query = hook.prompt or ""
    else:
        st = state.load(settings.home, top)
        if st.task_id:
            query = f"{st.task_id}: {st.title}" if st.title else st.task_id
        else:
            branch = git_branch if cfg.follow_git else git.head(top)[1]
            query = "" if branch is None or branch in state.DEFAULT_BRANCHES else branch
    query = clean(query).strip()[:MAX_QUERY_CHARS]
    if not query:  # nothing says what this session is about yet
        if hook.event == "session-start" and cfg.url is None and hook_config.local_allowed():
            from mentis.integrations.hooks.background import warm

            warm(settings, cfg.idle_s)  # so the session's first prompt finds the model loaded
        return None
    repository = git.repository_identity(top)
    request: dict[str, Any] = {"query": query, "repository": repository, "limit": cfg.limit}
    tree = git.tree_hashes(top)
    small = len(tree) <= MAX_FILES
    if small:  # today's blob id of every file: one search names each attempt's stale files
        request["current_file_hashes"] = {p: h for p, h in tree.items() if storable_path(p)}
    # imported here, not at the top: http.client and its email parser take about a tenth of a
    # post-tool-use hook's start-up, and a check recorded in the background never calls
    from mentis.integrations.hooks.backend import existing_branch, open_backend

    wanted = state.memory_branch(cfg.follow_git, top, git_branch)
    backend = open_backend(cfg.url, cfg.token_file, settings, hook.harness, cfg.idle_s)
    try:
        if (branch := existing_branch(backend, repository, wanted)) is not None:
            request["branch"] = branch
        tasks = surface.relevant(backend.call("search", request)["tasks"], cfg.min_similarity)
        paths = sorted({f for t in tasks for f in (t.get("attempt") or {}).get("files", [])})[:MAX_FILES]
        current = {p: tree[p] for p in paths if p in tree and storable_path(p)}
        if current and not small:  # a large tree: ask again with the blob ids of the matches' files
            request["current_file_hashes"] = current
            tasks = surface.relevant(backend.call("search", request)["tasks"], cfg.min_similarity)
    finally:
        backend.close()
    return surface.render(repository, query, tasks, cfg.budget_tokens)
