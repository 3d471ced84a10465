"""The secret scrubber: what it redacts, what it leaves alone, and that it stays linear.

Tokens are assembled at run time from a seeded generator, so no secret-shaped literal sits in
the repository.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid

import pytest

from mentis.providers.scrub import MIN_ENTROPY, Finding, describe, find_secrets, scrub, shannon_entropy

_RNG = random.Random(20240611)
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
B64URL = ALNUM + "-_"
HEX = "0123456789abcdef"


def rand(n: int, alphabet: str = ALNUM) -> str:
    """``n`` random characters of ``alphabet``, holding a letter and a digit if it has both."""
    mixed = any(c.isdigit() for c in alphabet) and any(c.isalpha() for c in alphabet)
    while True:
        value = "".join(_RNG.choice(alphabet) for _ in range(n))
        if not mixed or (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
            return value


def jwt() -> str:
    def part(obj: str) -> str:
        return base64.urlsafe_b64encode(obj.encode()).decode().rstrip("=")

    return ".".join([part('{"alg":"HS256","typ":"JWT"}'), part('{"sub":"1234567890"}'), rand(43, B64URL)])


# (kind, secret, how it appears in text)
SECRETS = [
    ("aws_access_key_id", "AKIA" + rand(16, UPPER_DIGITS), "export AWS_ACCESS_KEY_ID={}"),
    ("aws_access_key_id", "ASIA" + rand(16, UPPER_DIGITS), "key id {} in ~/.aws/credentials"),
    ("aws_secret_access_key", rand(40, ALNUM + "/+"), "aws_secret_access_key = {}"),
    ("github_token", "ghp_" + rand(36), "git clone https://{}@github.com/acme/shop"),
    ("github_token", "gho_" + rand(36), "token: {}"),
    ("github_token", "ghu_" + rand(36), "{}"),
    ("github_token", "ghs_" + rand(36), "GH_TOKEN={} gh pr list"),
    ("github_token", "ghr_" + rand(36), "refresh {}"),
    ("github_token", "github_pat_" + rand(22) + "_" + rand(59), "GITHUB_TOKEN={}"),
    ("gitlab_token", "glpat-" + rand(20, B64URL), "PRIVATE-TOKEN: {}"),
    ("slack_token", "xoxb-" + rand(12, string.digits) + "-" + rand(24), "slack({!r})"),
    ("slack_token", "xoxp-" + rand(12, string.digits) + "-" + rand(24), "{}"),
    ("stripe_key", "sk_" + "live_" + rand(24), "stripe.api_key = '{}'"),
    ("stripe_key", "rk_" + "live_" + rand(24), "{}"),
    ("openai_key", "sk-" + rand(48), "OPENAI_API_KEY={}"),
    ("openai_key", "sk-proj-" + rand(40, B64URL), 'client = OpenAI(api_key="{}")'),
    ("anthropic_key", "sk-ant-api03-" + rand(80, B64URL), "ANTHROPIC_API_KEY={}"),
    ("openrouter_key", "sk-or-v1-" + rand(64, "0123456789abcdef"), "Using key {} for OpenRouter"),
    ("google_api_key", "AIza" + rand(35, B64URL), "?key={}&q=x"),
    ("npm_token", "npm_" + rand(36), "//registry.npmjs.org/:_authToken={}"),
    ("huggingface_token", "hf_" + rand(34), "HF_TOKEN={}"),
    ("jwt", jwt(), "cookie session={}; Path=/"),
    ("secret_assignment", rand(24, ALNUM + "!#%"), "DB_PASSWORD={}"),
    ("secret_assignment", rand(32), 'client_secret: "{}"'),
    ("secret_assignment", rand(20), '{{"api_key": "{}"}}'),
    ("secret_assignment", hashlib.sha256(b"session").hexdigest(), "SECRET_KEY = '{}'"),
    ("bearer_token", rand(30, B64URL + "."), "curl -H 'Authorization: Bearer {}' https://api"),
    ("bearer_token", rand(30, B64URL), '"Authorization": "Token {}"'),
    ("bearer_token", rand(40, B64URL), "sent header: bearer {}"),
    # the second review's misses (kinds added after gitleaks v8.30.1 and detect-secrets v1.5.0)
    ("mentis_token", f"mentis_{rand(12, HEX)}_{rand(43, B64URL)}", "E   401 for token {} on /v1/search"),
    ("env_secret", rand(9, ALNUM + "!#%"), "DB_PASS={}"),
    ("env_secret", "hunter2", "  env: DB_HOST=db DB_PASS={} DB_NAME=shop"),
    ("env_secret", rand(12) + " " + rand(6), "export MYSQL_ROOT_PASSWORD='{}'"),
    ("env_secret", rand(20, string.ascii_lowercase), "+API_TOKEN={}"),
    (
        "azure_storage_key",
        rand(86, ALNUM + "+/") + "==",
        "DefaultEndpointsProtocol=https;AccountName=shop;AccountKey={};EndpointSuffix=core.windows.net",
    ),
    ("netrc_password", rand(12), "machine api.example.com login deploy password {}"),
    ("netrc_password", rand(14), "$ cat ~/.netrc\nmachine github.com\n  login octocat\n  password {}\n"),
    ("mysql_password", rand(10), "$ mysql -h db -u root -p{} shop < dump.sql"),
    ("mysql_password", rand(10) + " x", "mysqldump -uroot -p'{}' shop > shop.sql"),
    ("curl_user_password", rand(12), "+ curl -sS -u deploy:{} https://ci.example.com/api/json"),
    ("curl_user_password", rand(12), 'curl --user "admin:{}" http://localhost:8080/'),
    ("cli_secret_flag", rand(12), "pg-wrapper --host db --password {} --dbname shop"),
    ("cli_secret_flag", rand(12), "docker login --username ci --password={} registry.example.com"),
    ("cli_secret_flag", rand(12).lower(), "vault login --token '{}'"),
    ("sendgrid_key", f"SG.{rand(22, B64URL)}.{rand(43, B64URL)}", "SENDGRID_API_KEY={}"),
]


@pytest.mark.parametrize(
    ("kind", "secret", "template"), SECRETS, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(SECRETS)]
)
def test_known_secret_is_replaced_by_its_kind(kind: str, secret: str, template: str) -> None:
    text = "before\n" + template.format(secret) + "\nafter"
    scrubbed, findings = scrub(text)
    assert secret not in scrubbed
    assert [f.kind for f in findings] == [kind]
    assert scrubbed == text.replace(secret, f"[REDACTED:{kind}]")


def test_url_password_is_redacted_and_user_and_host_kept() -> None:
    password = rand(12)
    text = f"connecting to postgres://app_user:{password}@db.internal:5432/shop failed"
    scrubbed, findings = scrub(text)
    assert (
        scrubbed == "connecting to postgres://app_user:[REDACTED:url_password]@db.internal:5432/shop failed"
    )
    assert findings == [Finding(text.index(password), text.index(password) + len(password), "url_password")]


def test_private_key_block_is_redacted_whole() -> None:
    body = "\n".join(rand(64, ALNUM + "+/") for _ in range(5))
    text = f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\nThat was the key."
    scrubbed, findings = scrub(text)
    assert scrubbed == "key:\n[REDACTED:private_key]\nThat was the key."
    assert [f.kind for f in findings] == ["private_key"]


def test_private_key_in_json_with_escaped_newlines_is_redacted() -> None:
    body = rand(64, ALNUM + "+/")
    text = '{"private_key": "-----BEGIN PRIVATE KEY-----\\n' + body + '\\n-----END PRIVATE KEY-----\\n"}'
    assert scrub(text)[0] == '{"private_key": "[REDACTED:private_key]\\n"}'


def test_unterminated_private_key_is_redacted_to_the_end() -> None:
    text = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + rand(70) + "\n(output truncated)"
    assert scrub("log: " + text)[0] == "log: [REDACTED:private_key]"


def test_several_secrets_are_each_redacted_in_order() -> None:
    gh, aws = "ghp_" + rand(36), "AKIA" + rand(16, UPPER_DIGITS)
    scrubbed, findings = scrub(f"{gh} and {aws}")
    assert scrubbed == "[REDACTED:github_token] and [REDACTED:aws_access_key_id]"
    assert [f.kind for f in findings] == ["github_token", "aws_access_key_id"]


def test_specific_kind_wins_over_a_secret_named_assignment() -> None:
    token = "ghp_" + rand(36)
    assert scrub(f"GITHUB_TOKEN={token}")[0] == "GITHUB_TOKEN=[REDACTED:github_token]"


def test_scrubbing_twice_finds_nothing_more() -> None:
    text = "\n".join(template.format(secret) for _, secret, template in SECRETS)
    once, findings = scrub(text)
    assert len(findings) == len(SECRETS)
    assert find_secrets(once) == []


def test_finding_and_summary_never_hold_the_secret() -> None:
    secret = "ghp_" + rand(36)
    findings = find_secrets(f"x {secret}")
    assert findings == [Finding(2, 2 + len(secret), "github_token")]
    for text in (str(findings[0]), repr(findings[0]), describe(findings)):
        assert secret not in text
    assert describe(findings) == "1 possible secret (github_token)"


def b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def test_every_value_of_a_kubernetes_secret_is_redacted_in_yaml_in_either_key_order() -> None:
    user, password, cert = b64("admin"), b64(rand(16)), b64(rand(60))
    applied = f"""apiVersion: v1
