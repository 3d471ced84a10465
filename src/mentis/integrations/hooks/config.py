"""Hook settings: which shell commands are checks, where the server is, the context budget.

Read from ``$MENTIS_HOME/hooks.toml`` (the user's file), then ``<checkout>/.mentis/hooks.toml``
(the project's). Environment variables override the user file::

    [checks]
    patterns = ['pytest\\b', 'go test\\b']   # replace the built-in list (regexes, matched at the
                                              # start of each simple command of the shell line)
    extra = ['just test\\b']                  # added to the built-in list

Who may widen what the hooks record:

- The user's file is the user's own: its ``patterns`` and ``extra`` are regular expressions in
  RE2's syntax (``google-re2``: matching is linear in the command, so no pattern can stall a
  hook; no lookaround or backreferences). A pattern that matches an empty command (``.*``)
  would record every command with its output and is refused.
- A project file is committed by whoever wrote the repository, so it is not trusted: it may only
  set ``[checks] extra``, and each entry is a command prefix, not a regex: words of
  ``[A-Za-z0-9._/:@+=,-]`` separated by spaces (a trailing ``\\b`` is accepted and ignored).
  The first word must be a build, test or lint runner (:data:`RUNNERS`) or a script of the
  checkout (a relative path such as ``./x.py`` or ``scripts/run-tests.sh``), and some word
  must say what it checks (:data:`CHECK_WORDS`: test, check, lint, build …). So ``just test``,
  ``bazel test`` or ``./scripts/check.sh`` are accepted and ``.*``, ``cat``, ``env`` or
  ``(a+)+$`` are refused: a committed file cannot make the hooks record ``cat .env``, nor point
  them (and a token) at another server.

    [server]                                  # talk to a running `mentis serve --http`
    url = "http://127.0.0.1:9471"             # or MENTIS_HOOK_URL
    token_file = "~/.local/share/mentis/admin.token"   # or MENTIS_HOOK_TOKEN_FILE

    [background]                              # without [server] url: the shared background server
    idle_s = 1800                             # exits after this many seconds unused (or MENTIS_HOOK_IDLE_S)

    [context]
    budget_tokens = 1500                      # additionalContext size (tokens ≈ characters / 4)
    min_similarity = 0.38                     # cosine of the best attempt; below it nothing is said
    limit = 5                                 # tasks at most

    [record]
    output_tail_chars = 4000                  # tail of the check's output kept (after scrubbing)

    [branches]                                # docs/branches.md
    follow_git = false                        # true: a check recorded on a git branch other than the
                                              # default goes to the memory branch of that name (created
                                              # on first use), and the hooks search through it;
                                              # or MENTIS_HOOK_FOLLOW_GIT=1 / 0

    [checkpoint]                              # signed checkpoints at a cadence (hooks/checkpoint.py)
    every = "day"                             # or "commit"
    key = "~/.local/share/mentis/keys/ops-0123abcd.pem"   # the operator key (mentis agent keygen)
    commit = false                            # also commit the file in the checkout
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import re2  # type: ignore[import-untyped]  # google-re2: linear-time matching

from mentis.errors import ConfigError

DEFAULT_CHECKS: tuple[str, ...] = (
    r"pytest\b",
    r"py\.test\b",
    r"python[0-9.]* -m (pytest|unittest|mypy|ruff)\b",
    r"tox\b",
    r"nox\b",
    r"go (test|vet)\b",
    r"golangci-lint\b",
    r"cargo (test|nextest|clippy|check)\b",
    r"(npm|pnpm|yarn|bun) (run )?(test|lint|typecheck|check)\b",
    r"(npx |pnpm exec |yarn |bunx )?(jest|vitest|mocha|eslint|tsc|biome)\b",
    r"make (test|check|lint)\b",
    r"ruff (check|format --check)\b",
    r"mypy\b",
    r"pyright\b",
    r"eslint\b",
    r"tsc\b",
    r"(\./)?gradlew? (test|check)\b",
    r"mvn (test|verify)\b",
    r"dotnet test\b",
    r"ctest\b",
    r"rspec\b",
    r"(bundle exec )?rake test\b",
    r"phpunit\b",
    r"mix test\b",
    r"swift test\b",
)

DEFAULT_IDLE_S = 1800
"""Seconds the background server stays up unused: a working session keeps it, a pause of half an
hour costs one start (about 2 s) against holding the model's memory (about 300 MB) for hours."""
MAX_IDLE_S = 7 * 24 * 3600

