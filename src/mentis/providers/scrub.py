"""The secret scrubber: every text that leaves the machine passes :func:`scrub` first (DESIGN §8).

:func:`find_secrets` reports what looks like a secret as a :class:`Finding` (a kind and a span,
never the secret itself); :func:`scrub` replaces each finding with ``[REDACTED:<kind>]``.

What is found, by kind:

- provider tokens with a recognisable prefix: ``aws_access_key_id`` (AKIA/ASIA/ABIA/ACCA + 16),
  ``github_token`` (ghp_/gho_/ghu_/ghs_/ghr_, github_pat_), ``gitlab_token`` (glpat-),
  ``slack_token`` (xoxa-/xoxb-/xoxp-/xoxr-/xoxs-), ``stripe_key`` (sk_/rk_ + live_/test_),
  ``anthropic_key`` (sk-ant-), ``openrouter_key`` (sk-or-), ``openai_key`` (sk-, sk-proj-, …;
  at least one digit), ``google_api_key`` (AIza + 35), ``npm_token``, ``pypi_token``,
  ``huggingface_token``, ``sendgrid_key`` (``SG.`` + 22 + ``.`` + 43) and Mentis's own
  ``mentis_token`` (``mentis_<12 hex>_<secret>``, the whole token);
- ``jwt``: three base64url parts, the first starting ``eyJ``;
- ``private_key``: a PEM ``-----BEGIN … PRIVATE KEY-----`` block up to its END line (an
  unterminated block is redacted to the end of the text);
- ``url_password``: the password of ``scheme://user:password@host`` (the user is kept);
- ``bearer_token``: the credential of an ``Authorization: Bearer|Basic|Token …`` header, and a
  bare ``Bearer <token>`` of at least 20 characters holding a digit;
- ``aws_secret_access_key``: 40 base64 characters assigned to ``aws_secret_access_key``;
- ``azure_storage_key``: the value of ``AccountKey=`` / ``SharedAccessKey=`` in a connection string;
- passwords on command lines and in files, of any length: ``mysql_password`` (``-pVALUE`` of a
  mysql/mysqldump/mariadb… command), ``curl_user_password`` (the password of ``curl -u|--user
  user:password``; the user is kept), ``cli_secret_flag`` (the value of ``--password``,
  ``--passwd``, ``--passphrase``, ``--secret``, ``--token``, ``--api-key``, ``--access-key`` and
  ``--db-password``-like flags, but not a help text's metavar such as ``TEXT``), ``netrc_password``
  (``machine HOST [login U] password P``, on one line or several) and ``env_secret`` (an
  upper-case environment-style ``NAME=value`` whose name ends in PASSWORD, PASSWD, PASSPHRASE,
  SECRET, TOKEN, API_KEY, ACCESS_KEY, SECRET_KEY, PRIVATE_KEY, AUTH_KEY, ACCOUNT_KEY, CLIENT_KEY,
  CREDENTIAL(S), or ``_PASS``/``_PWD`` after a prefix: ``DB_PASS=…``). Values that are a variable
  (``$X``, ``${X}``, ``%X%``), a placeholder (``<token>``, ``{{ … }}``), a path, a boolean or one
  repeated character (``***``) are left alone;
- ``kubernetes_secret``: every value under ``data:``/``stringData:`` of a YAML or JSON document
  whose ``kind`` is ``Secret`` (``kubectl get secret -o yaml|json``), base64 or not; a
  ``ConfigMap``'s data is kept;
- ``secret_assignment``: a value assigned (``=``, ``:``, ``:=``, ``=>``) to a name containing
  password, passwd, passphrase, pwd, secret, token, api_key/apikey, access_key, auth_key,
  credential, creds or db_pass, when the value is at least :data:`MIN_SECRET_LENGTH` (16)
  characters of ``[A-Za-z0-9+/=_.~!@#$%^&*-]``, holds a letter and a digit, and has a Shannon
  entropy of at least :data:`MIN_ENTROPY` (3.5) bits per character. Random base64/hex secrets of
  16+ characters score 3.5-5.5; identifiers and English words rarely hold a digit and score lower.
  Names ending ``_id``, ``_path``, ``_url``, ``_count`` … (see ``_NOT_SECRET_SUFFIXES``) are
  skipped, as are values followed by ``(`` or ``[`` (a call or an index, not a literal). Short
  lower-case assignments (``password=hunter2``) are not found: below 16 characters ordinary code
  (``password: Optional``, ``password=password``) cannot be told apart.

Facts (prefixes, lengths, which names and flags carry secrets) follow gitleaks v8.30.1
``config/gitleaks.toml`` (sendgrid-api-token, curl-auth-user, kubernetes-secret-yaml, the
keywords of generic-api-key) and detect-secrets v1.5.0 (``SendGridDetector``,
``AzureStorageKeyDetector``, ``KeywordDetector``'s denylist); the patterns are written here.

Git SHAs, UUIDs, sha256 digests, file paths, stack traces and the output of pytest, cargo, go
test and jest are not flagged unless a secret is in them (``tests/test_scrub.py`` holds samples).
Every pattern is precompiled; repetitions are bounded or run over disjoint characters, so the
scan stays linear in the text (PEM blocks and Kubernetes maps are walked with ``str.find``).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MIN_SECRET_LENGTH = 16
"""Shortest value of a secret-named assignment that is flagged."""
MIN_ENTROPY = 3.5
"""Shannon entropy (bits per character) a secret-named assignment's value must reach."""