kind: Secret
metadata:
  name: db-creds
type: Opaque
data:
  username: {user}
  password: {password}
  tls.crt: |
    {cert}
stringData:
  note: {rand(12)}
"""
    fetched = f"""$ kubectl get secret db-creds -o yaml
apiVersion: v1
data:
  password: {password}
kind: Secret
metadata:
  name: db-creds
"""
    scrubbed = scrub(applied)[0]
    assert not any(value in scrubbed for value in (user, password, cert))
    assert scrubbed.count("[REDACTED:kubernetes_secret]") == 4
    assert "  name: db-creds\ntype: Opaque\ndata:\n  username: [REDACTED:kubernetes_secret]\n" in scrubbed
    assert "  tls.crt: |\n    [REDACTED:kubernetes_secret]\n" in scrubbed
    assert scrub(fetched)[0] == fetched.replace(password, "[REDACTED:kubernetes_secret]")


def test_the_values_of_a_kubernetes_secret_in_json_are_redacted_and_a_config_map_is_kept() -> None:
    password = b64(rand(16))
    as_json = json.dumps(
        {"apiVersion": "v1", "data": {"password": password, "user": "YWRtaW4="}, "kind": "Secret"}, indent=4
    )
    assert scrub(as_json)[0] == as_json.replace(password, "[REDACTED:kubernetes_secret]").replace(
        "YWRtaW4=", "[REDACTED:kubernetes_secret]"
    )
    config_map = (
        f"apiVersion: v1\nkind: ConfigMap\ndata:\n  settings: {b64('debug=true')}\n---\nkind: Secret\n"
    )
    assert find_secrets(config_map) == []


REALISTIC_CODING_TEXT = f"""
Traceback (most recent call last):
  File "/home/dev/src/shop/app/payments/stripe_client.py", line 88, in charge
    response = self._session.post(url, json=payload, timeout=self.timeout)
  File "/usr/lib/python3.11/site-packages/requests/sessions.py", line 637, in post
    return self.request("POST", url, data=data, json=json, **kwargs)
requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.stripe.com', port=443)
commit 9fceb02d0ae598e95dc970b74767f19372d61af8
Author: Dev Eloper <dev@example.com>
Date:   Tue Jun 11 10:12:43 2024 +0200
    Fix token refresh race in auth middleware (#1234)
e83c5163316f89bfbde7d9ab23ca2e25604af290 Merge branch 'main' into fix/token-refresh
request_id={uuid.uuid4()} trace={uuid.uuid4()} span={uuid.uuid4().hex}
sha256:{hashlib.sha256(b"layer").hexdigest()}
docker pull ghcr.io/acme/shop@sha256:{hashlib.sha256(b"image").hexdigest()}
"integrity": "sha512-{base64.b64encode(hashlib.sha512(b"pkg").digest()).decode()}"
encoded = "{base64.b64encode(b"hello world").decode()}"  # aGVsbG8...
auth_header = base64.b64encode(b"user:pass")
tokenizer = AutoTokenizer.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")
max_tokens=4096 password_min_length=12 token_count: 123456789012345678
password = os.environ["DB_PASSWORD"]
secret = get_secret_from_vault(name="prod/db")
api_key: str | None = None
token_path=/var/run/secrets/kubernetes.io/serviceaccount/token
SECRET_KEY_FILE=/etc/shop/secret_key_2024.txt
access_token_url = "https://github.com/login/oauth/access_token"
password: ${{{{ secrets.DB_PASSWORD_2024_PROD }}}}
See https://docs.python.org/3/library/secrets.html#secrets.token_urlsafe for tokens.
The risk-assessment-framework-2024-v2 and task-1234567890abcdefghij both failed.
git push https://github.com/acme/shop.git HEAD:refs/heads/feature/skip-tokens-2024
/home/dev/.cache/pip/wheels/3f/9a/2b/0c7e1d4a5b6c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d
Bearer authentication is required for this endpoint.
ssh://git@github.com/acme/shop.git and postgres://localhost:5432/shop
"""


def test_realistic_coding_text_has_no_findings() -> None:
    assert find_secrets(REALISTIC_CODING_TEXT) == []


ORDINARY_OUTPUT = {
    "pytest": """============================= test session starts ==============================
platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0 -- /home/dev/shop/.venv/bin/python
rootdir: /home/dev/shop
configfile: pyproject.toml
plugins: anyio-4.4.0, xdist-3.6.1, timeout-2.3.1
collected 214 items

tests/test_auth.py::test_login_with_valid_password PASSED                [  1%]
tests/test_auth.py::test_token_refresh FAILED                            [  2%]
tests/test_auth.py::test_login[password=wrong-401] PASSED                [  3%]

=================================== FAILURES ===================================
______________________________ test_token_refresh ______________________________

    def test_token_refresh(client):
        token = client.login("alice", password=PASSWORD)
>       assert token.expires_in == 3600
E       AssertionError: assert 1800 == 3600
E        +  where 1800 = Token(access='<hidden>', expires_in=1800).expires_in

tests/test_auth.py:42: AssertionError
------------------------------ Captured log call -------------------------------
INFO     shop.auth:auth.py:88 issued token id=5f0c2a1e for user=alice
=========================== short test summary info ============================
FAILED tests/test_auth.py::test_token_refresh - AssertionError: assert 1800 == 3600
=================== 1 failed, 213 passed, 3 skipped in 12.34s ==================
""",
    "cargo": """   Compiling shop v0.1.0 (/home/dev/shop)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 4.21s
     Running unittests src/lib.rs (target/debug/deps/shop-9f8e7d6c5b4a3f21)

running 3 tests
test auth::tests::token_roundtrip ... ok
test auth::tests::password_hash_verifies ... FAILED

---- auth::tests::password_hash_verifies stdout ----
thread 'auth::tests::password_hash_verifies' panicked at src/auth.rs:57:9:
assertion `left == right` failed
  left: "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG"
 right: "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHQ$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.08s
error: test failed, to rerun pass `--lib`
""",
    "go": """=== RUN   TestTokenRefresh
    auth_test.go:42: expected expiry 3600, got 1800 (token=&{ID:42 Kind:refresh})
--- FAIL: TestTokenRefresh (0.00s)
=== RUN   TestPasswordHash
--- PASS: TestPasswordHash (0.08s)
PASS=12 FAIL=1 SKIP=0
FAIL
FAIL	github.com/acme/shop/auth	0.123s
ok  	github.com/acme/shop/cart	0.045s	coverage: 81.2% of statements
""",
    "jest": """ FAIL  src/auth/token.test.ts
  ● token › refreshes before expiry

    expect(received).toBe(expected) // Object.is equality

    Expected: 3600
    Received: 1800

      40 |   const token = await login("alice", { password: process.env.TEST_PASSWORD });
    > 41 |   expect(token.expiresIn).toBe(3600);
         |                           ^
      at Object.<anonymous> (src/auth/token.test.ts:41:27)

Tests:       1 failed, 47 passed, 48 total
Snapshots:   0 total
Time:        2.314 s
""",
    "traceback": """Traceback (most recent call last):
  File "/home/dev/shop/app/db.py", line 31, in connect
    return psycopg.connect(host=host, user=user, password=password, dbname="shop")
  File "/usr/lib/python3.11/site-packages/psycopg/connection.py", line 119, in connect
    raise last_ex.with_traceback(None)
psycopg.OperationalError: connection failed: FATAL:  password authentication failed for user "app"
""",
    "git diff": """diff --git a/.github/workflows/ci.yml b/.github/workflows/ci.yml
index 3f1c2ab..9e8d7f6 100644
--- a/.github/workflows/ci.yml
+++ b/.github/workflows/ci.yml
@@ -12,7 +12,7 @@ jobs:
-      - run: DB_PASSWORD=${{ secrets.DB_PASSWORD }} make test
+      - run: DB_PASSWORD=$DB_PASSWORD API_TOKEN="${API_TOKEN}" make test
-      - run: curl -u "$CI_USER:$CI_TOKEN" https://ci.example.com/hook
+      - run: curl -u "${CI_USER}:${CI_TOKEN}" --password-stdin https://ci.example.com/hook
""",
    "shell and help text": """$ echo $PWD
PWD=/home/dev/shop OLDPWD=/home/dev
$ mysql -u root -p shop
Enter password:
Usage: deploy [OPTIONS]
  --password TEXT    The database password.
  --token TOKEN      An API token (or set DEPLOY_TOKEN).
  --api-key [KEY]    ...
  --token-file PATH  Read the token from PATH.
DB_PASSWORD=******** DB_TOKEN=<your-token> SECRET_NAME=db-creds TOKEN=xxxxxxxx
machine example.com login anonymous password $NETRC_PASSWORD
""",
    "identifiers": f"""request_id={uuid.uuid4()} trace={uuid.uuid4().hex}
sha256:{hashlib.sha256(b"build").hexdigest()}
{hashlib.sha256(b"a").hexdigest()}  dist/shop-1.2.0.tar.gz
base64 of a greeting: {b64("hello, world! this is not a secret at all")}
data: {b64('{"page": 2, "per_page": 50}')}
""",
}


@pytest.mark.parametrize("text", list(ORDINARY_OUTPUT.values()), ids=list(ORDINARY_OUTPUT))
def test_ordinary_check_output_is_not_mangled(text: str) -> None:
    assert scrub(text) == (text, [])


@pytest.mark.parametrize(
    "value",
    [
        "aaaaaaaaaaaaaaaaaaaaaaaa1",  # long but one symbol: entropy ~0.2
        "changeme_changeme_1",  # words and a digit: entropy below 3.5
        "0000111122223333",  # digits only
        "correcthorsebatterystaple",  # no digit
    ],
)
def test_low_entropy_or_letter_only_assignment_is_kept(value: str) -> None:
    assert find_secrets(f"password={value}") == []


def test_short_assignment_is_kept() -> None:
    assert find_secrets(f"password={rand(15)}") == []


def test_entropy_thresholds_are_as_documented() -> None:
    assert shannon_entropy("") == 0.0
    assert shannon_entropy("aaaa") == 0.0
    assert shannon_entropy("abcd") == 2.0
    assert shannon_entropy(rand(32)) > MIN_ENTROPY
    assert shannon_entropy(hashlib.sha1(b"x").hexdigest()) > MIN_ENTROPY


ADVERSARIAL = {
    "one letter": "a" * 65536,
    "sk prefixes": "sk-" * 21846,
    "jwt starts": "eyJ." * 16384,
    "scheme starts": "a://" * 16384,
    "userinfo starts": "x://u:" * 10923,
    "pem begins": "-----BEGIN PRIVATE KEY-----" * 2427,
    "assignments": "password=" * 7282,
    "bearer words": "Bearer " * 9362,
    "aws names": "aws_secret_key=" * 4369,
    "curl words": "curl -u " * 8192,
    "mysql words": "mysql -x " * 7282,
    "netrc words": "machine a login b " * 3641,
    "flag words": "--password " * 5958,
    "env names": "A_" * 32600 + "PASS",
    "kubernetes documents": "kind: Secret\ndata:\n" * 3641,
    "kubernetes nesting": "kind: Secret\n" + "".join(" " * i + "data:\n" for i in range(360)),
    "random printable": "".join(_RNG.choice(string.printable) for _ in range(65536)),
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("text", list(ADVERSARIAL.values()), ids=list(ADVERSARIAL))
def test_64_kib_adversarial_input_is_scanned(text: str) -> None:
    scrubbed, findings = scrub(text)
    assert len(text) >= 65000
    assert find_secrets(scrubbed) == []
    assert len(findings) <= len(text)