RUNNERS: frozenset[str] = frozenset(
    """bazel bazelisk buck2 bun bunx cabal cargo cmake composer ctest dart deno dotnet dune earthly
    flutter gmake go gradle gradlew just lein mage make meson mix mvn mvnw ninja npm npx nox nx pants
    pnpm pnpx pytest rake rush sbt stack swift task tox turbo xcodebuild yarn zig""".split()  # noqa: SIM905
)
"""The programs a project file's check may start with (besides a script of the checkout)."""
CHECK_WORDS: frozenset[str] = frozenset(
    "test tests check checks lint typecheck verify spec specs vet clippy build e2e".split()  # noqa: SIM905
)
"""Words one of which a project file's check must hold (alone or in a name: ``run-tests.sh``)."""

# Prefixes that wrap a command without changing what it checks (matched at a position, never
# by slicing the command, so a long run of them stays linear).
_WRAPPERS = re.compile(
    r"(?:sudo|time|nice|nohup|env|command|exec|uv run|poetry run|pipenv run|hatch run|rye run|pdm run)\s+"
    r"|timeout(?:\s+(?:-s|-k|--signal|--kill-after)\s+\S+|\s+-[-A-Za-z0-9=]+)*\s+[0-9.]+[smhd]?\s+"
    r"|[A-Za-z_][A-Za-z0-9_]*=\S*\s+"
)
_ONLY_ASKS = re.compile(r"\S+(?:\s+-m\s+\S+)?(?:\s+(?:--version|-V|--help|-h))+\s*")
"""A command that only asks a tool about itself (``pytest --version``): no check ran."""
_SPLIT = re.compile(r"&&|\|\||;|\||\n|\(|\)")
_PREFIX = re.compile(r"[A-Za-z0-9._/:@+=,\-]+(?: [A-Za-z0-9._/:@+=,\-]+)*")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is a ConfigError, not a line on stderr


@dataclass(frozen=True)
class CheckPattern:
    """One check pattern, compiled by RE2. ``on_path``: matched against the command with its
    program's path kept (a project's script), else with the path dropped (``.venv/bin/pytest``
    is ``pytest``)."""

    source: str
    regex: Any  # re2._Regexp
    on_path: bool = False


