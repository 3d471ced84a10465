"""Federated search: one search over this memory and the others configured, fused by rank.

The others are named in ``MENTIS_FEDERATION`` (``NAME=URL`` pairs, comma-separated): a
``postgresql://`` URL is a store this process opens itself (with the same embedder), an
``https://`` URL a remote ``mentis serve --http`` reached over REST (``POST /v1/search``) with the
token of ``MENTIS_FEDERATION_<NAME>_TOKEN`` (or ``_TOKEN_FILE``). Plain ``http://`` is refused
unless the host is a loopback address: the token must not cross a network in clear text.

Every memory is asked concurrently with its own ``search``, as the caller, and so applies its own
scopes: this store and a PostgreSQL one search with the caller's repositories; a remote one
answers for the token configured for it, so a caller limited to some repositories is not given a
remote's answer (it is reported unavailable, saying why). Each memory's answer counts only by its
ranks: the tasks are fused with the reciprocal-rank fusion search uses inside one store
(:func:`mentis.retrieval.fuse_ranked`, k = :data:`mentis.retrieval.RRF_K`), never by comparing
scores, which are not comparable across stores. A task (repository + task id) found in several
memories is one result naming each memory and its rank there. A memory that is down, refuses the
token, fails or does not answer within its timeout (``MENTIS_FEDERATION_TIMEOUT``, or
``MENTIS_FEDERATION_<NAME>_TIMEOUT``; default :data:`DEFAULT_TIMEOUT_S`) is listed in the answer's
``unavailable`` with the reason, and the others still answer. The query sent to a remote memory
passes the secret scrubber first, as all text leaving the machine does.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from pydantic import ValidationError

from mentis import retrieval
from mentis.api.attempts import SearchInput, SearchResult, TaskResult
from mentis.api.federation import (
    LOCAL,
    FederatedSearchInput,
    FederatedSearchResult,
    FederatedTask,
    MemoryDown,
    MemoryRank,
)
from mentis.config import FEDERATION_VARIABLE
from mentis.errors import ConfigError, InvalidInput, MentisError, RemoteUnavailable
from mentis.providers.http import OpenAIClient, loopback_host
from mentis.providers.scrub import scrub_text
from mentis.service.access import Caller, may_read

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
"""Seconds each memory has to answer a federated search (opening a PostgreSQL store included)."""
MAX_MEMORIES = 16
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


class Searcher(Protocol):
    def search(self, caller: Caller, req: SearchInput) -> SearchResult: ...


@dataclass(frozen=True)
class MemoryConfig:
    """One configured memory: a PostgreSQL store or a remote Mentis (``token`` set)."""

    name: str
    url: str = field(repr=False)
    timeout_s: float
    token: str | None = field(default=None, repr=False)

    @property
    def remote(self) -> bool:
        return self.token is not None


def _variable(name: str, suffix: str) -> str:
    return f"{FEDERATION_VARIABLE}_{name.upper().replace('-', '_')}_{suffix}"


def _seconds(env: Mapping[str, str], variable: str, default: float) -> float:
    raw = env.get(variable, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not 0 < value <= 600:
        raise ConfigError(f"{variable}={raw!r} must be a number of seconds in (0, 600], e.g. 10")
    return value


def _token(env: Mapping[str, str], name: str) -> str:
    direct, path = _variable(name, "TOKEN"), _variable(name, "TOKEN_FILE")
    token = env.get(direct, "").strip()
    if not token and env.get(path, "").strip():
        try:
            lines = Path(env[path].strip()).expanduser().read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read {env[path]!r}: {exc}") from None
        token = lines[0].strip() if lines else ""
    if not token:
        raise ConfigError(
            f"{FEDERATION_VARIABLE}: the remote memory {name!r} needs a token: set {direct} or {path} "
            "(`mentis token create --scope read` on that server makes one)"
        )
    return token


def parse_memories(env: Mapping[str, str]) -> list[MemoryConfig]:
    """The memories ``MENTIS_FEDERATION`` names (``NAME=URL,…``); a ConfigError naming the
    variable and the memory for anything that is not one."""
    var = FEDERATION_VARIABLE
    default = _seconds(env, f"{var}_TIMEOUT", DEFAULT_TIMEOUT_S)
    out: list[MemoryConfig] = []
    for item in (w.strip() for w in env.get(var, "").split(",")):
        if not item:
            continue
        name, sep, url = (part.strip() for part in item.partition("="))
        if not sep or not _NAME.match(name) or name == LOCAL:
            raise ConfigError(
                f"{var}: {item!r} is not NAME=URL with a NAME of lowercase letters, digits, - and _ "
                f"(not {LOCAL!r}, which is this store), e.g. {var}=team=https://mentis.example.com"
            )
        if any(m.name == name for m in out):
            raise ConfigError(f"{var}: the memory {name!r} is named twice")
        timeout = _seconds(env, _variable(name, "TIMEOUT"), default)
        parts = urlsplit(url)
        if parts.scheme in ("postgresql", "postgres"):
            out.append(MemoryConfig(name, url, timeout))
            continue
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"{var}: the memory {name!r} needs a postgresql:// URL or the https:// URL of a "
                f"`mentis serve --http`, not {parts.scheme or 'no scheme'}://…"
            )
        if parts.username or parts.password:
            raise ConfigError(
                f"{var}: the URL of the memory {name!r} must not carry credentials; its token goes in "
                f"{_variable(name, 'TOKEN')}"
            )
        if parts.scheme == "http" and not loopback_host(parts.hostname):
            raise ConfigError(
                f"{var}: the memory {name!r} at http://{parts.hostname}: plain http would send its "
                "token in clear text; use https (http only to a loopback address)"
            )
        base = url.rstrip("/").removesuffix("/mcp")
        out.append(MemoryConfig(name, base, timeout, _token(env, name)))
    if len(out) > MAX_MEMORIES:
        raise ConfigError(f"{var}: at most {MAX_MEMORIES} memories, not {len(out)}")
    return out


class RemoteMemory:
    """A remote Mentis's ``search`` over its REST API, with the token configured for it."""

    def __init__(self, config: MemoryConfig) -> None:
        self.name = config.name
        self.client = OpenAIClient(
            config.url,
            config.token,
            # a little past the memory's own timeout, so that the federation reports the wait it
            # gave up on ("did not answer within …") and this thread ends soon after
            timeout=config.timeout_s + 1.0,
            fail=lambda reason: RemoteUnavailable(f"{config.name}: {reason}"),
            retries=0,
            refused="it refused the token",
        )

    def search(self, caller: Caller, req: SearchInput) -> SearchResult:
        # text leaving the machine passes the secret scrubber first (DESIGN §8)
        body = req.model_copy(update={"query": scrub_text(req.query)}).model_dump(
            mode="json", exclude_none=True
        )
        answer = self.client.post("v1/search", body)
        try:
            return _known_fields(answer)
        except ValueError as exc:
            raise RemoteUnavailable(f"{self.name}: its answer is not a search result ({exc})") from None

    def close(self) -> None:
        self.client.close()


