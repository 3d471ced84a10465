"""Who is calling and what they may do: the :class:`Caller`, how a transport resolves it, and
every access rule of the service (``may_read``, ``may_write``, ``may_admin``), each written once.

A transport authenticates (a token, or the local user on stdio, the CLI and ``--no-auth``
loopback HTTP) and hands the service a Caller; every operation checks it here. ``Memory`` gives
each operation the caller with the store's damaged chains refused (:meth:`Caller.refusing`), so a
chain that does not verify is outside what any caller sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

from mentis.config import Settings
from mentis.errors import Forbidden, IntegrityError, InvalidInput
from mentis.ledger.bodies import SCOPE_SEP, scope_key
from mentis.ledger.chain import chain_refused
from mentis.ledger.signing import RESERVED_PREFIX


@dataclass(frozen=True)
class Caller:
    """Who is calling. ``repositories`` None means every repository (local, unscoped use);
    ``admin`` may manage the agent registry and the tokens (an admin token, or the local user).

    ``refused`` holds the repositories whose ledger chain does not verify (the store's
    ``damaged``, with each one's failure); Memory sets it on every call (:meth:`refusing`). A
    refused repository is outside what the caller sees, so answers across repositories leave it
    out, and an explicit read or write of it raises its refusal
    (:func:`mentis.ledger.chain.chain_refused`) once the caller's scope covers it."""

    agent_id: str
    session_id: str | None = None
    can_write: bool = True
    repositories: tuple[str, ...] | None = None
    admin: bool = False
    refused: Mapping[str, IntegrityError] = field(default_factory=dict, compare=False, hash=False)
    roots: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    """Each branch chain's repository (docs/branches.md); Memory sets it on every call."""
    views: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False, hash=False)
    """The chains a read of each chain covers, for the chains with branches forked or merged
    (:meth:`mentis.ledger.branches.BranchGraph.read_set`); any other chain reads itself alone."""
    cutoffs: Mapping[str, Mapping[str, int]] = field(default_factory=dict, compare=False, hash=False)
    """For a read of each chain, the last seq it reads of each chain merged into its line (a
    source's records written after its newest merge are not read until it is merged again)."""

    def refusing(self, damaged: Mapping[str, IntegrityError]) -> Caller:
        """This caller with ``damaged`` (the store's chains that do not verify) refused."""
        if not damaged or self.refused is damaged:
            return self
        return replace(self, refused=damaged)

    def branching(
        self,
        roots: Mapping[str, str],
        views: Mapping[str, tuple[str, ...]],
        cutoffs: Mapping[str, Mapping[str, int]] | None = None,
    ) -> Caller:
        """This caller reading the store's branches: ``roots``, ``views`` and ``cutoffs`` as the
        graph stands."""
        if not roots and not views:
            return self
        return replace(self, roots=roots, views=views, cutoffs=cutoffs or {})

    def cutoff(self, repository: str | None) -> Mapping[str, int]:
        """The last seq a read of ``repository`` reads of each merged chain it reads in part."""
        return {} if repository is None else self.cutoffs.get(repository, {})

    def read_set(self, repository: str) -> tuple[str, ...]:
        """The chains a read of ``repository`` (a repository or a branch's chain) covers: itself,
        its ancestors and the chains merged into them."""
        return self.views.get(repository, (repository,))

    def covers(self, repository: str) -> bool:
        """Whether the caller's scope (its token's repositories) covers ``repository`` (a branch's
        chain is covered by its repository's)."""
        if self.repositories is None:
            return True
        repository = self.roots.get(repository, repository)
        return any(fnmatchcase(repository, pattern) for pattern in self.repositories)

    def sees(self, repository: str) -> bool:
        """Whether the caller may read ``repository`` now: covered and not refused."""
        return repository not in self.refused and self.covers(repository)

    @property
    def limited(self) -> bool:
        """Whether the caller sees fewer than all repositories (a scoped token, or a refused chain)."""
        return self.repositories is not None or bool(self.refused)

    def left_out(self, repository: str | None = None) -> list[str]:
        """The refused repositories the caller's scope covers (``repository``: that one only), which
        an answer across them leaves out."""
        return sorted(r for r in self.refused if self.covers(r) and repository in (None, r))

    def search_scope(self, repository: str | None, known: Callable[[], Iterable[str]]) -> list[str] | None:
        """The repositories a search draws candidates and statistics from: the ``repository``
        filter, else every repository this caller may read (``known()`` lists the store's), or
        None for all when the caller sees every one. Nothing outside it shapes a score or a rank."""
        if repository is not None:
            return [r for r in self.read_set(repository) if r == repository or self.sees(r)]
        if not self.limited:
            return None
        return [r for r in known() if self.sees(r)]

    def own_scopes(self, repository: str) -> list[str]:
        """The scope keys of ``repository`` this caller reads as a non-admin: the repository's
        records, its own agent-private ones and, with a session, its own session-private ones."""
        keys = [repository, scope_key(repository, "agent", self.agent_id, None)]
        if self.session_id:
            keys.append(scope_key(repository, "session", self.agent_id, self.session_id))
        return keys

    def reads(self, repository: str, scope: str) -> bool:
        """Whether the caller may read a record of ``repository`` with scope key ``scope``
        (:func:`mentis.ledger.bodies.scope_key`): it sees the repository, and the record is the
        repository's, or the caller's own private one, or the caller is an admin."""
        if not self.sees(repository):
            return False
        return self.admin or scope == repository or scope in self.own_scopes(repository)

    def reads_key(self, scope: str) -> bool:
        """:meth:`reads` for a record known by its scope key alone (``recall``'s views)."""
        return self.reads(scope.split(SCOPE_SEP, 1)[0], scope)

    def record_scope(
        self,
        repository: str | None,
        known: Callable[[], Iterable[str]],
        scopes: Callable[[str | None], Iterable[str]],
    ) -> list[str] | None:
        """The scope keys a search of attempts or thoughts draws candidates and every statistic
        from (:meth:`search_scope` with private records): an admin's are every key of the
        repositories it sees (``scopes(repository)`` lists the store's; None: all of every
        repository), anyone else's only those it reads (:meth:`own_scopes`). Nothing outside
        them shapes a score or a rank, so another agent's private records change no answer."""
        if self.admin:
            if repository is None and not self.limited:
                return None
            if repository is None:
                return [k for k in scopes(None) if self.sees(k.split(SCOPE_SEP, 1)[0])]
            keys = [k for r in self.read_set(repository) for k in scopes(r)]
            return [k for k in keys if self.sees(k.split(SCOPE_SEP, 1)[0])]
        if repository is None:
            repos = [r for r in known() if self.sees(r)]
        else:
            repos = [r for r in self.read_set(repository) if r == repository or self.sees(r)]
        return [k for r in repos for k in self.own_scopes(r)]


