"""Secret redaction for text that goes to or comes from the summary model (R-C3, R-C4).

Applied twice: to the serialized middle before the summary call, and to the model's output, because a
summary is re-sent on every later request and may be persisted; a key that slipped in would live forever.
Patterns aim at high-signal shapes (known token prefixes, ``key=value`` with secret-like key names, PEM
blocks) so ordinary prose and code survive.
"""

from __future__ import annotations

import re

__all__ = ["REDACTED", "redact_secrets"]

REDACTED = "[REDACTED]"

# Whole-match patterns: the entire match is a secret.
_WHOLE = [
    # PEM private keys, possibly truncated at the end of a message.
    re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S),
    # OpenAI / Anthropic / OpenRouter style keys.
    re.compile(r"\bsk-(?:ant-|proj-|or-)?[A-Za-z0-9_\-]{16,}"),
    # GitHub tokens (classic prefixes and fine-grained PATs).
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{22,})"),
    # AWS access key ids.
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    # Telegram bot tokens: numeric bot id, colon, 35-char secret.
    re.compile(r"\b\d{6,12}:[A-Za-z0-9_\-]{30,}"),
    # Slack tokens.
    re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    # Google API keys.
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    # JSON web tokens.
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    # Discord bot tokens: base64 user id . timestamp . hmac.
    re.compile(r"\b[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}\b"),
]

# Prefix-keeping patterns: group 1 is kept, the rest of the match is the secret.
_KEYED = [
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/\-]{8,}=*"),
    re.compile(r"(?i)(\bbasic\s+)[A-Za-z0-9+/]{12,}=*"),
    # key = value / key: value / "key": "value" for secret-like key names.
    re.compile(
        r"(?i)(\b(?:password|passwd|pwd|passphrase|secret|client[_-]?secret|api[_-]?key|apikey|access[_-]?key|"
        r"secret[_-]?key|aws_secret_access_key|auth[_-]?token|access[_-]?token|refresh[_-]?token|token|"
        r"private[_-]?key|x-api-key|authorization)[\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED\]|(?:bearer|basic)\s)[^\s\"',;}&]{4,}"
    ),
    # Credentials embedded in URLs: scheme://user:password@host
    re.compile(r"(\b[a-z][a-z0-9+.\-]*://[^\s:/@]+:)[^\s@/]{3,}(?=@)"),
]


def redact_secrets(text: str) -> str:
    """Replace API keys, tokens, passwords and private keys in ``text`` with ``[REDACTED]``."""
    if not text:
        return text
    for pattern in _WHOLE:
        text = pattern.sub(REDACTED, text)
    for pattern in _KEYED:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    return text
