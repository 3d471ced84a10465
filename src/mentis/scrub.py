"""The secret scrubber: every text that leaves the machine passes :func:`scrub` first (DESIGN §8).

:func:`find_secrets` reports what looks like a secret as a :class:`Finding` (a kind and a span,
never the secret itself); :func:`scrub` replaces each finding with ``[REDACTED:<kind>]``.

What is found, by kind:

- provider tokens with a recognisable prefix: ``aws_access_key_id`` (AKIA/ASIA/ABIA/ACCA + 16),
  ``github_token`` (ghp_/gho_/ghu_/ghs_/ghr_, github_pat_), ``gitlab_token`` (glpat-),
  ``slack_token`` (xoxa-/xoxb-/xoxp-/xoxr-/xoxs-), ``stripe_key`` (sk_/rk_ + live_/test_),
  ``anthropic_key`` (sk-ant-), ``openrouter_key`` (sk-or-), ``openai_key`` (sk-, sk-proj-, …;
  at least one digit), ``google_api_key`` (AIza + 35), ``npm_token``, ``pypi_token``,
  ``huggingface_token``;
- ``jwt``: three base64url parts, the first starting ``eyJ``;
- ``private_key``: a PEM ``-----BEGIN … PRIVATE KEY-----`` block up to its END line (an
  unterminated block is redacted to the end of the text);
- ``url_password``: the password of ``scheme://user:password@host`` (the user is kept);
- ``bearer_token``: the credential of an ``Authorization: Bearer|Basic|Token …`` header, and a
  bare ``Bearer <token>`` of at least 20 characters holding a digit;
- ``aws_secret_access_key``: 40 base64 characters assigned to ``aws_secret_access_key``;
- ``secret_assignment``: a value assigned (``=``, ``:``, ``:=``, ``=>``) to a name containing
  password, passwd, pwd, secret, token, api_key/apikey, access_key, auth_key or credential, when
  the value is at least :data:`MIN_SECRET_LENGTH` (16) characters of ``[A-Za-z0-9+/=_.~!@#$%^&*-]``,
  holds a letter and a digit, and has a Shannon entropy of at least :data:`MIN_ENTROPY` (3.5)
  bits per character. Random base64/hex secrets of 16+ characters score 3.5-5.5; identifiers and
  English words rarely hold a digit and score lower. Names ending ``_id``, ``_path``, ``_url``,
  ``_count`` … (see ``_NOT_SECRET_SUFFIXES``) are skipped, as are values followed by ``(`` or
  ``[`` (a call or an index, not a literal). Short passwords (``password=hunter2``) are not found:
  below 16 characters ordinary code (``password: Optional``) cannot be told apart.

Git SHAs, UUIDs, sha256 digests, file paths and stack traces are not flagged unless they are
the value of a secret-named assignment. Every pattern is precompiled and has no nested
quantifier, so the scan is linear in the text (PEM blocks are found with ``str.find``).
"""

from __future__ import annotations

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
    group: int = 0  # the part of the match that is the secret
    check: _Check | None = None


def _has_digit(text: str, match: re.Match[str]) -> bool:
    return any(c.isdigit() for c in match.group(0))


def _bare_bearer(text: str, match: re.Match[str]) -> bool:
    value = match.group(1)
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _not_redacted(text: str, match: re.Match[str]) -> bool:
    return not match.group(3).startswith("[REDACTED:")


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
            r"(?i)((?:password|passwd|pwd|secret|token|api[_\-]?key|apikey"
            r"|access[_\-]?key|auth[_\-]?key|credential)[A-Za-z0-9_\-]{0,20})"
            r"[\"']?\s{0,5}(?:=|:=|=>|:)\s{0,5}[\"']?([A-Za-z0-9+/=_.~!@#$%^&*\-]{16,512})"
        ),
        group=2,
        check=_high_entropy_value,
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


def find_secrets(text: str) -> list[Finding]:
    """Every non-overlapping stretch of ``text`` that looks like a secret, in text order."""
    candidates: list[tuple[int, int, int, Finding]] = []
    for priority, rule in enumerate(_RULES):
        for match in rule.pattern.finditer(text):
            if rule.check is not None and not rule.check(text, match):
                continue
            start, end = match.span(rule.group)
            candidates.append((start, -(end - start), priority, Finding(start, end, rule.kind)))
    for finding in _pem_blocks(text):
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