def written_visibility(visibility: str | None, session_id: str | None) -> str | None:
    """The ``visibility`` a write's body holds: the call's (absent when it gave none: every reader
    of the repository), ``session`` only when the write has a session (InvalidInput otherwise)."""
    if visibility == "session" and not session_id:
        raise InvalidInput(
            "visibility: 'session' needs a session: give session_id (or call from a session)",
            field="visibility",
        )
    return visibility


def resolve_caller(
    settings: Settings,
    *,
    authenticated: Caller | None = None,
    client_name: str | None = None,
    default: str = "unknown-agent",
) -> Caller:
    """Who is calling (DESIGN §2), never taken from a tool argument (its session:
    ``MENTIS_SESSION_ID``, or over HTTP the ``X-Mentis-Session`` header): the caller a transport
    authenticated (a token's agent and scope) when there is one; else ``MENTIS_AGENT_ID``
    (``settings.agent_id``, from the harness config); else the name the MCP client reported
    over stdio; else the transport's ``default`` name. A caller no transport authenticated is the
    local user (stdio, the CLI, HTTP with ``--no-auth`` on loopback), and so an admin."""
    if authenticated is not None:
        return authenticated
    return Caller(
        agent_id=settings.agent_id or client_name or default, session_id=settings.session_id, admin=True
    )


def may_read(caller: Caller, repository: str | None) -> None:
    """The read-scope rule: a caller reads only the repositories its token covers (None: no
    filter), and none whose ledger chain does not verify (that refusal names it)."""
    if repository is None:
        return
    if not caller.covers(repository):
        raise Forbidden(f"this caller may not read repository {repository!r}")
    if repository in caller.refused:
        raise chain_refused(caller.refused[repository])


def may_write(caller: Caller, repository: str) -> None:
    """The write-scope rule: a token with write scope, over this repository (never a system
    chain: names starting with ``__`` are reserved), whose ledger chain verifies."""
    if repository.startswith(RESERVED_PREFIX):
        raise Forbidden(f"repository {repository!r}: names starting with {RESERVED_PREFIX} are reserved")
    if not caller.can_write:
        raise Forbidden("this caller may only read; use a token with write scope")
    if not caller.covers(repository):
        raise Forbidden(f"this caller may not write to repository {repository!r}")
    if repository in caller.refused:
        raise chain_refused(caller.refused[repository])


def may_admin(caller: Caller) -> None:
    """The admin rule (the agent registry, the tokens, importing the registry's chain): an admin
    token over HTTP; the local user on stdio and the CLI."""
    if not caller.admin:
        raise Forbidden(
            "managing agents, keys and tokens needs admin scope; use a token created with "
            "`mentis token create --scope admin`"
        )


def may_describe_entity_type(caller: Caller, name: str, *, replaces: bool) -> None:
    """The entity-type registry's rule (docs/provenance.md): a caller who may write registers a
    new type (or upserts one with its current description); replacing the description of a type
    that exists, built in or registered, is an admin's, since every repository shares it."""
    if not caller.can_write:
        raise Forbidden("upsert_entity_type: this caller may only read; use a token with write scope")
    if replaces and not caller.admin:
        raise Forbidden(
            f"name: entity type {name!r} exists; changing its description needs admin scope "
            "(`mentis token create --scope admin`); upsert it with its current description, or "
            "register a new name"
        )


def left_out_note(caller: Caller) -> str:
    """What an answer across repositories says about the refused ones it left out ("" for none)."""
    gone = caller.left_out()
    if not gone:
        return ""
    return (
        f"; left out: {', '.join(gone)} (ledger chain does not verify; its reads are refused until "
        "it is recovered: run `mentis doctor`)"
    )


__all__ = [
    "Caller",
    "left_out_note",
    "may_admin",
    "may_describe_entity_type",
    "may_read",
    "may_write",
    "resolve_caller",
    "written_visibility",
]
