"""``mentis doctor``: check an installation, one finding a line, each ok / warn / fail with a fix.

Every check runs even when an earlier one failed, and a check that raises becomes a ``fail``
finding instead of a crash: a store that does not verify is reported, not raised. Nothing here
sends anything off this machine (an OpenAI-compatible provider is checked for its settings, not
called) and nothing is written, except that opening an existing store migrates an old schema, as
every command that opens it does.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import httpx
import orjson

from mentis.config import Settings
from mentis.errors import EmbeddingError, IntegrityError, MentisError
from mentis.service.federation import parse_memories
from mentis.store.protocol import Store

Status = Literal["ok", "warn", "fail"]
HTTP_ADDRESS = ("127.0.0.1", 9471)
EXPIRING_SOON = timedelta(days=7)
HOOK_ERRORS_SHOWN = 5
CHAINS_SHOWN = 20
MODEL_INSTALL = "mentis model install"
_EMBED_KEYS = ("MENTIS_EMBED_API_KEY", "OPENROUTER_API_KEY")


@dataclass(frozen=True)
class Finding:
    check: str
    status: Status
    detail: str
    fix: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class _Context:
    settings: Settings
    http: tuple[str, int]
    now: datetime
    store_exists: bool = False
    embed_model: str | None = None


Check = Callable[[_Context], Iterator[Finding]]


def run(
    settings: Settings, http: tuple[str, int] = HTTP_ADDRESS, now: datetime | None = None
) -> list[Finding]:
    """Run every check; a check that raises is reported as a ``fail`` finding."""
    ctx = _Context(settings, http, now or datetime.now(UTC))
    findings: list[Finding] = []
    for name, check in _CHECKS:
        try:
            findings.extend(check(ctx))
        except MentisError as exc:
            findings.append(Finding(name, "fail", str(exc), _fix_for(exc)))
        except Exception as exc:  # a doctor reports; it does not crash
            findings.append(Finding(name, "fail", f"{type(exc).__name__}: {exc}", "report this as a bug"))
    return findings


def _fix_for(exc: MentisError) -> str:
    if exc.code == "integrity":
        return (
            "the agent registry or the ledger as a whole does not verify, so the store refuses to open; "
            "run `mentis verify-integrity`; restore your last `mentis export` with `mentis import` "
            "into a new store"
        )
    if exc.code == "store":
        return "check the file's permissions and free disk space; another process may hold a long write"
    if exc.code == "embedding" and "not installed" in str(exc):
        return f"run `{MODEL_INSTALL}`"
    return ""


# ---------------------------------------------------------------- the store


def _store(ctx: _Context) -> Iterator[Finding]:
    s = ctx.settings
    if s.uses_postgres:
        from mentis.store.postgres.connection import redact

        ctx.store_exists = True
        yield Finding("store", "ok", f"PostgreSQL at {redact(s.database_url or '')}")
        return
    path = s.db_path
    if not path.exists():
        yield Finding(
            "store",
            "warn",
            f"no store yet at {path} (SQLite); it is created on first use",
            "run `mentis serve`, or set MENTIS_HOME / MENTIS_DB if your store lives elsewhere",
        )
        return
    ctx.store_exists = True
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    size = info.st_size + sum(p.stat().st_size for p in (Path(f"{path}-wal"),) if p.exists())
    detail = f"{path} (SQLite, {_bytes(size)}, mode {mode:04o})"
    if mode & 0o077:
        yield Finding("store", "warn", f"{detail}: readable by other users", f"chmod 600 {path}")
    else:
        yield Finding("store", "ok", detail)


def _schema(ctx: _Context) -> Iterator[Finding]:
    if not ctx.store_exists or ctx.settings.uses_postgres:
        return
    import sqlite3

    from mentis.store.sqlite.store import SCHEMA_VERSION

    uri = ctx.settings.db_path.resolve().as_uri() + "?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        try:
            rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            yield Finding("schema", "fail", f"not a Mentis store: {exc}", "point MENTIS_DB at your store")
            return
    ctx.embed_model = rows.get("embed_model")
    found = int(rows.get("schema_version", "0"))
    if found > SCHEMA_VERSION:
        yield Finding(
            "schema",
            "fail",
            f"schema version {found}, newer than this Mentis ({SCHEMA_VERSION})",
            "upgrade Mentis",
        )
    elif found < SCHEMA_VERSION:
        yield Finding("schema", "warn", f"schema version {found}; it is migrated to {SCHEMA_VERSION} on open")
    else:
        yield Finding("schema", "ok", f"schema version {found}")


def _ledger(ctx: _Context) -> Iterator[Finding]:
    if not ctx.store_exists:
        return
    started = time.perf_counter()
    with closing(_open_unverified(ctx)) as store:
        if ctx.settings.uses_postgres:
            ctx.embed_model = store.get_meta("embed_model")
        reports = store.verify_chains()
        damaged = dict(store.damaged)
    took = time.perf_counter() - started
    entries = sum(r.entries for r in reports)
    detail = f"{len(reports)} chain(s), {entries} entries verified in {took * 1000:.0f} ms"
    if not damaged:
        yield Finding("ledger", "ok", detail)
    else:
        named = ", ".join(f"{c} (seq {cause.seq})" for c, cause in sorted(damaged.items()))
        yield Finding("ledger", "fail", f"{detail}; {len(damaged)} chain(s) do not verify: {named}", RECOVER)
    for chain, cause in sorted(damaged.items()):
        yield Finding(
            f"chain {chain}",
            "fail",
            f"does not verify at seq {cause.seq}: {cause.what}; its repository is refused (reads and "
            "writes), every other repository is served",
            _damaged_fix(chain, cause),
        )
    for r in reports[:CHAINS_SHOWN]:
        yield Finding(f"chain {r.chain}", "ok", f"head seq {r.head_seq}, hash {r.head_hash[:16]}…")
    if len(reports) > CHAINS_SHOWN:
        yield Finding("ledger", "ok", f"… and {len(reports) - CHAINS_SHOWN} more chain(s), all verified")


RECOVER = (
    "the other repositories keep working in this store as they are. To go on without the damaged "
    "ones: `mentis export --skip-damaged healthy.jsonl`, then `mentis import healthy.jsonl` into a "
    "new store (a new MENTIS_HOME, or an empty MENTIS_DATABASE_URL database) and point Mentis at it"
)


def _damaged_fix(chain: str, cause: IntegrityError) -> str:
    """How to recover ``chain``, which failed verification with ``cause``."""
    restore = f"restore {chain} from a backup or an export made before seq {cause.seq}"
    if (cause.what or "").startswith("record id"):
        return (
            f"seq {cause.seq} reuses an id an earlier entry holds: Mentis before ids were checked on write "
            "let a write token do that (append_thought with a forgotten record's thought_id, or "
            f"signed_write with a chosen id); nothing else in the chain changed. {RECOVER}; the new "
            f"store checks every id on write. To keep {chain} too, {restore}"
        )
    return f"{RECOVER}; {restore}"


def _open_unverified(ctx: _Context) -> Store:
    """The store without the embedder, not yet verified (the check times ``verify`` itself)."""
    dim = int(_meta_dim(ctx) or 384)
    if ctx.settings.uses_postgres:
        from mentis.store.postgres.store import PostgresStore

        assert ctx.settings.database_url is not None
        return PostgresStore(ctx.settings.database_url, dim, verify=False)
    from mentis.store.sqlite.store import SqliteStore

    return SqliteStore(ctx.settings.db_path, dim, verify=False)


def _meta_dim(ctx: _Context) -> str | None:
    if ctx.settings.uses_postgres or not ctx.store_exists:
        return None
    import sqlite3

    uri = ctx.settings.db_path.resolve().as_uri() + "?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key='embed_dim'").fetchone()
    return None if row is None else str(row[0])


# ---------------------------------------------------------------- providers


def _model(ctx: _Context) -> Iterator[Finding]:
    provider = ctx.settings.embedder
    if provider == "hash":
        yield Finding(
            "model",
            "warn",
            "MENTIS_EMBEDDER=hash: a test embedder with no notion of meaning",
            "unset MENTIS_EMBEDDER",
        )
        model_id = "mentis-hash-384"
    elif provider == "openai":
        from mentis.providers.embed.openai import OpenAIEmbedder

        # from_env refuses a missing key for a non-loopback endpoint (a ConfigError: a fail finding)
        with closing(OpenAIEmbedder.from_env(ctx.settings.providers)) as embedder:
            model_id = embedder.model_id
            key = "API key set" if any(os.environ.get(n, "").strip() for n in _EMBED_KEYS) else "no API key"
            yield Finding(
                "model",
                "ok",
                f"{embedder.model} at {embedder.base_url}, {embedder.dim} dims, {key} (not called)",
            )
    else:
        from mentis.providers.embed.local import MODEL_ID, MODEL_PACKAGE, LocalEmbedder, model_dir

        model_id = MODEL_ID
        try:
            model_dir()
        except EmbeddingError as exc:
            yield Finding("model", "fail", str(exc).split("; run:")[0], f"run `{MODEL_INSTALL}`")
            return
        version = importlib.metadata.version(MODEL_PACKAGE.name)
        started = time.perf_counter()
        local = LocalEmbedder.load()
        loaded = time.perf_counter() - started
        started = time.perf_counter()
        vector = local.embed(["mentis doctor: one timed embedding"])
        took = time.perf_counter() - started
        yield Finding(
            "model",
            "ok",
            f"{MODEL_ID} ({MODEL_PACKAGE.name} {version}) loads in {loaded:.2f} s, "
            f"{vector.shape[1]} dims, one embed {took * 1000:.0f} ms",
        )
    if ctx.embed_model is not None and ctx.embed_model != model_id:
        yield Finding(
            "model",
            "fail",
            f"the store was embedded with {ctx.embed_model!r}, the configured embedder is {model_id!r}",
            "set MENTIS_EMBEDDER to match the store, or run `mentis reindex`",
        )


def _providers(ctx: _Context) -> Iterator[Finding]:
    from mentis.providers.rerank import load_reranker

    sent = []
    if ctx.settings.embedder == "openai":
        sent.append("embeddings")
    reranker = load_reranker(ctx.settings)
    if reranker is not None:
        with closing(reranker):
            sent.append(f"LLM rerank ({reranker.model} at {reranker.base_url})")
    if not sent:
        yield Finding("providers", "ok", "none configured: no text leaves this machine")
    else:
        yield Finding(
            "providers", "ok", f"{', '.join(sent)}; every text sent passes the secret scrubber first"
        )


def _federation(ctx: _Context) -> Iterator[Finding]:
    """The memories ``MENTIS_FEDERATION`` names, parsed as a federated search would (not reached)."""
    memories = parse_memories(ctx.settings.federation)
    if not memories:
        yield Finding("federation", "ok", "no other memory configured (MENTIS_FEDERATION)")
        return
    kinds = ", ".join(f"{m.name} ({'remote Mentis' if m.remote else 'PostgreSQL'})" for m in memories)
    yield Finding("federation", "ok", f"federated search reads local and {kinds}")


# ---------------------------------------------------------------- serving and operations


def _http(ctx: _Context) -> Iterator[Finding]:
    host, port = ctx.http
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        socket.create_connection((host, port), timeout=1.0).close()
        busy = True
    except OSError:
        busy = False
    if not busy:
        yield Finding("http", "ok", f"{address} is free for `mentis serve --http`")
        return
    try:
        reply = httpx.get(f"http://{address}/health", timeout=2.0).json()
    except (httpx.HTTPError, ValueError):
        reply = None
    if isinstance(reply, dict) and reply.get("status") == "ok" and "version" in reply:
        yield Finding("http", "ok", f"a Mentis server (version {reply['version']}) is serving on {address}")
    else:
        yield Finding(
            "http",
            "warn",
            f"{address} is in use by another program",
            "serve on another port, e.g. mentis serve --http 127.0.0.1:9472",
        )


def _tokens(ctx: _Context) -> Iterator[Finding]:
    if not ctx.store_exists or ctx.settings.uses_postgres:
        return
    from mentis.service.tokens import TokenStore

    with closing(TokenStore(ctx.settings.db_path)) as tokens:
        listed = tokens.list()
    active = [t for t in listed if t.status(ctx.now) == "active"]
    soon = [
        t
        for t in active
        if t.expires_at is not None and datetime.fromisoformat(t.expires_at) - ctx.now <= EXPIRING_SOON
    ]
    detail = f"{len(active)} active token(s) of {len(listed)}"
    if not listed:
        yield Finding("tokens", "ok", "none yet; `mentis serve --http` creates an admin token on first start")
    elif soon:
        names = ", ".join(f"{t.id} ({t.agent}, expires {t.expires_at})" for t in soon)
        yield Finding(
            "tokens",
            "warn",
            f"{detail}; expiring within {EXPIRING_SOON.days} days: {names}",
            "create replacements: mentis token create --repo PATTERN --scope SCOPE --expires 30d",
        )
    else:
        yield Finding("tokens", "ok", detail)


def _hook_errors(ctx: _Context) -> Iterator[Finding]:
    path = ctx.settings.hook_error_log
    if not path.exists():
        yield Finding("hook errors", "ok", f"none recorded ({path})")
        return
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    if not lines:
        yield Finding("hook errors", "ok", f"none recorded ({path})")
        return
    yield Finding(
        "hook errors",
        "warn",
        f"{len(lines)} recorded in {path}; the last {min(len(lines), HOOK_ERRORS_SHOWN)}:",
        f"fix the hook named below, then clear the log: rm {path}",
    )
    for raw in lines[-HOOK_ERRORS_SHOWN:]:
        try:
            item = orjson.loads(raw)
            text = f"{item['at']} {item['harness']} {item['event']}: {item['error']}"
        except (orjson.JSONDecodeError, KeyError, TypeError):
            text = f"unreadable line: {raw[:200].decode('utf-8', 'replace')}"
        yield Finding("hook error", "warn", " ".join(text.split()))


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"


_CHECKS: tuple[tuple[str, Check], ...] = (
    ("store", _store),
    ("schema", _schema),
    ("ledger", _ledger),
    ("model", _model),
    ("providers", _providers),
    ("federation", _federation),
    ("http", _http),
    ("tokens", _tokens),
    ("hook errors", _hook_errors),
)
