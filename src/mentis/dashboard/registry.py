"""The dashboard's agent registry and skill pages: list agents, register one, add a public key,
revoke a key with a reason, disable an agent; list skills, review a skill's versions (diffs, who
signed each and whether the signature verifies), deprecate and revoke it.

Every form calls the service with the session's caller: the service decides who may (admin for
the registry, write scope over the repository for a skill's status) and validates the input, so a
refused or invalid form shows the service's message and writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from mentis.api.agents import (
    AddAgentKeyInput,
    DisableAgentInput,
    ListAgentsInput,
    RegisterAgentInput,
    RevokeAgentKeyInput,
    ShowAgentInput,
)
from mentis.api.common import parse
from mentis.api.skills import ListSkillsInput, RevokeSkillInput, SkillStatusInput, SkillVersionsInput
from mentis.dashboard.core import Ctx, State, form_text, param, redirect, render, required_param
from mentis.errors import InvalidInput

Form = Mapping[str, str]
SKILL_STATUSES = ("active", "deprecated", "revoked")
SIGNATURE_NOTES = {
    "verified": "signature verifies",
    "unsigned": "unsigned",
    "invalid": "signature does not verify",
    "unknown_key": "signed by a key the registry does not hold for this agent",
}


def _list(form: Form, name: str) -> list[str]:
    return [p.strip() for p in form_text(form, name).replace(",", "\n").split("\n") if p.strip()]


class RegistryPages:
    """The agents and skills pages and their forms."""

    def __init__(self, state: State) -> None:
        self.state = state

    # ------------------------------------------------------------ agents

    def agents(self, request: Request, ctx: Ctx, form: Form) -> Response:
        found = self.state.memory.list_agents(ctx.caller, ListAgentsInput())
        return render(self.state, ctx, "agents.html", nav="agents", agents=found.agents)

    def agent(self, request: Request, ctx: Ctx, form: Form) -> Response:
        agent_id = required_param(request, "id")
        agent = self.state.memory.show_agent(ctx.caller, parse(ShowAgentInput, {"agent_id": agent_id}))
        return render(self.state, ctx, "agent.html", nav="agents", a=agent)

    def _agent_url(self, ctx: Ctx, agent_id: str) -> str:
        return f"{ctx.base}/agent?{urlencode({'id': agent_id})}"

    def register_agent(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data: dict[str, Any] = {
            "agent_id": form_text(form, "agent_id"),
            "display_name": form_text(form, "display_name"),
            "description": form_text(form, "description"),
            "aliases": _list(form, "aliases"),
        }
        made = self.state.memory.register_agent(ctx.caller, parse(RegisterAgentInput, data))
        return redirect(self._agent_url(ctx, made.agent.agent_id))

    def add_key(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data = {"agent_id": form_text(form, "agent_id"), "public_key": form_text(form, "public_key")}
        made = self.state.memory.add_agent_key(ctx.caller, parse(AddAgentKeyInput, data))
        return redirect(self._agent_url(ctx, made.agent.agent_id))

    def revoke_key(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data = {
            "agent_id": form_text(form, "agent_id"),
            "key_id": form_text(form, "key_id"),
            "reason": form_text(form, "reason"),
        }
        made = self.state.memory.revoke_agent_key(ctx.caller, parse(RevokeAgentKeyInput, data))
        return redirect(self._agent_url(ctx, made.agent.agent_id))

    def disable_agent(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data = {"agent_id": form_text(form, "agent_id"), "reason": form_text(form, "reason")}
        req = parse(DisableAgentInput, data)
        if form.get("confirm") != "yes":
            raise InvalidInput("confirm: tick the confirmation box to disable the agent", "confirm")
        made = self.state.memory.disable_agent(ctx.caller, req)
        return redirect(self._agent_url(ctx, made.agent.agent_id))

    # ------------------------------------------------------------ skills

    def skills(self, request: Request, ctx: Ctx, form: Form) -> Response:
        repository, status = param(request, "repository"), param(request, "status")
        if status is not None and status not in SKILL_STATUSES:
            raise InvalidInput(f"the status parameter must be one of {', '.join(SKILL_STATUSES)}", "status")
        data: dict[str, Any] = {"statuses": [status] if status else list(SKILL_STATUSES)}
        if repository is not None:
            data["repository"] = repository
        found = self.state.memory.list_skills(ctx.caller, parse(ListSkillsInput, data))
        repos = [r.repository for r in self.state.memory.repository_overview(ctx.caller)]
        return render(
            self.state,
            ctx,
            "skills.html",
            nav="skills",
            skills=found.skills,
            repository=repository,
            status=status,
            statuses=SKILL_STATUSES,
            repos=repos,
        )

    def skill(self, request: Request, ctx: Ctx, form: Form) -> Response:
        ref = {
            "repository": required_param(request, "repository"),
            "skill_id": required_param(request, "skill_id"),
        }
        review = self.state.memory.review_skill(ctx.caller, parse(SkillVersionsInput, ref))
        return render(self.state, ctx, "skill.html", nav="skills", r=review, notes=SIGNATURE_NOTES)

    def _skill_url(self, ctx: Ctx, repository: str, skill_id: str) -> str:
        return f"{ctx.base}/skill?{urlencode({'repository': repository, 'skill_id': skill_id})}"

    def deprecate_skill(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data: dict[str, Any] = {
            "repository": form_text(form, "repository"),
            "skill_id": form_text(form, "skill_id"),
        }
        if reason := form_text(form, "reason"):
            data["reason"] = reason
        done = self.state.memory.deprecate_skill(ctx.caller, parse(SkillStatusInput, data))
        return redirect(self._skill_url(ctx, done.repository, done.skill_id))

    def revoke_skill(self, request: Request, ctx: Ctx, form: Form) -> Response:
        data = {
            "repository": form_text(form, "repository"),
            "skill_id": form_text(form, "skill_id"),
            "reason": form_text(form, "reason"),
        }
        req = parse(RevokeSkillInput, data)
        if form.get("confirm") != "yes":
            raise InvalidInput("confirm: tick the confirmation box to revoke the skill", "confirm")
        done = self.state.memory.revoke_skill(ctx.caller, req)
        return redirect(self._skill_url(ctx, done.repository, done.skill_id))


__all__ = ["SIGNATURE_NOTES", "RegistryPages"]
