"""Checkpoints at a cadence from the hooks: ``[checkpoint]`` in the user's hooks.toml (never a
project's), when one is due (a day old, or HEAD committed since), and the command a due hook
starts, run here to the end in a real checkout on a real store."""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from mentis.errors import ConfigError
from mentis.integrations.checkpoint_git import DIRECTORY, chain_key
from mentis.integrations.hooks import checkpoint as cadence
from mentis.integrations.hooks import config as hook_config
from mentis.ledger import checkpoint

REPO = "github.com/acme/shop"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    top = tmp_path / "shop"
    top.mkdir()
    _git(top, "init", "--quiet")
    _git(top, "config", "user.email", "dev@example.com")
    _git(top, "config", "user.name", "Dev")
    _git(top, "remote", "add", "origin", "https://github.com/acme/shop.git")
    (top / "README").write_text("shop\n")
    _git(top, "add", "README")
    _git(top, "commit", "--quiet", "-m", "first")
    return top


def _stamp(folder: Path, at: float, seq: int = 1) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(at))}-{seq}.json").write_text("{}")


def test_the_user_file_sets_the_cadence_and_bad_values_are_refused_naming_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "hooks.toml").write_text('[checkpoint]\nevery = "commit"\nkey = "~/ops.pem"\ncommit = true\n')
    cfg = hook_config.load(home, None)
    assert (cfg.checkpoint_every, cfg.checkpoint_key, cfg.checkpoint_commit) == (
        "commit",
        Path("~/ops.pem").expanduser(),
        True,
    )
    for bad, named in (
        ('every = "hourly"\nkey = "k"', "every"),
        ('every = "day"', "key"),
        ('every = "day"\nkey = "k"\ncommit = "yes"', "commit"),
        ('every = "day"\nkey = "k"\nwhen = 1', "when"),
    ):
        (home / "hooks.toml").write_text(f"[checkpoint]\n{bad}\n")
        with pytest.raises(ConfigError, match=named):
            hook_config.load(home, None)


def test_a_project_file_cannot_set_a_checkpoint_cadence(tmp_path: Path, checkout: Path) -> None:
    (checkout / ".mentis").mkdir()
    (checkout / ".mentis" / "hooks.toml").write_text('[checkpoint]\nevery = "day"\nkey = "/tmp/k.pem"\n')
    with pytest.raises(ConfigError, match="may only set"):
        hook_config.load(tmp_path, checkout)


def test_daily_is_due_with_no_checkpoint_or_one_a_day_old_and_not_with_a_fresh_one(checkout: Path) -> None:
    folder = checkout / DIRECTORY / chain_key(REPO)
    now = time.time()
    assert cadence.due("day", checkout, REPO, now)
    _stamp(folder, now - 25 * 3600)
    assert cadence.due("day", checkout, REPO, now)
    _stamp(folder, now - 3600, seq=2)
    assert not cadence.due("day", checkout, REPO, now)
    assert cadence.due("day", checkout, "github.com/acme/other", now)  # per repository


def test_per_commit_is_due_once_head_was_committed_after_the_newest_checkpoint(checkout: Path) -> None:
    folder = checkout / DIRECTORY / chain_key(REPO)
    committed = int(_git(checkout, "log", "-1", "--format=%ct"))
    assert cadence.due("commit", checkout, REPO)
    _stamp(folder, committed + 5)
    assert not cadence.due("commit", checkout, REPO)
    env = dict(os.environ, GIT_COMMITTER_DATE=f"@{committed + 60} +0000")
    (checkout / "README").write_text("shop, changed\n")
    subprocess.run(["git", "commit", "--quiet", "-am", "next"], cwd=checkout, env=env, check=True)
    assert cadence.due("commit", checkout, REPO)


def test_the_command_a_due_hook_starts_writes_and_commits_the_checkpoint_so_it_is_no_longer_due(
    checkout: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = dict(os.environ, MENTIS_HOME=str(home), MENTIS_EMBEDDER="hash")
    env.pop("MENTIS_CHECKPOINTS", None)
    mentis = [*cadence.command(Path("x"), False)[:3]]  # this Python's `-m mentis`
    run = [*mentis, "record-attempt", "-r", REPO, "-t", "t", "--action", "a", "--observation", "o"]
    subprocess.run(run, env=env, check=True, capture_output=True)
    key = tmp_path / "ops.pem"
    subprocess.run(
        [*mentis, "agent", "keygen", "-a", "ops", "--out", str(key)], env=env, check=True, capture_output=True
    )
    done = subprocess.run(cadence.command(key, True), cwd=checkout, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    path = Path(json.loads(done.stdout)["git"]["path"])
    assert checkpoint.parse(path.read_bytes()).head(REPO) is not None
    assert str(path.relative_to(checkout)) in _git(checkout, "show", "--name-only", "--format=", "HEAD")
    name_time = calendar.timegm(time.strptime(path.name.split("-")[0], "%Y%m%dT%H%M%SZ"))
    assert cadence.newest(checkout, REPO) == name_time
    assert not cadence.due("day", checkout, REPO)
    assert not cadence.due("commit", checkout, REPO)  # its own commit is not a new one
