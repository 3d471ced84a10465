"""Every error Mentis raises on purpose.

::

    MentisError                  base: a message that says what happened and what to do
    ├── InvalidInput             a field broke a rule (names the field and the limit); nothing written
    ├── NotFound                 an id, task or repository that does not exist
    ├── Conflict                 the call contradicts what is stored (e.g. correcting a forgotten attempt)
    ├── Forbidden                the caller's scope does not allow the call
    ├── IntegrityError           the ledger does not verify (names chain, seq and what failed)
    ├── StoreError               the database failed (locked past the timeout, disk full, schema too new)
    ├── EmbeddingError           the embedder failed or returned a vector of the wrong shape
    ├── QueryError               a recall SQL statement was refused or failed
    ├── ConfigError              a setting is missing or contradictory
    ├── MissingExtra             an optional dependency is not installed (names the pip extra)
    └── RerankFailed             (mentis.providers.rerank) the LLM rerank failed; search falls back

Transports map these once: MCP turns them into tool errors, the CLI into an exit code
and one line on stderr.
"""

from __future__ import annotations


class MentisError(Exception):
    """Base of every deliberate Mentis error."""

    exit_code = 1
    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidInput(MentisError):
    """A field broke a rule; the message names the field and the limit."""

    exit_code = 2
    code = "invalid_input"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFound(MentisError):
    exit_code = 3
    code = "not_found"


class Conflict(MentisError):
    exit_code = 4
    code = "conflict"


class Forbidden(MentisError):
    exit_code = 5
    code = "forbidden"


class IntegrityError(MentisError):
    """The ledger failed verification; ``chain``, ``seq`` and ``what`` (what failed, in a few
    words) when the failure is one entry's."""

    exit_code = 6
    code = "integrity"

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


class EmbeddingError(MentisError):
    exit_code = 8
    code = "embedding"


class QueryError(MentisError):
    exit_code = 9
    code = "query"


class ConfigError(MentisError):
    exit_code = 10
    code = "config"


class MissingExtra(MentisError):
    exit_code = 11
    code = "missing_extra"

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
