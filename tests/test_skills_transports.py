"""The skill operations through MCP (over HTTP), REST and the CLI give the service's own answers.

Upload through the CLI reads a SKILL.md file (``mentis skills upload``); it is tested with
``skills import``/``export`` on the same file format (Agent Skills, agentskills.io/specification as
quoted from its 2025-11 text; Claude Code's ``.claude/skills/<name>/SKILL.md``,
code.claude.com/docs/en/skills "Extend Claude with skills", read 2026-12-02).
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from mentis.api.skills import UploadSkillInput
from mentis.cli import app
from mentis.service.memory import Caller

from .conftest import REPO
from .transports import AGENT, Call

OWNER = Caller(agent_id=AGENT)
SKILL = "---\nname: run-tests\ndescription: How to run the test suite\ntags: [ci]\n---\nRun `pytest -q`.\n"


def test_skill_operations_answer_through_each_transport_as_the_service_does(call: Call) -> None:
    memory = call.live.memory
    memory.upload_skill(OWNER, UploadSkillInput(repository=REPO, content=SKILL))
    memory.upload_skill(OWNER, UploadSkillInput(repository=REPO, content=SKILL + "Then `ruff check`.\n"))
    ref = {"repository": REPO, "skill_id": "run-tests"}
    for name, arguments in [
        ("read_skill", ref),
        ("read_skill", {**ref, "version": 1}),
        ("read_skill", {**ref, "version": 3}),
        ("read_skill", {**ref, "skill_id": "nope"}),
        ("search_skills", {"query": "run the test suite", "repository": REPO}),
        ("list_skills", {"repository": REPO}),
        ("skill_versions", ref),
    ]:
        assert call(name, arguments) == call.direct(name, arguments), (name, arguments)
    code, done = call("deprecate_skill", {**ref, "reason": "use make test"})
    assert code == "ok" and done["status"] == "deprecated"
    assert call.direct("read_skill", ref)[1]["skill"]["status"] == "deprecated"
    code, message = call("read_skill", {**ref, "version": 3})
    assert code == "not_found" and "version" in message


def test_the_cli_uploads_a_file_imports_a_folder_and_exports_it(tmp_path: Path) -> None:
    env = {"MENTIS_DB": str(tmp_path / "m.db"), "MENTIS_EMBEDDER": "hash", "MENTIS_AGENT_ID": "cli"}
    source = tmp_path / "skills" / "run-tests"
    source.mkdir(parents=True)
    (source / "SKILL.md").write_text(SKILL, encoding="utf-8")
    runner = CliRunner()
    done = runner.invoke(app, ["skills", "upload", "-r", REPO, str(source / "SKILL.md"), "--json"], env=env)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["version"] == 1
    imported = runner.invoke(app, ["skills", "import", str(tmp_path / "skills"), "-r", REPO], env=env)
    assert imported.exit_code == 0 and json.loads(imported.stdout)["uploaded"][0]["unchanged"] is True
    out = tmp_path / "project" / ".claude" / "skills"
    exported = runner.invoke(app, ["skills", "export", "--repository", REPO, "--to", str(out)], env=env)
    assert exported.exit_code == 0, exported.output
    assert (out / "run-tests" / "SKILL.md").read_text(encoding="utf-8") == SKILL
    bad = tmp_path / "bad.md"
    bad.write_text("---\nname: x\ndescription: [\n---\n", encoding="utf-8")
    refused = runner.invoke(app, ["skills", "upload", "-r", REPO, str(bad)], env=env)
    assert refused.exit_code == 2 and "YAML" in refused.stderr
    versions = runner.invoke(app, ["skills", "versions", "-r", REPO, "run-tests", "--json"], env=env)
    assert [v["version"] for v in json.loads(versions.stdout)["versions"]] == [1]
