"""Redaction of recognisable secrets before anything is stored (history, memory, archive, search index).

Two kinds of evidence: substrings shaped like credentials (provider API keys, bearer tokens, JWTs, cloud
keys, PEM private keys), and values introduced as secrets (``password: hunter2``, ``api_key=...``,
``"token": "..."``). Redaction keeps the words around a secret, so the text stays readable and searchable.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[REDACTED]"

_SHAPES: tuple[re.Pattern[str], ...] = (
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
    re.compile(r"\bsk-(?:ant-|proj-|or-)?[A-Za-z0-9_\-]{16,}"),  # OpenAI, Anthropic, OpenRouter
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),  # JWT
    re.compile(r"\bmh_[0-9a-f]{12}_[A-Za-z0-9_\-]{20,}"),  # MiniHermes API keys
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}"),  # GitHub
    re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"),  # GitLab
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),  # Slack
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),  # Google
    re.compile(r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),  # Stripe
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),  # Hugging Face
)
_SHAPE = re.compile("|".join(f"(?:{p.pattern})" for p in _SHAPES), re.S)
"""Every credential shape in one pattern: one scan of the text instead of one per shape."""
_BEARER = re.compile(r"(?i)\b(bearer|basic|token)\s+(?!\[REDACTED\])[A-Za-z0-9._~+/=\-]{12,}")
_NAMES = (
    r"pass(?:word|wd|phrase)?|pwd|secret|client[_\- ]?secret|api[_\- ]?key|apikey|x-api-key|"
    r"access[_\- ]?token|auth[_\- ]?token|refresh[_\- ]?token|private[_\- ]?key|token|credentials?"
)
# "password: hunter2", "api_key=abc", '"token": "abc"', "password is hunter2".
_ASSIGNED = re.compile(
    rf"(?i)(?P<name>\b(?:[A-Za-z]+[_\-])?(?:{_NAMES})\b[\"']?\s*(?:[:=]|\bis\b)\s*)"
    r"(?P<quote>[\"']?)(?P<value>(?!\[REDACTED\])[^\s\"',;}]{4,})"
)
_SECRET_KEY = re.compile(rf"(?i)^(?:[A-Za-z]+[_\-])?(?:{_NAMES})$|(?:_api_key|_secret|_password|_token)$")


_HINTS = (
    # One substring every match of a pattern above must contain, case-folded (the credential shapes in
    # order, then the bearer words, then what every name in _NAMES contains).
    "-----begin", "sk-", "eyj", "mh_", "akia", "asia", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "glpat-", "xox", "aiza", "_live_", "_test_", "hf_",
    "bearer", "basic", "token",
    "pass", "pwd", "secret", "api", "key", "credential",
)  # fmt: skip
_HINT = re.compile("|".join(map(re.escape, _HINTS)))


def may_hold_secret(text: str) -> bool:
    """False when no pattern of ``redact_text`` can match: one scan for a few literals instead of three
    regex scans, for the common text with nothing to redact. Folded as ``re.IGNORECASE`` compares letters:
    besides case, U+212A (Kelvin sign) is k, U+017F (long s) is s, U+0130 and U+0131 (dotted and dotless
    I) are i."""
    folded = text.casefold()
    if not folded.isascii():
        folded = folded.replace("\u0307", "").replace("\u0131", "i")  # U+0130 folds to i + U+0307
    return _HINT.search(folded) is not None


def redact_text(text: str) -> str:
    """``text`` with every recognisable secret replaced by ``[REDACTED]``."""
    if not text or not may_hold_secret(text):
        return text
    text = _SHAPE.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return _ASSIGNED.sub(lambda m: f"{m.group('name')}{m.group('quote')}{REDACTED}", text)


def redact(value: Any, _depth: int = 0) -> Any:
    """A copy of a JSON value with secrets redacted: in every string, and whole values under secret-named
    keys (``password``, ``api_key``, ``*_token``, ...)."""
    if isinstance(value, str):
        return redact_text(value)
    if _depth > 32:
        return "[TRUNCATED]"
    if isinstance(value, dict):
        return {
            k: REDACTED
            if isinstance(k, str) and _SECRET_KEY.search(k) and isinstance(v, str | int | float) and v != ""
            else redact(v, _depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v, _depth + 1) for v in value]
    return value


def contains_secret(text: str) -> bool:
    return redact_text(text) != text


_SHAPE_KINDS = (
    "PEM private key",
    "LLM provider API key",
    "JWT",
    "MiniHermes API key",
    "AWS access key id",
    "GitHub token",
    "GitLab token",
    "Slack token",
    "Google API key",
    "Stripe key",
    "Hugging Face token",
)
"""What each of ``_SHAPES`` is, in the same order (what ``secret_kinds`` names)."""


def secret_kinds(text: str) -> list[str]:
    """The kinds of secret ``redact_text`` would redact in ``text``, each once, in a fixed order: a
    credential's shape (``"GitHub token"``), ``"bearer token"``, or ``"value of <name>"`` for a value
    introduced as a secret (``password: ...``). Never the secret itself: for warnings that say what was
    found and where without repeating it."""
    if not text or not may_hold_secret(text):
        return []
    kinds = [kind for kind, shape in zip(_SHAPE_KINDS, _SHAPES, strict=True) if shape.search(text)]
    rest = _SHAPE.sub(REDACTED, text)
    if _BEARER.search(rest):
        kinds.append("bearer token")
    for m in _ASSIGNED.finditer(_BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", rest)):
        name = re.split(r"[\s\"':=]", m.group("name").strip(), maxsplit=1)[0].lower()
        kind = f"value of {name}"
        if kind not in kinds:
            kinds.append(kind)
    return kinds