@dataclass(frozen=True, order=True)
class Finding:
    """Something that looks like a secret: its kind and where it is (``text[start:end]``)."""

    start: int
    end: int
    kind: str

    def __str__(self) -> str:
        return f"{self.kind} at characters {self.start}-{self.end}"


def shannon_entropy(value: str) -> float:
    """Bits of Shannon entropy per character of ``value`` (0.0 for an empty string)."""
    if not value:
        return 0.0
    total = len(value)
    return sum(n / total * math.log2(total / n) for n in Counter(value).values())


_Check = Callable[[str, re.Match[str]], bool]


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    group: int | tuple[int, ...] = 0  # the part of the match that is the secret (the first that took part)
    check: _Check | None = None

    def span(self, match: re.Match[str]) -> tuple[int, int]:
        groups = self.group if isinstance(self.group, tuple) else (self.group,)
        return next(match.span(g) for g in groups if match.start(g) >= 0)


def _has_digit(text: str, match: re.Match[str]) -> bool:
    return any(c.isdigit() for c in match.group(0))


def _bare_bearer(text: str, match: re.Match[str]) -> bool:
    value = match.group(1)
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _not_redacted(text: str, match: re.Match[str]) -> bool:
    return not match.group(3).startswith("[REDACTED:")


_PLACEHOLDER_STARTS = ("$", "%", "<", "{{", "[REDACTED:", "/", "./", "../", "~/")
_NOT_VALUES = frozenset({"true", "false", "none", "null", "nil", "yes", "no", "on", "off", "undefined"})


def _literal(value: str) -> bool:
    """A value that may be a secret: not a variable, placeholder, path, boolean or one repeated
    character (``***``, ``xxxx``)."""
    value = value.strip("\"'")
    return bool(value) and not (
        value.startswith(_PLACEHOLDER_STARTS) or value.lower() in _NOT_VALUES or len(set(value)) == 1
    )


def _last_group_literal(text: str, match: re.Match[str]) -> bool:
    value = next((g for g in reversed(match.groups()) if g is not None), "")
    return _literal(value)


def _flag_value(text: str, match: re.Match[str]) -> bool:
    """A ``--password VALUE`` whose value is not another flag or a help text's metavar."""
    value = next((g for g in reversed(match.groups()) if g is not None), "")
    if value.startswith(("-", "[", "(", "{")) or re.fullmatch(r"[A-Z][A-Z_]*|\.\.\.", value):
        return False
    return _literal(value)


