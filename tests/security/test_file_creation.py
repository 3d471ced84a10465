"""Finding 6 of the security review: files Mentis creates are never written through a symlink.

Before, ``mentis tls self-signed`` wrote ``cert.pem`` through a dangling symlink (so whoever could
plant the link chose where a file appeared), and ``exists()`` did not see the link, so no
``--force`` was asked for. The key and ``admin.token`` are created with O_EXCL | O_NOFOLLOW.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mentis.cli import app
from mentis.errors import Conflict
from mentis.service.tokens import TokenStore, bootstrap_admin
from mentis.store.shared.files import write_new


def plant(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


@pytest.mark.parametrize("name", ["cert.pem", "key.pem"])
def test_self_signed_refuses_a_dangling_symlink_where_it_would_write(tmp_path: Path, name: str) -> None:
    out, victim = tmp_path / "tls", tmp_path / "victim.pem"
    plant(out / name, victim)
    made = CliRunner().invoke(app, ["tls", "self-signed", "--out", str(out)])
    assert (made.exit_code, victim.exists(), (out / name).is_symlink()) == (Conflict.exit_code, False, True)
    assert "already exists" in made.output


def test_self_signed_with_force_replaces_symlinks_without_following_them(tmp_path: Path) -> None:
    out = tmp_path / "tls"
    dangling, existing = tmp_path / "dangling.pem", tmp_path / "existing.pem"
    existing.write_bytes(b"keep me")
    plant(out / "cert.pem", dangling)
    plant(out / "key.pem", existing)
    made = CliRunner().invoke(app, ["tls", "self-signed", "--out", str(out), "--force"])
    assert made.exit_code == 0, made.output
    cert, key = out / "cert.pem", out / "key.pem"
    assert (dangling.exists(), existing.read_bytes()) == (False, b"keep me")
    assert (cert.is_symlink(), key.is_symlink()) == (False, False)
    assert cert.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert sorted(p.name for p in out.iterdir()) == ["cert.pem", "key.pem"]  # no temporary left


def test_the_admin_token_is_not_written_through_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    path = tmp_path / "admin.token"
    plant(path, victim)
    tokens = TokenStore(tmp_path / "mentis.db")
    try:
        assert bootstrap_admin(tokens, path)
        written = path.read_text().strip()
        assert tokens.lookup(written) is not None
    finally:
        tokens.close()
    assert (victim.exists(), path.is_symlink(), stat.S_IMODE(path.stat().st_mode)) == (False, False, 0o600)


def test_creating_a_new_file_fails_on_anything_already_there(tmp_path: Path) -> None:
    link = tmp_path / "new.pem"
    plant(link, tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        write_new(link, b"x", replace=False)
    assert (os.path.lexists(tmp_path / "nowhere"), link.is_symlink()) == (False, True)