def pattern(source: str, where: str) -> CheckPattern:
    """A regular expression (RE2 syntax) from the defaults or the user's own file."""
    try:
        regex = re2.compile(source, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ConfigError(
            f"{where}: {source!r} is not a valid RE2 regular expression ({reason}; RE2 has no "
            "lookaround or backreferences)"
        ) from None
    if regex.match("") is not None:
        raise ConfigError(f"{where}: {source!r} matches every command; a check pattern must name the command")
    return CheckPattern(source, regex)


def project_prefix(source: str, where: str) -> CheckPattern:
    """A project file's check: a literal command prefix that looks like a check (see the module)."""
    text = source.removesuffix("\\b").strip()
    if _PREFIX.fullmatch(text) is None:
        raise ConfigError(
            f"{where}: {source!r} is refused: a project file's checks are command prefixes (words, "
            "no regex), e.g. 'just test'; put regexes in your own $MENTIS_HOME/hooks.toml"
        )
    words = text.split(" ")
    first = words[0]
    script = "/" in first
    if script and (first.startswith(("/", "~")) or ".." in first.split("/")):
        raise ConfigError(
            f"{where}: {source!r} is refused: a script must be a relative path inside the checkout"
        )
    if not script and first not in RUNNERS:
        raise ConfigError(
            f"{where}: {source!r} is refused: a project file's check must start with a build, test or "
            f"lint runner ({', '.join(sorted(RUNNERS))}) or a script of the checkout (./NAME)"
        )
    parts = {part for word in words for part in re.split(r"[^a-z0-9]+", word.lower())}
    if not parts & CHECK_WORDS:
        raise ConfigError(
            f"{where}: {source!r} is refused: a project file's check must say what it checks "
            f"(one of: {', '.join(sorted(CHECK_WORDS))})"
        )
    lead = ""
    if script and "/" in (inner := text.removeprefix("./")).split(" ")[0]:
        lead, text = r"(?:\./)?", inner  # scripts/x.sh or ./scripts/x.sh; ./x stays ./x, never x
    regex = re2.compile(lead + re2.escape(text) + r"(?:\s|$)", _RE2_OPTIONS)
    return CheckPattern(source, regex, on_path=script)


@dataclass(frozen=True)
class HookConfig:
    checks: tuple[CheckPattern, ...]
    url: str | None = None
    token_file: Path | None = None
    budget_tokens: int = 1500
    min_similarity: float = 0.38
    limit: int = 5
    output_tail_chars: int = 4000
    idle_s: int = DEFAULT_IDLE_S
    sources: tuple[str, ...] = field(default=())
    checkpoint_every: str | None = None
    """``day`` or ``commit``: the hooks start ``mentis checkpoint --git`` when one is due."""
    checkpoint_key: Path | None = None
    checkpoint_commit: bool = False
    follow_git: bool = False
    """``[branches] follow_git``: records made on a git branch other than the default go to the
    memory branch of that name (:func:`mentis.integrations.hooks.state.memory_branch`)."""

    @cached_property
    def _matchers(self) -> tuple[Any, Any]:
        """All patterns as two RE2 alternations: on the command without and with its path."""

        def union(on_path: bool) -> Any:
            sources = [f"(?:{p.regex.pattern})" for p in self.checks if p.on_path is on_path]
            return re2.compile("|".join(sources), _RE2_OPTIONS) if sources else None

        return union(False), union(True)

    def check_in(self, command: str) -> str | None:
        """The first simple command of a shell line that is a recognised check, else None."""
        plain_checks, path_checks = self._matchers
        for segment in _SPLIT.split(command):
            segment = segment.strip()
            if not segment:
                continue
            pos = 0
            while (m := _WRAPPERS.match(segment, pos)) is not None:
                pos = m.end()
            with_path = segment[pos:]
            if _ONLY_ASKS.fullmatch(with_path):
                continue
            first, _, rest = with_path.partition(" ")
            plain = (first.rsplit("/", 1)[-1] + " " + rest).strip()  # .venv/bin/pytest → pytest
            if (plain_checks is not None and plain_checks.match(plain) is not None) or (
                path_checks is not None and path_checks.match(with_path) is not None
            ):
                return segment
        return None


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix or delete it") from None


def _patterns(values: object, where: str, *, project: bool = False) -> list[CheckPattern]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where} must be a list of strings")
    return [project_prefix(v, where) if project else pattern(v, where) for v in values]


def default_checks() -> list[CheckPattern]:
    return [pattern(p, "the built-in checks") for p in DEFAULT_CHECKS]


