"""`mentis context` and `mentis stale` on real git repositories made in a temp dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mentis.api.attempts import RecordAttemptInput, SearchInput
from mentis.api.common import parse
from mentis.integrations.git import normalise_remote, tree_hashes

from .hook_helpers import env_for, git, hash_object, make_repo, mentis


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "shop", remote="git@github.com:acme/shop.git")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return env_for(tmp_path / "home")


def context(env: dict[str, str], cwd: Path, *paths: str) -> dict[str, object]:
    done = mentis(env, "context", *paths, "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    data: dict[str, object] = json.loads(done.stdout)
    return data


def test_context_gives_head_branch_dirty_and_the_blob_ids_git_hash_object_prints(
    repo: Path, env: dict[str, str]
) -> None:
    (repo / "cart.py").write_text("def total(items):\n    return round(sum(items), 2)\n")
    (repo / "new_test.py").write_text("def test_total(): pass\n")
    (repo / "README.md").unlink()
    data = context(env, repo)
    assert data == {
        "toplevel": str(repo),
        "repository": "github.com/acme/shop",
        "memory_branch": None,  # [branches] follow_git is off by default
        "commit": git(repo, "rev-parse", "HEAD"),
        "branch": "fix/cart-rounding",
        "dirty": True,
        "changed_files": ["README.md", "cart.py", "new_test.py"],
        "deleted_files": ["README.md"],
        "file_hashes": hash_object(repo, "cart.py", "new_test.py"),
        "code_context": {
            "commit": git(repo, "rev-parse", "HEAD"),
            "branch": "fix/cart-rounding",
            "dirty": True,
            "file_hashes": hash_object(repo, "cart.py", "new_test.py"),
        },
    }
    # exactly what record_attempt takes as code_context, and search as current_file_hashes
    parse(
        RecordAttemptInput,
        {
            "repository": "r",
            "task_id": "t",
            "action": "a",
            "observation": "o",
            "code_context": data["code_context"],
        },
    )
    parse(
        SearchInput,
        {"query": "q", "current_commit": data["commit"], "current_file_hashes": data["file_hashes"]},
    )


def test_context_of_named_files_from_a_subdirectory_uses_checkout_relative_paths(
    repo: Path, env: dict[str, str]
) -> None:
    (repo / "src").mkdir()
    (repo / "src" / "tax.py").write_text("RATE = 0.2\n")
    git(repo, "add", "src/tax.py")
    git(repo, "commit", "-q", "-m", "tax")
    data = context(env, repo / "src", "tax.py", "../cart.py")
    assert data["file_hashes"] == hash_object(repo, "src/tax.py", "cart.py")
    assert data["dirty"] is False and data["changed_files"] == []


def test_a_clean_checkout_is_not_dirty_and_has_no_changed_files(repo: Path, env: dict[str, str]) -> None:
    data = context(env, repo)
    assert (data["dirty"], data["changed_files"], data["file_hashes"]) == (False, [], {})


def test_detached_head_has_no_branch_and_a_fresh_repository_no_commit(
    tmp_path: Path, env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "a")
    git(repo, "checkout", "-q", "--detach")
    assert context(env, repo)["branch"] is None
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q", "-b", "main")
    (fresh / "x.txt").write_text("x\n")
    data = context(env, fresh)
    assert (data["commit"], data["branch"], data["repository"]) == (None, "main", "fresh")
    assert data["file_hashes"] == hash_object(fresh, "x.txt")


def test_renamed_files_list_both_paths_and_hash_the_new_one(repo: Path, env: dict[str, str]) -> None:
    git(repo, "mv", "cart.py", "basket.py")
    data = context(env, repo)
    assert data["changed_files"] == ["basket.py", "cart.py"]
    assert data["deleted_files"] == ["cart.py"]
    assert data["file_hashes"] == hash_object(repo, "basket.py")


def test_context_outside_a_checkout_is_a_clear_error(tmp_path: Path, env: dict[str, str]) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    done = mentis(env, "context", cwd=outside)
    assert done.returncode == 2
    assert "not inside a git checkout" in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    ("path", "message"), [("missing.py", "does not exist"), ("..", "is outside the checkout")]
)
def test_context_of_a_bad_path_is_a_clear_error(
    repo: Path, env: dict[str, str], path: str, message: str
) -> None:
    done = mentis(env, "context", path, cwd=repo)
    assert done.returncode == 2
    assert message in done.stderr


def test_tree_hashes_cover_every_file_as_git_hash_object_would(repo: Path) -> None:
    (repo / "cart.py").write_text("changed\n")
    (repo / "untracked.txt").write_text("u\n")
    (repo / "README.md").unlink()
    assert tree_hashes(repo) == hash_object(repo, "cart.py", "untracked.txt")


@pytest.mark.parametrize(
    ("url", "identity"),
    [
        ("git@github.com:acme/shop.git", "github.com/acme/shop"),
        ("https://github.com/acme/shop.git", "github.com/acme/shop"),
        ("https://user:pw@GitLab.example.com:8443/group/sub/shop", "gitlab.example.com/group/sub/shop"),
        ("ssh://git@github.com/acme/shop.git", "github.com/acme/shop"),
        ("/srv/git/shop.git", "/srv/git/shop"),
    ],
)
def test_remote_urls_normalise_to_host_and_path(url: str, identity: str) -> None:
    assert normalise_remote(url) == identity


# ---------------------------------------------------------------- stale


def record(env: dict[str, str], repo: Path, task: str, status: str, hashes: dict[str, str]) -> str:
    from mentis.api.attempts import RecordAttemptInput
    from mentis.api.common import parse
    from mentis.config import Settings
    from mentis.providers.embed import HashEmbedder
    from mentis.service.memory import Caller, Memory

    settings = Settings(home=Path(env["MENTIS_HOME"]), db_path=Path(env["MENTIS_HOME"]) / "mentis.db")
    memory = Memory.open(settings, HashEmbedder())
    try:
        req = parse(
            RecordAttemptInput,
            {
                "repository": "github.com/acme/shop",
                "task_id": task,
                "action": "ran pytest",
                "observation": f"pytest {status}",
                "code_context": {"commit": git(repo, "rev-parse", "HEAD"), "file_hashes": hashes},
                "check": {"command": "pytest -q", "status": status},
            },
        )
        return memory.record_attempt(Caller(agent_id="agent-a"), req).attempt_id
    finally:
        memory.close()


def test_stale_lists_passed_attempts_whose_files_changed_or_went_away(
    repo: Path, env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "home").mkdir()
    (repo / "tax.py").write_text("RATE = 0.2\n")
    git(repo, "add", "tax.py")
    git(repo, "commit", "-q", "-m", "tax")
    original = hash_object(repo, "cart.py", "README.md", "tax.py")
    edited = record(env, repo, "cart-total", "passed", {"cart.py": original["cart.py"]})
    deleted = record(env, repo, "readme", "passed", {"README.md": original["README.md"]})
    record(env, repo, "cart-failed", "failed", {"cart.py": original["cart.py"]})
    record(env, repo, "tax", "passed", {"tax.py": original["tax.py"]})

    done = mentis(env, "stale", "-r", "github.com/acme/shop", "--json", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "repository": "github.com/acme/shop",
        "attempts": [],
        "passed_checked": 3,
    }

    (repo / "cart.py").write_text("def total(items):\n    return round(sum(items), 2)\n")
    git(repo, "commit", "-q", "-am", "round")
    (repo / "README.md").unlink()
    data = json.loads(mentis(env, "stale", "-r", "github.com/acme/shop", "--json", cwd=repo).stdout)
    found = {a["attempt_id"]: (a["task_id"], a["changed"]) for a in data["attempts"]}
    now = hash_object(repo, "cart.py")["cart.py"]
    assert found == {
        edited: ("cart-total", [{"path": "cart.py", "recorded": original["cart.py"], "current": now}]),
        deleted: ("readme", [{"path": "README.md", "recorded": original["README.md"], "current": None}]),
    }
    assert data["passed_checked"] == 3


def test_stale_leaves_out_attempts_already_marked_outdated_unless_asked(
    repo: Path, env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "home").mkdir()
    original = hash_object(repo, "cart.py")
    attempt = record(env, repo, "cart-total", "passed", original)
    (repo / "cart.py").write_text("changed\n")
    done = mentis(
        env, "outdated", "-r", "github.com/acme/shop", attempt, "--reason", "cart.py changed", cwd=repo
    )
    assert done.returncode == 0, done.stderr
    plain = json.loads(mentis(env, "stale", "-r", "github.com/acme/shop", "--json", cwd=repo).stdout)
    assert plain["attempts"] == []
    both = json.loads(
        mentis(env, "stale", "-r", "github.com/acme/shop", "--include-outdated", "--json", cwd=repo).stdout
    )
    assert [(a["attempt_id"], a["outdated"]) for a in both["attempts"]] == [(attempt, True)]


def test_stale_outside_a_checkout_is_a_clear_error_and_opens_no_store(
    tmp_path: Path, env: dict[str, str]
) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    done = mentis(env, "stale", "-r", "github.com/acme/shop", cwd=outside)
    assert done.returncode == 2 and "not inside a git checkout" in done.stderr
    assert not (tmp_path / "home" / "mentis.db").exists()