_NOT_SECRET_SUFFIXES = (
    "_id",
    "_ids",
    "_count",
    "_type",
    "_name",
    "_names",
    "_path",
    "_file",
    "_url",
    "_uri",
    "_len",
    "_length",
    "_size",
    "_limit",
    "_env",
    "_var",
    "_header",
    "_field",
    "_prefix",
    "_ttl",
    "_expiry",
    "_expires",
)


def _high_entropy_value(text: str, match: re.Match[str]) -> bool:
    name = match.group(1).lower().replace("-", "_")
    if name.endswith(_NOT_SECRET_SUFFIXES):
        return False
    value = match.group(2)
    following = text[match.end(2) : match.end(2) + 1]
    if following in ("(", "["):
        return False
    if value.startswith(("/", "./", "../", "~/", "$", "http", "[REDACTED:")):
        return False
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    return shannon_entropy(value) >= MIN_ENTROPY


_TAIL = r"(?![A-Za-z0-9_\-])"

# In priority order: when two findings start at the same place and are as long, the earlier
# rule names the kind (a GitHub token assigned to GITHUB_TOKEN is a github_token).
_RULES: tuple[_Rule, ...] = (
    _Rule("aws_access_key_id", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b")),
    _Rule(
        "aws_secret_access_key",
        re.compile(
            r"(?i)aws_?secret_?(?:access_?)?key[\"']?\s{0,5}(?:=|:=|=>|:)\s{0,5}[\"']?"
            r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
        group=1,
    ),
    _Rule("github_token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}" + _TAIL)),
    _Rule("github_token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,255}" + _TAIL)),
    _Rule("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,255}" + _TAIL)),
    _Rule("slack_token", re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,250}" + _TAIL)),
    _Rule("stripe_key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,247}" + _TAIL)),
    _Rule("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,255}" + _TAIL)),
    _Rule("openrouter_key", re.compile(r"\bsk-or-[A-Za-z0-9_\-]{20,255}" + _TAIL)),
    _Rule(
        "openai_key",
        re.compile(r"\bsk-(?!ant-|or-)[A-Za-z0-9_\-]{20,255}" + _TAIL),
        check=_has_digit,
    ),
    _Rule("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}" + _TAIL)),
    _Rule("mentis_token", re.compile(r"\bmentis_[0-9a-f]{12}_[A-Za-z0-9_\-]{32,255}" + _TAIL)),
    _Rule("sendgrid_key", re.compile(r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}" + _TAIL)),
    _Rule("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}" + _TAIL)),
    _Rule("pypi_token", re.compile(r"\bpypi-AgE[A-Za-z0-9_\-]{50,}")),
    _Rule("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{34,40}" + _TAIL)),
    _Rule("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    _Rule(
        "url_password",
        re.compile(
            r"(?i)\b([a-z][a-z0-9+.\-]{0,20}://)([^\s:/?#@\"'<>\[\]]{1,256}):([^\s/?#@\"'<>]{1,256})@"
        ),
        group=3,
        check=_not_redacted,
    ),
    _Rule(
        "bearer_token",
        re.compile(
            r"(?i)\bauthorization[\"']?\s{0,5}[:=]\s{0,5}[\"']?(?:bearer|basic|token)\s{1,5}"
            r"([A-Za-z0-9._~+/\-]{8,}=*)"
        ),
        group=1,
    ),
    _Rule(
        "bearer_token",
        re.compile(r"(?i)\bbearer\s{1,5}([A-Za-z0-9._~+/\-]{20,}=*)"),
        group=1,
        check=_bare_bearer,
    ),
    _Rule(
        "secret_assignment",
        re.compile(
            r"(?i)((?:password|passwd|passphrase|pwd|secret|token|api[_\-]?key|apikey|access[_\-]?key"
            r"|auth[_\-]?key|credential|creds|db[_\-]?pass|database[_\-]?pass)[A-Za-z0-9_\-]{0,20})"
            r"[\"']?\s{0,5}(?:=|:=|=>|:)\s{0,5}[\"']?([A-Za-z0-9+/=_.~!@#$%^&*\-]{16,512})"
        ),
        group=2,
        check=_high_entropy_value,
    ),
    _Rule(
        "azure_storage_key",
        re.compile(r"(?i)\b(?:Account|SharedAccess)Key=([A-Za-z0-9+/]{40,86}={0,2})(?![A-Za-z0-9+/=])"),
        group=1,
    ),
    _Rule(
        "netrc_password",
        re.compile(
            r"\bmachine[ \t]+\S+[ \t\r\n]+(?:(?:login|account|port)[ \t]+\S+[ \t\r\n]+){0,3}"
            r"password[ \t]+(\S{1,512})"
        ),
        group=1,
        check=_last_group_literal,
    ),
    _Rule(
        "mysql_password",
        re.compile(
            r"\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb|mariadb-dump)"
            r"(?![\w-])[^\n]{0,300}?[ \t]-p"
            r"(?:'([^'\n]{1,512})'|\"([^\"\n]{1,512})\"|([^\s'\"\-][^\s'\"]{0,511}))"
        ),
        group=(1, 2, 3),
        check=_last_group_literal,
    ),
    _Rule(
        "curl_user_password",
        re.compile(
            r"\bcurl(?![\w-])[^\n]{0,500}?[ \t](?:-u|--user)(?:=|[ \t]{0,5})[\"']?[^\s:\"']{1,256}:"
            r"([^\s\"']{1,512})"
        ),
        group=1,
        check=_last_group_literal,
    ),
    _Rule(
        "cli_secret_flag",
        re.compile(
            r"(?i)(?<![\w-])--?(?:[a-z0-9]{1,30}-){0,4}(?:password|passwd|passphrase|secret|token|api-?key"
            r"|access-key)(?:=|[ \t]{1,5})(?:\"([^\"\n]{1,512})\"|'([^'\n]{1,512})'|([^\s'\"]{1,512}))"
        ),
        group=(1, 2, 3),
        check=_flag_value,
    ),
    _Rule(
        "env_secret",
        re.compile(
            r"(?<![A-Za-z0-9_$])(?:(?:[A-Z][A-Z0-9]{0,30}_){1,6}(?:PASS|PWD)|(?:[A-Z][A-Z0-9]{0,30}_){0,6}"
            r"(?:PASSWORD|PASSWD|PASSPHRASE|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|SECRET_?KEY|PRIVATE_?KEY"
            r"|AUTH_?KEY|ACCOUNT_?KEY|CLIENT_?KEY|CREDENTIALS?))"
            r"=(?:\"([^\"\n]{1,512})\"|'([^'\n]{1,512})'|([^\s\"'`;&|)]{1,512}))"
        ),
        group=(1, 2, 3),
        check=_last_group_literal,
    ),
)

