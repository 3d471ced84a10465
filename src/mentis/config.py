"""Settings read from the environment, in one place.

- ``MENTIS_HOME``: directory of the store (default: the user data dir, e.g. ~/.local/share/mentis)
- ``MENTIS_DB``: path of the SQLite file (default ``$MENTIS_HOME/mentis.db``)
- ``MENTIS_DATABASE_URL``: ``postgresql://…`` to use a PostgreSQL store instead
  (``pip install 'mentis[postgres]'``)
- ``MENTIS_EMBEDDER``: ``local`` (default, all-MiniLM-L6-v2 offline), ``openai`` (an OpenAI-compatible
  endpoint, see ``mentis.providers.embed.openai``) or ``hash`` (tests only)
- ``MENTIS_RERANKER``: ``off`` (default) or ``openai`` (LLM usefulness rerank, see
  ``mentis.providers.rerank``)
- ``MENTIS_AGENT_ID``: the agent identity for writes over stdio and from the CLI
- ``MENTIS_SESSION_ID``: the session of those calls (a ``session``-private write's default session)
- ``MENTIS_SIGNING_KEY``: an Ed25519 private key (PEM) registered in the agent registry; the
  process signs its agent's writes with it (``mentis.service.local_signing``)
- ``MENTIS_FEDERATION`` and ``MENTIS_FEDERATION_*``: the other memories a federated search reads
  (kept as given in :attr:`Settings.federation`; ``mentis.service.federation`` parses them when a
  federated search first runs)
- ``MENTIS_CHECKPOINTS``: a directory of signed checkpoints (every ``*.json`` under it); opening
  the store refuses one that does not hold them (``mentis.service.checkpoints``)
- ``MENTIS_WEBHOOK_*``: where webhooks may point beyond public addresses and loopback, and how
  they are retried and kept (docs/webhooks.md, ``mentis.service.webhook_rules``)
- the providers' ``MENTIS_EMBED_*``, ``MENTIS_RERANK_*`` and ``OPENROUTER_API_KEY`` (kept as given in
  :attr:`Settings.providers`; each provider checks its own when it is built, see
  ``mentis.providers.embed.openai`` and ``mentis.providers.rerank``)
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import platformdirs

PROVIDER_VARIABLES = ("MENTIS_EMBED_", "MENTIS_RERANK_", "OPENROUTER_API_KEY")
"""Prefixes of the variables kept for the providers in :attr:`Settings.providers`."""
FEDERATION_VARIABLE = "MENTIS_FEDERATION"
"""Prefix of the variables kept for federated search in :attr:`Settings.federation`."""


@dataclass(frozen=True)
class Settings:
    home: Path
    db_path: Path
    embedder: str = "local"
    agent_id: str | None = None
    session_id: str | None = None
    """``MENTIS_SESSION_ID``: the session of this process's calls (session-private records)."""
    database_url: str | None = None
    reranker: str = "off"
    signing_key: Path | None = None
    checkpoints: Path | None = None
    providers: Mapping[str, str] = field(default_factory=dict, hash=False)
    federation: Mapping[str, str] = field(default_factory=dict, hash=False)
    webhooks: Mapping[str, str] = field(default_factory=dict, hash=False)
    """The ``MENTIS_WEBHOOK_*`` variables as given (``mentis.service.webhook_rules`` reads them)."""

    @property
    def hook_error_log(self) -> Path:
        """JSON lines ``{"at", "harness", "event", "error"}`` that failed harness hooks append."""
        return self.home / "logs" / "hook-errors.jsonl"

    @property
    def uses_postgres(self) -> bool:
        return (self.database_url or "").startswith(("postgresql://", "postgres://"))

    def store_location(self) -> str:
        """Where the store is: the PostgreSQL URL without its password, or the SQLite file's
        absolute path."""
        if self.uses_postgres:
            assert self.database_url is not None
            url = urlsplit(self.database_url)
            user = f"{url.username}@" if url.username else ""
            port = f":{url.port}" if url.port else ""
            query = "&".join(p for p in url.query.split("&") if not p.startswith("password="))
            return urlunsplit((url.scheme, f"{user}{url.hostname or ''}{port}", url.path, query, ""))
        return f"sqlite:{self.db_path.resolve()}"

    def store_identity(self) -> str:
        """:meth:`store_location`, and for a SQLite file the device and inode it has now, so a
        file that was deleted or replaced since is another store."""
        location = self.store_location()
        if self.uses_postgres:
            return location
        try:
            st = os.stat(self.db_path)
        except OSError:
            return f"{location} (absent)"
        return f"{location} ({st.st_dev}:{st.st_ino})"

    @classmethod
    def from_env(cls, db: str | Path | None = None) -> Settings:
        home = Path(os.environ.get("MENTIS_HOME") or platformdirs.user_data_dir("mentis"))
        db_path = Path(db or os.environ.get("MENTIS_DB") or home / "mentis.db")
        return cls(
            home=home,
            db_path=db_path,
            embedder=os.environ.get("MENTIS_EMBEDDER", "local"),
            agent_id=os.environ.get("MENTIS_AGENT_ID") or None,
            session_id=os.environ.get("MENTIS_SESSION_ID") or None,
            database_url=None if db else os.environ.get("MENTIS_DATABASE_URL") or None,
            reranker=os.environ.get("MENTIS_RERANKER", "").strip().lower() or "off",
            signing_key=Path(key).expanduser() if (key := os.environ.get("MENTIS_SIGNING_KEY")) else None,
            checkpoints=Path(cp).expanduser() if (cp := os.environ.get("MENTIS_CHECKPOINTS")) else None,
            providers={k: v for k, v in os.environ.items() if k.startswith(PROVIDER_VARIABLES)},
            federation={k: v for k, v in os.environ.items() if k.startswith(FEDERATION_VARIABLE)},
            webhooks={k: v for k, v in os.environ.items() if k.startswith("MENTIS_WEBHOOK_")},
        )


def default_cli_agent() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"cli:{user}"
