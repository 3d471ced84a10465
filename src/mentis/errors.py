"""Every error Mentis raises on purpose, with its HTTP status and CLI exit code.

::

                                 HTTP exit
    MentisError                   500   1  base: a message that says what happened and what to do
    ├── InvalidInput              422   2  a field broke a rule (names the field and the limit); nothing
    │   │                                  written
    │   ├── RegistryError         422   2  an agent registry event may not follow the registry
    │   ├── SkillTextError        422   2  a text is not a skill, or a skill diff does not apply
    │   └── NotACheckout          422   2  the directory is not inside a git working tree
    ├── NotFound                  404   3  an id, task or repository that does not exist
    ├── Conflict                  409   4  the call contradicts what is stored (e.g. correcting a
    │                                      forgotten attempt)
    ├── Forbidden                 403   5  the caller's scope does not allow the call
    ├── IntegrityError            500   6  the ledger does not verify (names chain, seq and what failed)
    ├── StoreError                503   7  the database failed (locked past the timeout, disk full,
    │                                      schema too new)
    ├── EmbeddingError            502   8  the embedder failed or returned a vector of the wrong shape
    ├── QueryError                400   9  a recall SQL statement was refused or failed
    ├── ConfigError               500  10  a setting is missing or contradictory
    │   └── NothingToRecord       500  10  a hook's check ran where no task can be named
    ├── MissingExtra              500  11  an optional dependency is not installed (names the pip extra)
    ├── RerankFailed              500  12  the LLM rerank failed; search falls back to the fused order
    ├── ExtractFailed             502  12  the LLM extraction of proposals failed; nothing proposed
    └── RemoteError               502  12  a Mentis server this process calls failed or refused the call
        ├── RemoteUnavailable     502  12  it could not be reached, refused the token or did not answer
        ├── ResponseTooLarge      502  12  its answer was more than the proxy reads
        ├── StatementRefused      502  12  it prepared an entry that is not the caller's write
        └── HookCallFailed        502  12  it refused or failed a hook's call

Transports map these once: MCP turns them into tool errors, REST and the dashboard answer with the
class's ``http_status`` (a subclass inherits its parent's), the CLI exits with ``exit_code`` and
one line on stderr.
"""

from __future__ import annotations


class MentisError(Exception):
    """Base of every deliberate Mentis error."""

    exit_code = 1
    code = "error"
    http_status = 500
    """The status REST and the dashboard answer with (the one table: each class states its own)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidInput(MentisError):
    """A field broke a rule; the message names the field and the limit."""

    exit_code = 2
    code = "invalid_input"
    http_status = 422  # the body parsed but a field broke a rule

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFound(MentisError):
    exit_code = 3
    code = "not_found"
    http_status = 404


class Conflict(MentisError):
    exit_code = 4
    code = "conflict"
    http_status = 409


class Forbidden(MentisError):
    exit_code = 5
    code = "forbidden"
    http_status = 403  # the token's scope does not allow the call


class IntegrityError(MentisError):
    """The ledger failed verification; ``chain``, ``seq`` and ``what`` (what failed, in a few
    words) when the failure is one entry's."""

    exit_code = 6
    code = "integrity"
    http_status = 500  # the store does not verify: the server cannot answer truthfully

    def __init__(
        self, message: str, chain: str | None = None, seq: int | None = None, what: str | None = None
    ) -> None:
        super().__init__(message)
        self.chain = chain
        self.seq = seq
        self.what = what


class StoreError(MentisError):
    exit_code = 7
    code = "store"
    http_status = 503  # the database is locked past its timeout, full or damaged


class EmbeddingError(MentisError):
    exit_code = 8
    code = "embedding"
    http_status = 502  # the embedding provider failed


class QueryError(MentisError):
    exit_code = 9
    code = "query"
    http_status = 400  # recall SQL refused, failed or timed out


class ConfigError(MentisError):
    exit_code = 10
    code = "config"
    http_status = 500


class MissingExtra(MentisError):
    exit_code = 11
    code = "missing_extra"
    http_status = 500

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"the optional dependency {module!r} is not installed; run: pip install 'mentis[{extra}]'"
        )
        self.module = module
        self.extra = extra


# ---------------------------------------------------------------- the particular errors


class RegistryError(InvalidInput):
    """An agent registry event that may not follow the registry as it stands (the message says
    why). ``kind`` is ``invalid`` (malformed), ``not_found`` (no such agent or key) or ``conflict``
    (it contradicts the registry: already registered, revoked or disabled); the store answers the
    caller with :class:`InvalidInput`, :class:`NotFound` or :class:`Conflict` accordingly."""

    def __init__(self, message: str, kind: str = "invalid") -> None:
        super().__init__(message)
        self.kind = kind


class SkillTextError(InvalidInput):
    """The text is not a skill, or a diff does not apply; ``field`` names what is wrong."""

    def __init__(self, message: str, field: str = "content") -> None:
        super().__init__(message, field)


class NotACheckout(InvalidInput):
    """The directory is not inside a git working tree."""


class NothingToRecord(ConfigError):
    """A hook's check ran where no task can be named (a detached HEAD without `mentis task start`)."""


class RerankFailed(MentisError):
    """The rerank call or its reply failed; the search keeps the fused order and says so."""

    exit_code = 12
    code = "rerank_failed"
    http_status = 500
    max_reason = 200
    """Characters of the reason kept (it may quote the provider's answer)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason[: self.max_reason]
        super().__init__(f"rerank failed: {self.reason}")


class ExtractFailed(MentisError):
    """The LLM extraction call or its reply failed (``mentis propose transcript --llm``); nothing
    it would have proposed is queued."""

    exit_code = 12
    code = "extract_failed"
    http_status = 502
    max_reason = 300

    def __init__(self, reason: str) -> None:
        self.reason = reason[: self.max_reason]
        super().__init__(f"LLM extraction failed, nothing proposed: {self.reason}")


class RemoteError(MentisError):
    """A Mentis server this process calls (the ``serve --remote`` proxy's, a hook's) could not be
    reached, or refused or failed the call; the message names the server and what it answered."""

    exit_code = 12
    code = "remote"
    http_status = 502


class RemoteUnavailable(RemoteError):
    """The remote Mentis could not be reached, refused the token, or did not answer in time."""

    code = "unavailable"


class ResponseTooLarge(RemoteError):
    """The remote's answer to a call was more than the proxy reads (``--max-response-mb``)."""

    code = "too_large"


class StatementRefused(RemoteError):
    """The entry the remote prepared is not the caller's write; nothing was signed."""

    code = "statement_refused"

    def __init__(self, message: str, field: str) -> None:
        super().__init__(
            f"the remote Mentis prepared an entry that is not this call: {message}. Nothing was "
            "signed; a server that changes what it is asked to write is broken or hostile (tell its "
            "operator, or check that both run the same Mentis version)"
        )
        self.field = field


class HookCallFailed(RemoteError):
    """The memory a hook calls refused or failed the call (the message carries its error)."""

    code = "hook_call_failed"


__all__ = [
    "ConfigError",
    "Conflict",
    "EmbeddingError",
    "ExtractFailed",
    "Forbidden",
    "HookCallFailed",
    "IntegrityError",
    "InvalidInput",
    "MentisError",
    "MissingExtra",
    "NotACheckout",
    "NotFound",
    "NothingToRecord",
    "QueryError",
    "RegistryError",
    "RemoteError",
    "RemoteUnavailable",
    "RerankFailed",
    "ResponseTooLarge",
    "SkillTextError",
    "StatementRefused",
    "StoreError",
]