_PEM_BEGIN = re.compile(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")


def _pem_blocks(text: str) -> list[Finding]:
    found: list[Finding] = []
    pos = 0
    while (begin := _PEM_BEGIN.search(text, pos)) is not None:
        end = _PEM_END.search(text, begin.end())
        stop = len(text) if end is None else end.end()
        found.append(Finding(begin.start(), stop, "private_key"))
        pos = stop
    return found


_DOCUMENT_BREAK = re.compile(r"(?m)^---[ \t]*$")
_SECRET_KIND = re.compile(r"""(?m)^[ \t\-]*["']?kind["']?[ \t]*:[ \t]*["']?Secret["']?[ \t]*,?[ \t]*\r?$""")
_YAML_DATA = re.compile(r"(?m)^([ \t\-]*)(?:data|stringData):[ \t]*\r?$")
_YAML_KEY = re.compile(r"[ \t]*[\w.\-]{1,253}:(?:[ \t]+|$)")
_YAML_NOT_VALUES = frozenset({"", "|", "|-", "|+", ">", ">-", ">+", '""', "''"})
_JSON_DATA = re.compile(r'"(?:data|stringData)"\s{0,20}:\s{0,20}\{([^{}]{0,1048576})\}')
_JSON_VALUE = re.compile(r'"[^"\\\n]{1,253}"\s{0,20}:\s{0,20}"([^"\\\n]{1,65536})"')


def _yaml_data_values(text: str, data: re.Match[str], stop: int) -> tuple[list[Finding], int]:
    """The values of the YAML map opened by ``data`` (a ``data:`` line): every line indented
    deeper, each after its ``key:`` (a block scalar's lines whole); and where the map ends."""
    found: list[Finding] = []
    indent = len(data.group(1))
    pos = data.end() + 1
    while pos < stop:
        end = text.find("\n", pos, stop)
        end = stop if end < 0 else end
        line = text[pos:end].rstrip("\r")
        content = line.lstrip(" \t")
        if content:
            if len(line) - len(content) <= indent:
                break
            key = _YAML_KEY.match(line)
            start = pos + (key.end() if key else len(line) - len(content))
            value = text[start : pos + len(line)].rstrip()
            if value not in _YAML_NOT_VALUES:
                found.append(Finding(start, start + len(value), "kubernetes_secret"))
        pos = end + 1
    return found, pos


def _kubernetes_secrets(text: str) -> list[Finding]:
    """The values under ``data:``/``stringData:`` of each YAML or JSON document that is a
    Kubernetes ``kind: Secret`` (base64 or plain, every key; after gitleaks' kubernetes-secret-yaml)."""
    if "Secret" not in text:
        return []
    found: list[Finding] = []
    bounds = [0, *(m.end() for m in _DOCUMENT_BREAK.finditer(text)), len(text)]
    for start, stop in itertools.pairwise(bounds):
        if _SECRET_KIND.search(text, start, stop) is None:
            continue
        reach = start
        for data in _YAML_DATA.finditer(text, start, stop):
            if data.start() >= reach:  # not inside a map already read
                values, reach = _yaml_data_values(text, data, stop)
                found += values
        for data in _JSON_DATA.finditer(text, start, stop):
            for value in _JSON_VALUE.finditer(text, data.start(1), data.end(1)):
                if value.group(1):
                    found.append(Finding(value.start(1), value.end(1), "kubernetes_secret"))
    return found


def find_secrets(text: str) -> list[Finding]:
    """Every non-overlapping stretch of ``text`` that looks like a secret, in text order."""
    candidates: list[tuple[int, int, int, Finding]] = []
    for priority, rule in enumerate(_RULES):
        for match in rule.pattern.finditer(text):
            if rule.check is not None and not rule.check(text, match):
                continue
            start, end = rule.span(match)
            candidates.append((start, -(end - start), priority, Finding(start, end, rule.kind)))
    for finding in _pem_blocks(text):
        candidates.append((finding.start, -(finding.end - finding.start), -1, finding))
    for finding in _kubernetes_secrets(text):
        candidates.append((finding.start, -(finding.end - finding.start), -1, finding))
    candidates.sort()
    kept: list[Finding] = []
    reach = 0
    for _, _, _, finding in candidates:
        if finding.start >= reach:
            kept.append(finding)
            reach = finding.end
    return kept


def scrub(text: str) -> tuple[str, list[Finding]]:
    """``text`` with each secret replaced by ``[REDACTED:<kind>]``, and the findings (spans in ``text``)."""
    findings = find_secrets(text)
    if not findings:
        return text, findings
    parts: list[str] = []
    pos = 0
    for finding in findings:
        parts.append(text[pos : finding.start])
        parts.append(f"[REDACTED:{finding.kind}]")
        pos = finding.end
    parts.append(text[pos:])
    return "".join(parts), findings


def scrub_text(text: str) -> str:
    """:func:`scrub` without the findings."""
    return scrub(text)[0]


def describe(findings: Sequence[Finding]) -> str:
    """A one-line summary that names kinds, never values: ``"2 possible secrets (jwt, url_password)"``."""
    kinds = sorted({f.kind for f in findings})
    noun = "possible secret" if len(findings) == 1 else "possible secrets"
    return f"{len(findings)} {noun} ({', '.join(kinds)})"


__all__ = [
    "MIN_ENTROPY",
    "MIN_SECRET_LENGTH",
    "Finding",
    "describe",
    "find_secrets",
    "scrub",
    "scrub_text",
    "shannon_entropy",
]
