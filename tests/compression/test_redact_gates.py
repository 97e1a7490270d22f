"""The fast redactor (literal gates, prefilters, anchored cue scans) gives exactly what every rule gives.

`redact_ungated` applies every rule with a plain scan, in order; `redact_secrets` skips rules whose gates are
absent and tries anchored rules only where a cue starts. Any difference means a gate or an anchor is unsound.
Checked on generated text built from cue words, separators, planted secrets and odd Unicode (case-folding
traps such as 'K' (Kelvin) and 'ſ'), with secrets at both ends of the string and overlapping shapes, and on
the labelled corpus plus a sample of the real one.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.compression import secret_gates
from agent.compression.redact import redact_secrets
from agent.compression.secret_gates import gates_present
from agent.compression.secret_rules import RULES, fold_ascii
from bench._redaction_corpus import negatives, planted_secrets, positives
from bench.corpus import corpus_dir, iter_transcripts
from bench.redaction import redact_ungated

EXAMPLES = int(os.environ.get("CONCORD_HYPOTHESIS_EXAMPLES", "300"))

_GATES = sorted({gate for rule in RULES for gate in rule.gates})
_SECRETS = [secret for _, secret in planted_secrets(per_kind=1)]
_SEPARATORS = [" ", "=", ": ", " is ", " was ", "\n", "/", " / ", " -p", " -W ", " --password ", "://", "@", "：",
               "是", '"', "'", "(", ")", ",", ".", "?token=", "&key=", "Bearer ", "Basic dXNlcjpwYXNz", "[REDACTED]"]
_ODD = ["\u212a", "\u017f", "İ", "ß", "ǅ", "Ω", "ﬁ", "密码", "令牌", "🙂", "\u00a0", "\u3000", "\t"]


def _cased(word: str, flips: list[bool]) -> str:
    return "".join(c.upper() if flip else c for c, flip in zip(word, flips + [False] * len(word), strict=False))


fragment = st.one_of(
    st.builds(_cased, st.sampled_from(_GATES), st.lists(st.booleans(), max_size=12)),
    st.sampled_from(_SEPARATORS),
    st.sampled_from(_SECRETS),
    st.sampled_from(_ODD),
    st.text(max_size=12),
    st.text(alphabet="abcdefABCDEF0123456789+/=_-", min_size=8, max_size=44),
)
generated = st.lists(fragment, max_size=14).map("".join)


@settings(max_examples=EXAMPLES, deadline=None)
@given(generated)
def test_gated_equals_ungated_on_generated_text(text: str) -> None:
    assert redact_secrets(text) == redact_ungated(text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.sampled_from(_SECRETS), st.sampled_from([*_GATES, "", "my password is "]), st.text(max_size=6))
def test_secrets_at_the_string_boundaries(secret: str, cue: str, tail: str) -> None:
    for text in (secret, cue + secret, secret + tail, tail + secret, cue + secret + tail):
        assert redact_secrets(text) == redact_ungated(text)


@pytest.mark.parametrize("text", [
    "password=sk-proj-AbCdEfGhIjKlMnOpQrStUvWx1234",
    "https://user:ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/?token=Zk3L9qP2mX7vB4nR",
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "登录密码是password=Hunter22 / 令牌 token: xoxb-123456789012-abcdefghijkl",
    "psql -W --password=pw1 -p 5432 'postgres://a:b@c' key=AKIAIOSFODNN7EXAMPLE",
])
def test_overlapping_shapes(text: str) -> None:
    assert redact_secrets(text) == redact_ungated(text)


def test_fold_ascii_keeps_every_position() -> None:
    text = "İK\u212a\u017fß Ω PASSWORD 密码 🙂"
    folded = fold_ascii(text)
    assert len(folded) == len(text)
    assert folded == "".join(c.lower() if c.isascii() else c for c in text)


def test_labelled_and_real_corpus_lines() -> None:
    lines = [p.text for p in positives(per_kind=1)] + negatives(images=3)
    root = corpus_dir()
    if root is not None:  # a fixed sample of real messages: every 40th
        texts = [str(m.get("content") or "") for t in iter_transcripts(root) for m in t.messages]
        lines += texts[::40]
    for line in lines:
        assert redact_secrets(line) == redact_ungated(line), line[:120]


@pytest.mark.parametrize("one_pass", [pytest.param(True, marks=pytest.mark.skipif(
    secret_gates._HYPERSCAN is None, reason="hyperscan is not available on this machine")), False],
    ids=["hyperscan", "aho-corasick"])
def test_the_gate_scan_finds_every_gate_of_every_rule(one_pass: bool) -> None:
    for index, rule in enumerate(RULES):
        for gate in rule.gates:
            text = f"a {gate.upper() if rule.folded else gate}b"
            assert gate in gates_present(text, one_pass=one_pass).get(index, ()), (rule.name, gate)
    assert gates_present("nothing to see here", one_pass=one_pass) == {}


@pytest.mark.skipif(secret_gates._HYPERSCAN is None, reason="hyperscan is not available on this machine")
@settings(max_examples=EXAMPLES, deadline=None)
@given(generated)
def test_both_gate_scans_find_the_same_gates(text: str) -> None:
    assert gates_present(text, one_pass=True) == gates_present(text, one_pass=False)
