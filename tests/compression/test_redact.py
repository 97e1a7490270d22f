"""Secret redaction (R-C3/R-C4: before the summary call and after)."""

from __future__ import annotations

import pytest

from agent.compression.redact import REDACTED, redact_secrets

SECRETS = [
    "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx1234",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "AKIAIOSFODNN7EXAMPLE",
    "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
    "xoxb-123456789012-abcdefghijkl",
    "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_known_token_shapes_are_redacted(secret: str) -> None:
    out = redact_secrets(f"use {secret} here")
    assert secret not in out and REDACTED in out and out.startswith("use ")


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("password=hunter2secret", "password="),
        ('"api_key": "abcd1234efgh"', '"api_key": "'),
        ("Authorization: Bearer abc.def.ghijklmnop", "Authorization: Bearer "),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = "),
        ("postgres://admin:s3cretpw@db.local/app", "postgres://admin:"),
    ],
)
def test_keyed_secrets_keep_their_key(text: str, kept: str) -> None:
    out = redact_secrets(text)
    assert out.startswith(kept) and REDACTED in out
    assert "hunter2" not in out and "s3cretpw" not in out and "wJalr" not in out


def test_private_key_block_is_redacted_whole() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----"
    assert redact_secrets(f"key:\n{pem}\ndone") == f"key:\n{REDACTED}\ndone"


def test_ordinary_text_survives() -> None:
    text = "Ran `pytest -q` in /srv/app: 12 passed; the token budget is 2,000 and the password policy is strict."
    assert redact_secrets(text) == text
    assert redact_secrets("") == ""
