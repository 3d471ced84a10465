"""Hook settings: which shell commands are checks, where the server is, the context budget.

Read from ``$MENTIS_HOME/hooks.toml`` (the user's file), then ``<checkout>/.mentis/hooks.toml``
(the project's). A project file may only add check patterns: a committed file must not be able
to point hooks (and a token) at another server. Environment variables override the user file::

    [checks]
    patterns = ['pytest\\b', 'go test\\b']   # replace the built-in list (regexes, matched at the
                                              # start of each simple command of the shell line)
    extra = ['just test\\b']                  # added to the built-in list (also in the project file)

    [server]                                  # talk to a running `mentis serve --http`
    url = "http://127.0.0.1:9471"             # or MENTIS_HOOK_URL
    token_file = "~/.local/share/mentis/admin.token"   # or MENTIS_HOOK_TOKEN_FILE

    [context]
    budget_tokens = 1500                      # additionalContext size (tokens ≈ characters / 4)
    min_similarity = 0.38                     # cosine of the best attempt; below it nothing is said
    limit = 5                                 # tasks at most

    [record]
    output_tail_chars = 4000                  # tail of the check's output kept (after scrubbing)
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

# Prefixes that wrap a command without changing what it checks.
_WRAPPERS = re.compile(
    r"^(?:(?:sudo|time|nice|env|command|exec|uv run|poetry run|pipenv run|hatch run|rye run|pdm run)\s+"
    r"|[A-Za-z_][A-Za-z0-9_]*=\S*\s+)"
)
_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\||\n|\(|\))\s*")


@dataclass(frozen=True)
class HookConfig:
    checks: tuple[re.Pattern[str], ...]
    url: str | None = None
    token_file: Path | None = None
    budget_tokens: int = 1500
    min_similarity: float = 0.38
    limit: int = 5
    output_tail_chars: int = 4000
    sources: tuple[str, ...] = field(default=())

    def check_in(self, command: str) -> str | None:
        """The first simple command of a shell line that is a recognised check, else None."""
        for segment in _SPLIT.split(command):
            plain = segment.strip()
            while (m := _WRAPPERS.match(plain)) is not None:
                plain = plain[m.end() :]
            first, _, rest = plain.partition(" ")
            plain = (first.rsplit("/", 1)[-1] + " " + rest).strip()  # .venv/bin/pytest → pytest
            if any(p.match(plain) for p in self.checks):
                return segment.strip()
        return None


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        return {}
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix or delete it") from None


def _patterns(values: object, where: str) -> list[re.Pattern[str]]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where} must be a list of regular expressions (strings)")
    out = []
    for v in values:
        try:
            out.append(re.compile(v))
        except re.error as exc:
            raise ConfigError(f"{where}: {v!r} is not a valid regular expression ({exc})") from None
    return out


def _number(table: dict[str, Any], key: str, default: float, where: str, *, lo: float, hi: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise ConfigError(f"{where}.{key} must be a number from {lo} to {hi}")
    return float(value)


def load(home: Path, checkout: Path | None) -> HookConfig:
    """The user's hooks.toml, the project's check patterns, then the environment."""
    user_path = home / "hooks.toml"
    user = _read(user_path)
    sources = [str(user_path)] if user else []
    checks_table = user.get("checks", {})
    if "patterns" in checks_table:
        checks = _patterns(checks_table["patterns"], f"{user_path} [checks] patterns")
    else:
        checks = [re.compile(p) for p in DEFAULT_CHECKS]
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
            checks += _patterns(project.get("checks", {}).get("extra", []), f"{project_path} [checks] extra")
    server = user.get("server", {})
    url = os.environ.get("MENTIS_HOOK_URL") or server.get("url") or None
    token = os.environ.get("MENTIS_HOOK_TOKEN_FILE") or server.get("token_file") or None
    if url is not None and not re.match(r"^https?://", str(url)):
        raise ConfigError(f"the hook server url {url!r} must start with http:// or https://")
    ctx = user.get("context", {})
    rec = user.get("record", {})
    where = str(user_path)
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
        sources=tuple(sources),
    )
