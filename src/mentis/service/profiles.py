"""Tool profiles: which operations an MCP server offers (``mentis serve --tools PROFILE[,PROFILE…]``,
``MENTIS_TOOLS``, ``mentis install --tools``).

Every tool definition a server lists costs the agent context on every turn, so a server offers a
profile, not the whole registry. The groups cover every operation exactly once; ``default`` is what
an agent needs day to day (the attempt tools plus writing and searching thoughts and finding and
reading skills: docs/tools.md gives its size in tokens); ``all`` is every operation. Admin
operations (:attr:`Operation.admin`) are in no default: on stdio they need the ``agents`` (or
``all``) profile, and over HTTP only an admin token sees them (:meth:`Profile.for_caller`). A tool
outside the profile is not listed, and a call to it is an unknown tool. CLI, REST and the dashboard
reach every operation whatever the profile.

The two phases of remote signing (``prepare_write``, ``signed_write``) are the ``signing`` group,
in no default: a model never calls them (on stdio the server signs with ``MENTIS_SIGNING_KEY``
itself; a signing proxy calls them for its harness), and listed they would cost every HTTP client
about 490 tokens a turn. An HTTP server that signing proxies write through is started with it
(``--tools default,signing``); a proxy with a key refuses at start, saying so, when the server
does not offer them. They run only the profile's own tools.
"""

from __future__ import annotations

from dataclasses import dataclass

from mentis.errors import ConfigError
from mentis.service.operations import BY_NAME, OPERATIONS

ENV = "MENTIS_TOOLS"

GROUPS: dict[str, tuple[str, ...]] = {
    "core": ("search", "recall", "record_attempt", "mark_conclusion_outdated", "forget_attempt"),
    "thoughts": (
        *("append_thought", "search_thoughts", "get_thought", "traverse_thoughts", "context_bundle"),
        *("recent_context", "export_memory_md", "import_memory_md", "forget_thought"),
    ),
    "skills": (
        *("search_skills", "read_skill", "list_skills", "skill_versions", "upload_skill"),
        *("deprecate_skill", "revoke_skill", "delete_skill"),
    ),
    "integrity": ("verify_integrity", "stats"),
    "agents": (
        *("list_agents", "show_agent", "register_agent", "add_agent_key", "revoke_agent_key"),
        "disable_agent",
    ),
    "signing": ("prepare_write", "signed_write"),
    "federation": ("federated_search",),
    "retrospectives": ("append_retrospective",),
    "review": ("list_proposals", "show_proposal", "accept_proposal", "reject_proposal"),
    "webhooks": (
        "create_webhook",
        "list_webhooks",
        "delete_webhook",
        "webhook_deliveries",
        "redeliver_webhook",
    ),
    "scopes": ("publish",),
    "branches": ("branch_from", "list_branches", "merge_branch"),
    "entities": ("list_entity_types", "upsert_entity_type"),
}
"""Every operation in exactly one group (tests/test_profiles.py holds it to that)."""

DEFAULT: tuple[str, ...] = GROUPS["core"]
"""What an agent needs day to day, and no more: the attempt loop (search → recall → record →
correct, and forget). Its tools/list is about 2,100 tokens; the cheapest additions, the skill
tools' search and read, would cost 800 more and the thought tools' append and search 1,800, so
they are a profile away (``--tools default,skills``). docs/tools.md has the measured figures."""

PROFILES: dict[str, tuple[str, ...]] = {
    "default": DEFAULT,
    **GROUPS,
    "all": tuple(op.name for op in OPERATIONS),
}


@dataclass(frozen=True)
class Profile:
    """The operations a server offers, in the registry's order."""

    spec: str
    names: tuple[str, ...]

    def offers(self, name: str) -> bool:
        return name in self.names

    def for_caller(self, *, admin: bool) -> Profile:
        """What one caller is offered: without the admin operations unless the caller is an admin."""
        if admin:
            return self
        return Profile(self.spec, tuple(n for n in self.names if not BY_NAME[n].admin))


def profile_of(names: set[str] | frozenset[str], spec: str) -> Profile:
    return Profile(spec, tuple(op.name for op in OPERATIONS if op.name in names))


def parse_profile(text: str | None) -> Profile:
    """``PROFILE[,PROFILE…]`` (None or blank: ``default``) → the union of those profiles; an
    unknown name is a ConfigError naming the known ones."""
    words = [w.strip() for w in (text or "").split(",") if w.strip()] or ["default"]
    unknown = [w for w in words if w not in PROFILES]
    if unknown:
        raise ConfigError(
            f"unknown tool profile {', '.join(map(repr, unknown))} (--tools or {ENV}); "
            f"choose from {', '.join(PROFILES)}, comma-separated, e.g. --tools core,skills"
        )
    return profile_of({n for w in words for n in PROFILES[w]}, ",".join(dict.fromkeys(words)))
