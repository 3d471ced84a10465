"""The git side of memory branches on real repositories: the default branch, whether a branch
is merged, and which memory branch a checkout's hooks use (``[branches] follow_git``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mentis.errors import ConfigError, InvalidInput
from mentis.integrations import git as gitlib
from mentis.integrations.hooks import config as hook_config
from mentis.integrations.hooks.state import memory_branch

from .hook_helpers import git, make_repo


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, value in {
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Test",
        "GIT_AUTHOR_EMAIL": "test@example.com",
        "GIT_COMMITTER_NAME": "Test",
        "GIT_COMMITTER_EMAIL": "test@example.com",
    }.items():
        monkeypatch.setenv(name, value)
    return make_repo(tmp_path / "shop", branch="main")


def commit(repo: Path, name: str, text: str) -> None:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"edit {name}")


def test_the_default_branch_is_origin_head_then_init_default_branch_then_main_master_trunk(
    repo: Path, tmp_path: Path
) -> None:
    assert gitlib.default_branch(repo) == "main"
    git(repo, "branch", "-m", "main", "trunk")
    assert gitlib.default_branch(repo) == "trunk"
    git(repo, "branch", "-m", "trunk", "work")
    assert gitlib.default_branch(repo) is None  # nothing says which branch is the default
    git(repo, "config", "init.defaultBranch", "work")
    assert gitlib.default_branch(repo) == "work"
    # a clone knows its origin's HEAD, whatever the branch is called
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    git(clone, "checkout", "-q", "-b", "feature/x")
    git(clone, "config", "init.defaultBranch", "main")
    assert gitlib.default_branch(clone) == "work"


def test_is_ancestor_says_whether_git_has_merged_a_branch_and_refuses_what_git_cannot_resolve(
    repo: Path,
) -> None:
    git(repo, "checkout", "-q", "-b", "feature/x")
    commit(repo, "cart.py", "def total(items):\n    return round(sum(items), 2)\n")
    assert not gitlib.is_ancestor(repo, "feature/x", "main")
    assert gitlib.is_ancestor(repo, "main", "feature/x")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge feature/x", "feature/x")
    assert gitlib.is_ancestor(repo, "feature/x", "main")
    with pytest.raises(InvalidInput, match="merge-base"):
        gitlib.is_ancestor(repo, "no-such-branch", "main")
    with pytest.raises(InvalidInput, match="not a commit or branch name"):
        gitlib.is_ancestor(repo, "--help", "main")


def test_a_checkout_follows_git_only_when_asked_and_only_off_the_default_branch(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature/x")
    assert memory_branch(False, repo, "feature/x") is None
    assert memory_branch(True, repo, "feature/x") == "feature/x"
    assert memory_branch(True, repo, "main") is None
    assert memory_branch(True, repo, None) is None  # detached HEAD: the main line


def test_follow_git_is_read_from_the_users_hooks_toml_and_the_environment_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MENTIS_HOOK_FOLLOW_GIT", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    assert hook_config.load(home, None).follow_git is False
    (home / "hooks.toml").write_text("[branches]\nfollow_git = true\n")
    assert hook_config.load(home, None).follow_git is True
    monkeypatch.setenv("MENTIS_HOOK_FOLLOW_GIT", "0")
    assert hook_config.load(home, None).follow_git is False
    monkeypatch.setenv("MENTIS_HOOK_FOLLOW_GIT", "yes")
    with pytest.raises(ConfigError, match="MENTIS_HOOK_FOLLOW_GIT must be 1 or 0"):
        hook_config.load(home, None)
    monkeypatch.delenv("MENTIS_HOOK_FOLLOW_GIT")
    for text, message in [
        ('[branches]\nfollow_git = "yes"\n', "follow_git must be true or false"),
        ("[branches]\nfollow = true\n", r"unknown setting\(s\) \['follow'\]"),
        ("branches = 1\n", r"\[branches\] must be a table"),
    ]:
        (home / "hooks.toml").write_text(text)
        with pytest.raises(ConfigError, match=message):
            hook_config.load(home, None)


def test_a_project_file_may_not_turn_following_git_on(tmp_path: Path, repo: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (repo / ".mentis").mkdir()
    (repo / ".mentis" / "hooks.toml").write_text("[branches]\nfollow_git = true\n")
    with pytest.raises(ConfigError, match="a project file may only set"):
        hook_config.load(home, repo)
