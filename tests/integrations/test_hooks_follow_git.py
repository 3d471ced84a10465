"""Memory that follows git, end to end: with ``[branches] follow_git`` the real `mentis hook`
records a check made on a git branch on the memory branch of that name (made on first use), the
prompt hook reads through it, main does not see it, and `mentis branch merge --if-git-merged`
merges it only once git has merged the branch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mentis.api.attempts import SearchInput
from mentis.config import Settings
from mentis.providers.embed import HashEmbedder
from mentis.service.memory import Caller, Memory

from .hook_helpers import env_for, errors, git, hook, make_repo, mentis
from .test_hooks_claude_code import failed_bash, prompt

REPO = "github.com/acme/shop"
FAILURE = "cart total rounding half even off by a cent"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "shop", branch="main", remote="https://github.com/acme/shop.git")
    git(repo, "checkout", "-q", "-b", "fix/rounding")
    return repo


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hooks.toml").write_text("[context]\nmin_similarity = 0.2\n[branches]\nfollow_git = true\n")
    return home


def search(home: Path, branch: str | None) -> list[str]:
    """The task ids a search for the failure finds, read on the main line or through ``branch``."""
    memory = Memory.open(Settings(home=home, db_path=home / "mentis.db", embedder="hash"), HashEmbedder())
    try:
        req = SearchInput(query="cart total rounding half even", repository=REPO, branch=branch)
        return [t.task_id for t in memory.search(Caller(agent_id="reader"), req).tasks]
    finally:
        memory.close()


def test_a_check_on_a_git_branch_lands_on_its_memory_branch_and_merges_once_git_has_merged(
    repo: Path, home: Path
) -> None:
    env = env_for(home)
    done = mentis(env, "context", "--json", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["memory_branch"] == "fix/rounding"

    hook(env, "claude-code", "post-tool-use", failed_bash(repo, "pytest -q", 1, FAILURE), repo)
    assert errors(home) == []
    listed = json.loads(mentis(env, "branch", "list", "-r", REPO, "--json", cwd=repo).stdout)
    assert [(b["branch"], b["parent"]) for b in listed["branches"]] == [("fix/rounding", REPO)]
    assert search(home, "fix/rounding") == ["fix/rounding"]
    assert search(home, None) == []  # the main line does not see the branch's record

    # the prompt hook on the branch reads through it; on main it does not
    said = hook(env, "claude-code", "user-prompt-submit", prompt(repo, "cart total rounding half even"), repo)
    assert "off by a cent" in said.stdout
    git(repo, "checkout", "-q", "main")
    done = mentis(env, "context", "--json", cwd=repo)
    assert json.loads(done.stdout)["memory_branch"] is None
    said = hook(env, "claude-code", "user-prompt-submit", prompt(repo, "cart total rounding half even"), repo)
    assert "off by a cent" not in said.stdout

    # the branch's fix is committed, and git has not merged it: nothing is merged, nothing written
    git(repo, "checkout", "-q", "fix/rounding")
    (repo / "cart.py").write_text("def total(items):\n    return round(sum(items), 2)\n")
    git(repo, "commit", "-q", "-am", "round half even")
    git(repo, "checkout", "-q", "main")
    merge = ["branch", "merge", "fix/rounding", "-r", REPO, "--if-git-merged", "--json"]
    done = mentis(env, *merge, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"merged": False, "branch": "fix/rounding", "git_target": "main"}
    assert search(home, None) == []

    git(repo, "merge", "-q", "--no-ff", "-m", "merge fix/rounding", "fix/rounding")
    done = mentis(env, *merge, cwd=repo)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["branch"], report["into"], report["conflicts"]) == ("fix/rounding", REPO, [])
    assert search(home, None) == ["fix/rounding"]  # read as part of main now, nothing copied
    assert errors(home) == []


def test_without_follow_git_a_branch_check_stays_on_the_main_line(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "plain-home"
    home.mkdir()
    env = env_for(home)
    hook(env, "claude-code", "post-tool-use", failed_bash(repo, "pytest -q", 1, FAILURE), repo)
    assert json.loads(mentis(env, "branch", "list", "-r", REPO, "--json", cwd=repo).stdout)["branches"] == []
    assert search(home, None) == ["fix/rounding"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fix..x", "--if-git-merged"], "branch"),  # a bad name is refused before git is asked
        (["no-such-branch", "--if-git-merged"], "merge-base"),  # git cannot resolve it
        (["fix/rounding", "--if-git-merged", "--into", "no-such"], "merge-base"),
    ],
)
def test_merge_if_git_merged_refuses_what_git_cannot_answer_and_writes_nothing(
    repo: Path, home: Path, args: list[str], message: str
) -> None:
    env = env_for(home)
    done = mentis(env, "branch", "merge", *args, "-r", REPO, cwd=repo)
    assert done.returncode != 0
    assert message in done.stderr
    assert not (home / "mentis.db").exists()
