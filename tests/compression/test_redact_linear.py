"""The redactor's rules take time linear in the text: the rules rewritten for that find exactly what their plain
form found, and the texts that made the plain form quadratic (a long base64 run near a "-----END ", a
password cue in Chinese followed by thousands of blanks) are redacted at once.

The plain forms below are the rules as they were before the rewrite: a reference, small inputs only.
"""

from __future__ import annotations

import os
import random
import re
import string
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.compression.redact import redact_secrets
from agent.compression.secret_rules import RULES

EXAMPLES = int(os.environ.get("CONCORD_HYPOTHESIS_EXAMPLES", "300"))
RULE = {rule.name: rule for rule in RULES}

PLAIN_PEM_TAIL = re.compile(
    r"(?:[A-Za-z0-9+/=]{16,}[ \t]*\r?\n)+-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----", re.ASCII)
_PLAIN_ZH_SEP = r"(?P<sep>\s*(?:(?:是|为|改成|改为|设为|设置为|换成|换为)\s*[:：]?|[:：=＝])?\s*)"
_ZH_SEP_NOW = r"(?P<sep>\s*+(?:(?:是|为|改成|改为|设为|设置为|换成|换为)\s*+(?:[:：]\s*+)?|[:：=＝]\s*+)?)"

_BASE64 = string.ascii_letters + string.digits + "+/="
# Pieces that make lines of base64, short runs, blanks and line ends, and END lines of several kinds.
_PEM_PIECES = st.sampled_from([
    "QUJD", "ZGVmZ2hpamtsbW5vcA==", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "a", "+/", "=", " ", "\t", "\n", "\r\n",
    "key: ", "-", "-----END RSA PRIVATE KEY-----", "-----END PRIVATE KEY-----", "-----END CERTIFICATE-----",
    "-----END OPENSSH PRIVATE KEY-----\n", "-----END EC PRIVATE KEY BLOCK-----", "x-----END ",
])
_ZH_PIECES = st.sampled_from([
    "密码", "口令", "登录密码", "是", "为", "改成", "设置为", ":", "：", "=", "＝", " ", "\t", "\n", "  ", "\"", "「",
    "Hunter22", "abc", "s3cr3t!#", ".", "x", "密码是", "密码：",
])


def _spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int, dict[str, str | None]]]:
    return [(m.start(), m.end(), m.groupdict()) for m in pattern.finditer(text)]


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(_PEM_PIECES, max_size=40).map("".join))
def test_the_pem_tail_rule_finds_what_its_plain_form_found(text: str) -> None:
    assert _spans(RULE["pem_private_key_tail"].pattern, text) == _spans(PLAIN_PEM_TAIL, text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(_ZH_PIECES, max_size=30).map("".join))
def test_the_chinese_cue_rule_finds_what_its_plain_form_found(text: str) -> None:
    rule = RULE["chinese_cue"].pattern
    assert _ZH_SEP_NOW in rule.pattern  # the reference below is built from the rule as it is
    plain = re.compile(rule.pattern.replace(_ZH_SEP_NOW, _PLAIN_ZH_SEP), rule.flags)
    assert _spans(rule, text) == _spans(plain, text)


def test_a_wrapped_private_key_tail_is_still_redacted_whole() -> None:
    body = "\n".join(["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"] * 3)
    text = f"the file ends with\n{body}\n-----END PRIVATE KEY-----\nand that is all"
    redacted = redact_secrets(text)
    assert "MIIEvQ" not in redacted and redacted.startswith("the file ends with\n") and "that is all" in redacted


def _base64(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(_BASE64) for _ in range(n))


def _wrapped(text: str, width: int = 76) -> str:
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))


@pytest.mark.parametrize("text", [
    pytest.param("-----END CERTIFICATE-----\n" + _base64(80_000, 1), id="one base64 line after an END line"),
    pytest.param(_wrapped(_base64(80_000, 2)) + "\n-----END CERTIFICATE-----\n",
                 id="a wrapped base64 file before a certificate's END"),
    pytest.param("密码" + " " * 40_000 + "\n口令是" + "\t" * 40_000, id="password cues followed by blanks"),
])
def test_texts_that_were_quadratic_are_redacted_at_once(text: str) -> None:
    # A hang guard, not a speed goal: the plain rules took 2.5 minutes on the first two and 19 s on the third
    # (quadratic in the length); linear takes milliseconds, so the bound is far from both.
    started = time.perf_counter()
    assert redact_secrets(text) == text
    assert time.perf_counter() - started < 10.0