def _number(table: dict[str, Any], key: str, default: float, where: str, *, lo: float, hi: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ConfigError(f"{where + '.' if where else ''}{key} must be a number from {lo:g} to {hi:g}")
    return float(value)


def _float(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def load(home: Path, checkout: Path | None) -> HookConfig:
    """The user's hooks.toml, the project's check patterns, then the environment."""
    user_path = home / "hooks.toml"
    user = _read(user_path)
    sources = [str(user_path)] if user else []
    checks_table = user.get("checks", {})
    if "patterns" in checks_table:
        checks = _patterns(checks_table["patterns"], f"{user_path} [checks] patterns")
    else:
        checks = default_checks()
    checks += _patterns(checks_table.get("extra", []), f"{user_path} [checks] extra")
    if checkout is not None:
        project_path = checkout / ".mentis" / "hooks.toml"
        project = _read(project_path)
        if project:
            sources.append(str(project_path))
            unknown = set(project) - {"checks"} or set(project.get("checks", {})) - {"extra"}
            if unknown:
                raise ConfigError(
                    f"{project_path}: a project file may only set [checks] extra (found {sorted(unknown)}); "
                    f"put other settings in {user_path}"
                )
            extra = project.get("checks", {}).get("extra", [])
            checks += _patterns(extra, f"{project_path} [checks] extra", project=True)
    server = user.get("server", {})
    url = os.environ.get("MENTIS_HOOK_URL") or server.get("url") or None
    token = os.environ.get("MENTIS_HOOK_TOKEN_FILE") or server.get("token_file") or None
    if url is not None and not re.match(r"^https?://", str(url)):
        raise ConfigError(f"the hook server url {url!r} must start with http:// or https://")
    ctx = user.get("context", {})
    rec = user.get("record", {})
    where = str(user_path)
    idle_s = _number(
        user.get("background", {}), "idle_s", DEFAULT_IDLE_S, f"{where} [background]", lo=1, hi=MAX_IDLE_S
    )
    if idle := os.environ.get("MENTIS_HOOK_IDLE_S"):
        idle_s = _number(
            {"MENTIS_HOOK_IDLE_S": _float(idle)}, "MENTIS_HOOK_IDLE_S", 0, "", lo=1, hi=MAX_IDLE_S
        )
    every, key, commit = _checkpoint(user.get("checkpoint", {}), f"{where} [checkpoint]")
    follow_git = _follow_git(user.get("branches", {}), f"{where} [branches]")
    return HookConfig(
        checks=tuple(checks),
        url=str(url).rstrip("/") if url else None,
        token_file=Path(str(token)).expanduser() if token else None,
        budget_tokens=int(_number(ctx, "budget_tokens", 1500, f"{where} [context]", lo=100, hi=20_000)),
        min_similarity=_number(ctx, "min_similarity", 0.38, f"{where} [context]", lo=-1, hi=1),
        limit=int(_number(ctx, "limit", 5, f"{where} [context]", lo=1, hi=20)),
        output_tail_chars=int(
            _number(rec, "output_tail_chars", 4000, f"{where} [record]", lo=200, hi=16_000)
        ),
        idle_s=int(idle_s),
        sources=tuple(sources),
        checkpoint_every=every,
        checkpoint_key=key,
        checkpoint_commit=commit,
        follow_git=follow_git,
    )


def _follow_git(table: object, where: str) -> bool:
    """``[branches] follow_git`` (false when absent), then ``MENTIS_HOOK_FOLLOW_GIT`` (1 or 0)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = set(table) - {"follow_git"}
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {sorted(unknown)}; it takes follow_git")
    follow = table.get("follow_git", False)
    if not isinstance(follow, bool):
        raise ConfigError(f"{where} follow_git must be true or false")
    env = os.environ.get("MENTIS_HOOK_FOLLOW_GIT")
    if env is not None:
        if env not in ("0", "1"):
            raise ConfigError(f"MENTIS_HOOK_FOLLOW_GIT must be 1 or 0, found {env!r}")
        follow = env == "1"
    return follow


def _checkpoint(table: object, where: str) -> tuple[str | None, Path | None, bool]:
    """``[checkpoint]``: its cadence, key and commit flag (all None/False when absent)."""
    if not isinstance(table, dict) or not table:
        if table:
            raise ConfigError(f"{where} must be a table")
        return None, None, False
    unknown = set(table) - {"every", "key", "commit"}
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {sorted(unknown)}; it takes every, key and commit")
    every = table.get("every")
    if every not in ("day", "commit"):
        raise ConfigError(f'{where} every must be "day" or "commit", found {every!r}')
    key = table.get("key")
    if not isinstance(key, str) or not key:
        raise ConfigError(f"{where} key must be the path of the operator key (from `mentis agent keygen`)")
    commit = table.get("commit", False)
    if not isinstance(commit, bool):
        raise ConfigError(f"{where} commit must be true or false")
    return every, Path(key).expanduser(), commit


def local_allowed() -> bool:
    """False with ``MENTIS_HOOK_LOCAL=0``: a hook without ``[server] url`` must not open the store
    on this machine, neither itself nor through a background server."""
    return os.environ.get("MENTIS_HOOK_LOCAL", "1") != "0"


def check_local_allowed() -> None:
    if not local_allowed():
        raise ConfigError(
            "no hook server configured ([server] url in hooks.toml or MENTIS_HOOK_URL) and "
            "MENTIS_HOOK_LOCAL=0 forbids opening the store for the hook"
        )
