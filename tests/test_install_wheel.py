"""Installing outside the checkout: build the wheel, install it (not editable) into a fresh venv,
install the model there with `mentis model install` and run `mentis doctor`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import zipfile
from contextlib import closing
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
IGNORED = shutil.ignore_patterns(
    ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "bench", "tests"
)


def _run(args: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=900, check=False, **kwargs
    )  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_doctor_passes_there(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=IGNORED)  # build a copy: the checkout stays clean
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", dist, source])
    (wheel,) = dist.glob("mentis-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv])
    bin_ = venv / "bin"
    _run([bin_ / "python", "-m", "pip", "install", "--disable-pip-version-check", wheel])
    where = _run([bin_ / "python", "-c", "import mentis; print(mentis.__file__)"]).stdout.strip()
    assert Path(where).is_relative_to(venv), where

    env = {k: v for k, v in os.environ.items() if not k.startswith("MENTIS_")}
    env.update(MENTIS_HOME=str(tmp_path / "home"), MENTIS_AGENT_ID="wheel-test")
    installed = json.loads(_run([bin_ / "mentis", "model", "install", "--json"], env=env).stdout)
    assert (installed["installed"], installed["dim"]) == (True, 384)

    _run(
        [
            bin_ / "mentis",
            "record",
            "-r",
            "github.com/acme/shop",
            "-t",
            "T-1",
            "--action",
            "ran the tests",
            "--observation",
            "cart total off by a cent",
        ],
        env=env,
    )
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    doctor = subprocess.run(
        [bin_ / "mentis", "doctor", "--json", "--address", address],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = json.loads(doctor.stdout)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert doctor.returncode == 0 and report["ok"] and not failed, failed
    (model,) = [c for c in report["checks"] if c["check"] == "model"]
    assert model["status"] == "ok" and ", 384 dims, one embed " in model["detail"]
    assert any(c["check"] == "chain github.com/acme/shop" for c in report["checks"])