def _known_fields(answer: object) -> SearchResult:
    """A remote's search answer as this version's :class:`SearchResult`: fields it does not know
    (a newer server's) are dropped, anything else that does not fit is a ValueError."""
    try:
        return SearchResult.model_validate(answer)
    except ValidationError as exc:
        errors = exc.errors()
        if any(e["type"] != "extra_forbidden" for e in errors):
            raise
        for error in errors:
            *path, key = error["loc"]
            holder: Any = answer
            for step in path:
                holder = holder[step]
            del holder[key]
    return SearchResult.model_validate(answer)


class Federation:
    """The memories one process federates: its own (``local``) and the configured others, opened
    the first time a federated search names them and kept open until :meth:`close`."""

    def __init__(
        self,
        local: Searcher,
        env: Mapping[str, str],
        open_postgres: Callable[[str], Searcher],
    ) -> None:
        self.local = local
        self.env = env
        self.open_postgres = open_postgres
        self._configs: list[MemoryConfig] | None = None
        self._opened: dict[str, Searcher] = {}
        self._lock = threading.Lock()

    def configs(self) -> list[MemoryConfig]:
        if self._configs is None:
            self._configs = parse_memories(self.env)
        return self._configs

    def _member(self, config: MemoryConfig) -> Searcher:
        with self._lock:
            found = self._opened.get(config.name)
        if found is not None:
            return found
        made: Searcher = RemoteMemory(config) if config.remote else self.open_postgres(config.url)
        with self._lock:
            kept = self._opened.setdefault(config.name, made)
        if kept is not made:  # another search opened it meanwhile
            _close(made)
        return kept

    def _ask(self, config: MemoryConfig | None, caller: Caller, req: SearchInput) -> SearchResult:
        if config is None:
            return self.local.search(caller, req)
        if config.remote and caller.repositories is not None:
            raise RemoteUnavailable(
                "a remote memory answers for the token configured for it, and this caller may read only "
                "some repositories; search it with an unrestricted caller"
            )
        # the member applies its own scopes to the caller; this store's damaged chains are not its
        return self._member(config).search(replace(caller, refused={}), req)

    def search(self, caller: Caller, req: FederatedSearchInput) -> FederatedSearchResult:
        configs = {c.name: c for c in self.configs()}
        names = [LOCAL, *configs]
        chosen = list(dict.fromkeys(req.memories or names))
        unknown = [n for n in chosen if n not in names]
        if unknown:
            raise InvalidInput(
                f"memories: no memory named {', '.join(map(repr, unknown))}; the memories are "
                f"{', '.join(names)} ({FEDERATION_VARIABLE} configures the others)",
                field="memories",
            )
        may_read(caller, req.repository)  # a repository the caller may not read: refused, as by search
        sub = SearchInput(query=req.query, repository=req.repository, limit=req.limit)
        started = time.monotonic()
        pool = ThreadPoolExecutor(max_workers=len(chosen), thread_name_prefix="mentis-federated")
        try:
            futures = {n: pool.submit(self._ask, configs.get(n), caller, sub) for n in chosen}
        finally:
            pool.shutdown(wait=False)  # a memory that does not answer is left behind, not waited for
        answers: dict[str, SearchResult] = {}
        down: list[MemoryDown] = []
        for name, future in futures.items():
            timeout = configs[name].timeout_s if name in configs else _local_timeout(self.env)
            try:
                answers[name] = _result(future, started + timeout)
            except FutureTimeout:
                down.append(MemoryDown(memory=name, reason=f"did not answer within {timeout:g} s"))
            except MentisError as exc:
                down.append(MemoryDown(memory=name, reason=f"{exc.code}: {exc.message}"))
            except Exception as exc:  # one memory's failure must not take the others' answers
                log.exception("federated search: memory %s failed", name)
                down.append(MemoryDown(memory=name, reason=f"failed: {type(exc).__name__}"))
        return fuse_answers(answers, down, req.limit)

    def close(self) -> None:
        with self._lock:
            opened, self._opened = list(self._opened.values()), {}
        for member in opened:
            _close(member)


