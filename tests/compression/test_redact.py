"""Secret redaction (R-C3/R-C4 and every text that leaves a conversation): shapes, context phrasings, negatives."""

from __future__ import annotations

import pytest

from agent.compression.redact import REDACTED, redact_secrets
from bench._redaction_corpus import negatives, positives
from bench.redaction import TARGET_FP, TARGET_RECALL, leaked

SECRETS = [
    "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx1234",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "glpat-Ab12Cd34Ef56Gh78Ij90",
    "AKIAIOSFODNN7EXAMPLE",
    "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
    "xoxb-123456789012-abcdefghijkl",
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "rk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "MTIzNDU2Nzg5MDEyMzQ1Njc4OQ.GhIjKl.abcdefghijklmnopqrstuvwxyz0123456789",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_known_token_shapes_are_redacted(secret: str) -> None:
    out = redact_secrets(f"use {secret} here")
    assert secret not in out and REDACTED in out and out.startswith("use ") and out.endswith(" here")


@pytest.mark.parametrize("secret", SECRETS)
def test_shapes_at_the_edges_of_the_text(secret: str) -> None:
    assert redact_secrets(secret) == REDACTED or secret not in redact_secrets(secret)
    assert secret not in redact_secrets(f"({secret})") and secret not in redact_secrets(f'"{secret}"')


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("password=hunter2secret", "password="),
        ('"api_key": "abcd1234efgh"', '"api_key": "'),
        ("Authorization: Bearer abc.def.ghijklmnop", "Authorization: Bearer "),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_access_key = "),
        ("postgres://admin:s3cretpw@db.local/app", "postgres://admin:"),
        ("redis://:s3cretpw@cache:6379/0", "redis://:"),
        ("PGPASSWORD=Zz9kq2x psql", "PGPASSWORD="),
        ("https://api.example.com/v1?access_token=Zk3L9qP2mX7vB4nR", "https://api.example.com/v1?access_token="),
    ],
)
def test_keyed_secrets_keep_their_key(text: str, kept: str) -> None:
    out = redact_secrets(text)
    assert out.startswith(kept) and REDACTED in out
    for fragment in ("hunter2", "s3cretpw", "wJalr", "Zz9kq2x", "Zk3L9qP2", "abcd1234"):
        assert fragment not in out


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("my password is Tr0ub4dor&3", "Tr0ub4dor&3"),
        ("my password is swordfish", "swordfish"),
        ("the password was Hunter22 until Monday", "Hunter22"),
        ("login with user admin / S3cret!pw", "S3cret!pw"),
        ("my AWS secret key is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        ("psql -h db -U app -W Xy7pq9zz appdb", "Xy7pq9zz"),
        ("mysql -u root -pS3cr3tPw shop", "S3cr3tPw"),
        ("docker login -u ci --password Qw3rty!x registry", "Qw3rty!x"),
        ("curl -u bob:pa55word https://example.com", "pa55word"),
        ("passwd Kx9mP2qZ", "Kx9mP2qZ"),
        ("the token is 9f8e7d6c5b4a39281706f5e4d3c2b1a0 keep it", "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
        ("我的密码是hunter2，别告诉别人", "hunter2"),
        ("数据库密码：Abc12345", "Abc12345"),
        ("口令 Zx81!kq", "Zx81!kq"),
        ("这是密钥 wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY 请保存", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        ("机器人令牌为 aB3dE6gH9jK2mN5pQ8sT", "aB3dE6gH9jK2mN5pQ8sT"),
    ],
)
def test_context_phrasings_in_english_chinese_and_command_lines(text: str, secret: str) -> None:
    out = redact_secrets(text)
    assert secret not in out and REDACTED in out, out


def test_private_key_block_is_redacted_whole() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----"
    assert redact_secrets(f"key:\n{pem}\ndone") == f"key:\n{REDACTED}\ndone"
    assert redact_secrets("cut off: -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA") == f"cut off: {REDACTED}"


@pytest.mark.parametrize("text", negatives(images=3))
def test_ordinary_text_survives(text: str) -> None:
    assert redact_secrets(text) == text


def test_redaction_is_idempotent_and_empty_text_is_fine() -> None:
    assert redact_secrets("") == ""
    for planted in positives(per_kind=1)[::7]:
        once = redact_secrets(planted.text)
        assert redact_secrets(once) == once


def test_labelled_corpus_meets_the_recall_and_false_positive_targets() -> None:
    lines = positives()
    missed = [p for p in lines if leaked(p, redact_secrets(p.text))]
    assert 1 - len(missed) / len(lines) >= TARGET_RECALL, [(p.kind, p.phrasing) for p in missed[:10]]
    kept = negatives()
    changed = [line[:80] for line in kept if redact_secrets(line) != line]
    assert len(changed) / len(kept) <= TARGET_FP, changed
