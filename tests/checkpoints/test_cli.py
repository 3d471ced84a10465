"""``mentis checkpoint`` and ``mentis verify --checkpoint`` on a real SQLite file: printed for a
person, written to a file, into a real git checkout (and committed), posted to a real loopback
witness that checks the Standard Webhooks signature; ``MENTIS_CHECKPOINTS`` refusing an open."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mentis.cli import app
from mentis.ledger import checkpoint, signing
from mentis.ledger.links import CHECKPOINTS_CHAIN

REPO = "github.com/acme/shop"


class Store:
    def __init__(self, tmp_path: Path) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir(mode=0o700)
        self.db = self.home / "mentis.db"
        self.env = {"MENTIS_EMBEDDER": "hash", "MENTIS_HOME": str(self.home), "MENTIS_CHECKPOINTS": ""}
        self.runner = CliRunner()

    def run(self, *args: str, env: dict[str, str] | None = None) -> Any:
        return self.runner.invoke(app, [*args, "--db", str(self.db)], env=self.env | (env or {}))

    def ok(self, *args: str, env: dict[str, str] | None = None) -> Any:
        done = self.run(*args, "--json", env=env)
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout)

    def checkpoints(self) -> int:
        heads = self.ok("verify-integrity")["chains"]
        return next((c["entries"] for c in heads if c["chain"] == CHECKPOINTS_CHAIN), 0)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path)
    for i in range(2):
        s.ok("record-attempt", "-r", REPO, "-t", f"t{i}", "--action", f"a{i}", "--observation", "o")
    return s


@pytest.fixture
def key(store: Store, tmp_path: Path) -> Path:
    path = tmp_path / "ops.pem"
    store.ok("agent", "keygen", "--agent", "ops", "--out", str(path))
    return path


def test_without_an_output_the_checkpoint_is_printed_for_a_person_to_keep(store: Store, key: Path) -> None:
    done = store.run("checkpoint", "--key", str(key))
    assert done.exit_code == 0, done.output
    cp = checkpoint.parse(done.stdout.encode())
    assert [h.chain for h in cp.chains] == ["__agents__", REPO]
    assert cp.head(REPO) is not None and cp.head(REPO).seq == 1  # type: ignore[union-attr]
    assert store.checkpoints() == 1


def test_out_writes_a_file_that_verify_checkpoint_holds(store: Store, key: Path, tmp_path: Path) -> None:
    out = tmp_path / "cp.json"
    made = store.ok("checkpoint", "--key", str(key), "--out", str(out), "-r", REPO)
    assert made["out"] == str(out) and [c["chain"] for c in made["checkpoint"]["chains"]] == [REPO]
    store.ok("record-attempt", "-r", REPO, "-t", "t9", "--action", "later", "--observation", "o")
    verified = store.ok("verify", "--checkpoint", str(out))
    assert verified["checkpoints"][0]["file"] == str(out) and verified["checkpoints"][0]["chains"] == 1
    taken = store.run("checkpoint", "--key", str(key), "--out", str(out))
    assert taken.exit_code == 2 and "already exists" in taken.output


def test_bad_options_are_refused_naming_them_and_write_nothing(
    store: Store, key: Path, tmp_path: Path
) -> None:
    cases = [
        (["checkpoint"], 2, "MENTIS_SIGNING_KEY"),
        (["checkpoint", "--key", str(key), "--commit"], 2, "--git"),
        (["checkpoint", "--key", str(key), "--post", "http://example.com/w"], 2, "https"),
        (
            ["checkpoint", "--key", str(key), "--post", "https://example.com/w"],
            10,
            "MENTIS_CHECKPOINT_SECRET",
        ),
        (["checkpoint", "--key", str(key), "-r", "github.com/nobody/here"], 3, "nobody"),
        (["checkpoint", "--key", str(tmp_path / "absent.pem")], 10, "absent.pem"),
        (["verify", "--checkpoint", str(tmp_path / "absent.json")], 10, "absent.json"),
    ]
    for args, code, named in cases:
        done = store.run(*args)
        assert done.exit_code == code, (args, done.output)
        assert named in done.output.replace("\n", ""), (args, done.output)
    assert store.checkpoints() == 0


def test_mentis_checkpoints_refuses_to_open_a_store_behind_a_checkpoint(
    store: Store, key: Path, tmp_path: Path
) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    store.ok("checkpoint", "--key", str(key), "--out", str(kept / "now.json"))
    env = {"MENTIS_CHECKPOINTS": str(kept)}
    assert store.ok("verify-integrity", env=env)["ok"] is True
    # a checkpoint the store is behind (as after a rollback): signed by the operator for seq 9
    claim = checkpoint.sign(
        signing.load_private_key(key), "ops", signing.now_iso(), [checkpoint.Head(REPO, 9, "ab" * 32)]
    )
    (kept / "sub").mkdir()
    (kept / "sub" / "later.json").write_bytes(claim.text())
    refused = store.run("search", "anything", env=env)
    assert refused.exit_code == 6
    said = refused.output.replace("\n", "")
    assert REPO in said and "seq 9" in said and "later.json" in said and "ends at seq 1" in said


# ---------------------------------------------------------------- --git


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    top = tmp_path / "shop"
    top.mkdir()
    _git(top, "init", "--quiet")
    _git(top, "config", "user.email", "dev@example.com")
    _git(top, "config", "user.name", "Dev")
    _git(top, "remote", "add", "origin", "git@github.com:acme/shop.git")
    (top / "README").write_text("shop\n")
    _git(top, "add", "README")
    _git(top, "commit", "--quiet", "-m", "first")
    (top / "staged.txt").write_text("not mine\n")
    _git(top, "add", "staged.txt")
    (top / "src").mkdir()
    monkeypatch.chdir(top / "src")
    return top


def test_git_writes_the_checkout_repository_s_checkpoint_and_says_how_to_commit_it(
    store: Store, key: Path, checkout: Path
) -> None:
    made = store.ok("checkpoint", "--key", str(key), "--git")
    path = Path(made["git"]["path"])
    assert path.parent == checkout / ".mentis" / "checkpoints" / "github.com_acme_shop"
    assert path.name.endswith("-1.json") and made["git"]["committed"] is False
    assert "git commit --only" in made["git"]["commit"]
    cp = checkpoint.parse(path.read_bytes())
    assert [h.chain for h in cp.chains] == [REPO]  # heads only: no content of any record
    assert b"observation" not in path.read_bytes()
    assert store.ok("verify", "--checkpoint", str(checkout / ".mentis"))["checkpoints"][0]["chains"] == 1


def test_git_commit_commits_that_one_file_and_nothing_else_staged(
    store: Store, key: Path, checkout: Path
) -> None:
    made = store.ok("checkpoint", "--key", str(key), "--git", "--commit")
    path = Path(made["git"]["path"])
    committed = _git(checkout, "show", "--name-only", "--format=%s", "HEAD").split()
    assert str(path.relative_to(checkout)) in committed and "staged.txt" not in committed
    assert "staged.txt" in _git(checkout, "diff", "--cached", "--name-only")  # still staged, untouched
    assert _git(checkout, "log", "-1", "--format=%s").startswith(f"mentis checkpoint of {REPO} at seq 1")


# ---------------------------------------------------------------- --post


class Witness:
    """A loopback HTTP witness that keeps what it receives when its Standard Webhooks signature
    verifies (its own HMAC code, not Mentis's), and answers 401 otherwise."""

    def __init__(self, secret: str) -> None:
        self.key = base64.b64decode(secret.removeprefix("whsec_"))
        self.kept: list[tuple[dict[str, str], bytes]] = []
        witness = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                mid, ts = self.headers["webhook-id"], self.headers["webhook-timestamp"]
                mac = hmac.new(witness.key, f"{mid}.{ts}.".encode() + body, hashlib.sha256).digest()
                given = [
                    s.split(",", 1)[1]
                    for s in self.headers["webhook-signature"].split()
                    if s.startswith("v1,")
                ]
                ok = any(hmac.compare_digest(base64.b64decode(g), mac) for g in given)
                if ok:
                    witness.kept.append((dict(self.headers.items()), body))
                self.send_response(204 if ok else 401)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/witness"


@pytest.fixture
def witness() -> Iterator[Witness]:
    w = Witness("whsec_" + base64.b64encode(secrets.token_bytes(32)).decode())
    thread = threading.Thread(target=w.server.serve_forever, daemon=True)
    thread.start()
    yield w
    w.server.shutdown()
    w.server.server_close()
    thread.join(timeout=5)


def test_post_sends_the_checkpoint_to_a_witness_that_verifies_its_signature(
    store: Store, key: Path, witness: Witness, tmp_path: Path
) -> None:
    secret = tmp_path / "witness.secret"
    secret.write_text("whsec_" + base64.b64encode(witness.key).decode() + "\n")
    made = store.ok("checkpoint", "--key", str(key), "--post", witness.url, "--post-secret-file", str(secret))
    assert made["post"]["status"] == 204
    [(headers, body)] = witness.kept
    assert headers["webhook-id"] == made["post"]["webhook_id"] and headers["webhook-id"].startswith("msg_")
    assert checkpoint.parse(body).to_json() == made["checkpoint"]
    kept = tmp_path / "from-witness.json"
    kept.write_bytes(body)
    assert store.ok("verify", "--checkpoint", str(kept))["checkpoints"][0]["chains"] == 2


def test_post_with_the_wrong_secret_is_refused_by_the_witness_and_says_so(
    store: Store, key: Path, witness: Witness
) -> None:
    wrong = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    done = store.run(
        "checkpoint", "--key", str(key), "--post", witness.url, env={"MENTIS_CHECKPOINT_SECRET": wrong}
    )
    assert done.exit_code == 12 and "401" in done.output
    assert witness.kept == []


def test_with_mentis_signing_key_the_key_signs_the_checkpoint_and_the_entry_is_its_agent_s_signed_write(
    store: Store, key: Path, tmp_path: Path
) -> None:
    env = {"MENTIS_SIGNING_KEY": str(key)}
    made = store.ok("checkpoint", "--out", str(tmp_path / "cp.json"), env=env)
    assert made["checkpoint"]["agent"] == "ops"
    exported = tmp_path / "all.jsonl"
    assert store.run("export", str(exported)).exit_code == 0
    [entry] = [
        json.loads(line)["entry"] for line in exported.read_text().splitlines()[1:] if '"checkpoint"' in line
    ]
    assert entry["agent"] == "ops" and entry["key_id"] == made["checkpoint"]["key_id"] and entry["sig"]
    assert store.ok("verify-integrity", "--signatures", env=env)["ok"] is True
