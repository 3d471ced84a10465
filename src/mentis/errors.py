"""Every error Mentis raises on purpose, with its HTTP status and CLI exit code.

::

                                 HTTP exit
    MentisError                   500   1  base: a message that says what happened and what to do
    ├── InvalidInput              422   2  a field broke a rule (names the field and the limit); nothing
    │                                      written
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
    ├── MissingExtra              500  11  an optional dependency is not installed (names the pip extra)
    └── RerankFailed              500  12  (mentis.providers.rerank) the LLM rerank failed; search falls
                                           back to the fused order

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


__all__ = [
    "ConfigError",
    "Conflict",
    "EmbeddingError",
    "Forbidden",
    "IntegrityError",
    "InvalidInput",
    "MentisError",
    "MissingExtra",
    "NotFound",
    "QueryError",
    "StoreError",
]