def _local_timeout(env: Mapping[str, str]) -> float:
    return _seconds(env, f"{FEDERATION_VARIABLE}_TIMEOUT", DEFAULT_TIMEOUT_S)


def _result(future: Future[SearchResult], deadline: float) -> SearchResult:
    return future.result(timeout=max(0.0, deadline - time.monotonic()))


def _close(member: object) -> None:
    close = getattr(member, "close", None)
    if close is not None:
        close()


def fuse_answers(
    answers: Mapping[str, SearchResult], down: list[MemoryDown], limit: int
) -> FederatedSearchResult:
    """The memories' answers fused by rank: each answer's tasks in its own order, one list per
    memory, in the order the memories were asked."""
    names = list(answers)
    lists = [[(t.repository, t.task_id) for t in answers[n].tasks] for n in names]
    tasks_of: dict[tuple[str, str, str], TaskResult] = {
        (n, t.repository, t.task_id): t for n in names for t in answers[n].tasks
    }
    out: list[FederatedTask] = []
    for key, score, ranks in retrieval.fuse_ranked(lists)[:limit]:
        held = [(rank, i) for i, rank in enumerate(ranks) if rank]
        shown = names[min(held)[1]]
        out.append(
            FederatedTask(
                memory=shown,
                fused=round(score, 6),
                ranks=[
                    MemoryRank(memory=names[i], rank=rank) for rank, i in sorted(held, key=lambda h: h[1])
                ],
                task=tasks_of[(shown, *key)],
            )
        )
    ranking = (
        f"reciprocal-rank fusion (k = {retrieval.RRF_K}) of each memory's own ranking: "
        f"{', '.join(names) or 'no memory answered'}"
    )
    return FederatedSearchResult(tasks=out, answered=names, unavailable=down, ranking=ranking)


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Federation",
    "MemoryConfig",
    "RemoteMemory",
    "fuse_answers",
    "parse_memories",
]
