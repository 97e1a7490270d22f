"""The one-pass gates give exactly the facts every finder gives, and each message's facts are found once.

`_text_facts` with the gates found by hyperscan must equal `_text_facts` with every finder run (what the
extractor does without hyperscan, and did before the gates): checked on text generated from the patterns'
own alphabets — cue words, error words, units, extensions, digits of other scripts, the case-folding twins
('K' Kelvin, 'ſ', 'İ', 'ı'), Unicode spaces — and on the whole corpus (same facts, same order), where the
cache's facts must also equal freshly found ones.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent.compression import evidence, fact_patterns
from agent.compression.evidence import (
    Fact,
    clear_fact_cache,
    extract_facts,
    facts_of_message,
    remember_facts,
)
from agent.compression.fact_patterns import (
    _CASE_TWINS,
    _CUES,
    _ERROR_WORDS,
    _ISSUE_WORDS,
    _UNITS,
    SCANNERS,
    STAGES,
)
from agent.compression.fact_scan import GateScan

EXAMPLES = int(os.environ.get("CONCORD_HYPOTHESIS_EXAMPLES", "300"))
EVERY = frozenset(s.name for s in SCANNERS)
GATES = GateScan(SCANNERS)
pytestmark = pytest.mark.skipif(not GATES.active, reason="hyperscan is not available on this machine")

_WORDS = [*_CUES, *_ERROR_WORDS, *_ISSUE_WORDS, *_UNITS.split("|"), "pull request", "Traceback", "exit code 1",
          "E   ", "npm ERR!", "http://", "https://x.io/a", "src/app.py", "a.PY", "x.Kt", "v1.2", "1.2.3-rc1",
          "OPS-12", "mia_li_3668", "ZFA04Y", "deadbeef1", "0xFF", "[ 30%]", "$", "€", "£", "¥", "#", "##12", "don't",
          "make sure", "I must say", "never mind", "别人", "不要", "只是", "sudo", "$ ls", "./x", "[error]\n",
          "a.c:3:1: error: ", "FAIL: ", "Traceback (most recent call last):\n", "  File", "I'd rather", "don’t", "~/.x",
          "build/", "/testbed", "a/b/c"]
_GLUE = [" ", "", "\n", "\t", ".", "/", "-", "_", ":", ",", "#", "=", "(", ")", "[", "]", "'", '"', "\u00a0",
         "\u3000", "\x1c", "\u2028"]
_ODD = ["\u212a", "\u017f", "İ", "ı", "ß", "٣", "０", "९", "²", "µ", "°", "🙂", "\ud800", "é", "Ω"]
fragment = st.one_of(
    st.sampled_from(_WORDS), st.sampled_from(_GLUE), st.sampled_from(_ODD),
    st.text(alphabet="0123456789abcdefABCDEFXYZ_-./", max_size=14),
    st.integers(0, 10**9).map(str), st.text(max_size=8),
    st.builds(lambda w, flips: "".join(c.swapcase() if f else c for c, f in zip(w, flips + [False] * len(w),
                                                                                 strict=False)),
              st.sampled_from(_WORDS), st.lists(st.booleans(), max_size=10)),
)
generated = st.lists(fragment, max_size=24).map("".join)


def _facts(text: str, present: frozenset[str]) -> list[list[tuple[str, str]]]:
    return [list(evidence._text_facts(text, user, stage, present)) for user in (True, False) for stage in STAGES]


@settings(max_examples=EXAMPLES, deadline=None)
@given(generated)
def test_gated_finders_equal_every_finder_on_generated_text(text: str) -> None:
    assert _facts(text, GATES.present(text)) == _facts(text, EVERY)


@settings(max_examples=EXAMPLES, deadline=None)
@given(generated)
def test_a_finder_whose_gate_is_absent_finds_nothing(text: str) -> None:
    present = GATES.present(text)
    for scanner in SCANNERS:
        if scanner.name not in present:
            assert list(scanner.find(text)) == [], scanner.name


# Sentences shaped like the rules `_EN_RULE` finds: a frame, one of its cue spellings, a word after it; spaces of
# every kind and case flipped.
_RULE_FRAMES = ["", ", ", "; ", "(", "- ", "you ", "We ", "please ", "the team ", "I", "and ", "so ", "it "]
_RULE_CUES = ["must", "mustn't", "must not", "shall not", "should never", "should always", "should not", "shouldn't",
              "always", "never", "don't", "do not", "dont", "only", "prefer", "would prefer", "'d rather",
              "would much rather", "make sure", "be sure", "remember to", "avoid"]
_SPACES = [" ", "  ", "\t", "\x1c", "\x1f", "\u00a0", "\u2028"]
rule_shaped = st.builds(
    lambda frame, cue, after, spaces, flips: "".join(
        (c.swapcase() if flip else c) if c != " " else space
        for c, flip, space in zip(frame + cue + after, flips * 40, spaces * 40, strict=False)),
    st.sampled_from(_RULE_FRAMES), st.sampled_from(_RULE_CUES), st.sampled_from([" use tabs", " push", " ok", ""]),
    st.lists(st.sampled_from(_SPACES), min_size=1, max_size=6), st.lists(st.booleans(), min_size=1, max_size=7))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.one_of(generated, rule_shaped))
@example("You  MUST\x1cuse tabs")
@example("we'd rather\tnot")
@example("do\x1fnot push on Fridays")
@example("Make\u00a0sure it builds")  # (not ASCII: tried whole)
@example("please ALWAYS answer in French")
def test_an_ascii_sentence_the_rule_finder_skips_holds_no_rule(text: str) -> None:
    # The finder skips an ASCII sentence with no cue word: the rule patterns find nothing there.
    if text.isascii() and fact_patterns._ASCII_CUE_RE.search(text.lower()) is None:
        assert fact_patterns._EN_RULE.search(text) is None and fact_patterns._ZH_RULE.search(text) is None


def test_the_case_twins_are_all_the_characters_that_read_as_ascii_letters() -> None:
    # A gate widens each letter of a case-insensitive word with these twins: every other character must be
    # unable to stand for an ASCII letter, under re.IGNORECASE and under str.lower() (which finders use).
    import re

    twins = {twin for group in _CASE_TWINS.values() for twin in group}
    letter = re.compile("[a-z]", re.I)
    for code in range(0x80, sys.maxunicode + 1):
        char = chr(code)
        if 0xD800 <= code < 0xE000:
            continue
        stands_for_letter = letter.fullmatch(char) is not None or any(
            c.isascii() and c.isalpha() for c in char.lower())
        assert not stands_for_letter or char in twins, f"U+{code:04X}"


def test_without_hyperscan_every_finder_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hyperscan", None)  # the import fails, as where no wheel installs
    fallback = GateScan(SCANNERS)
    assert not fallback.active
    assert fallback.present("plain words") == EVERY
    monkeypatch.setattr(evidence, "_GATES", fallback)
    clear_fact_cache()
    facts = facts_of_message({"role": "user", "content": "Never push to main! Edit src/app.py for PR #12."}, 1)
    assert {("constraint", "Never push to main!"), ("path", "src/app.py"), ("id", "PR #12")} <= {
        (f.kind, f.text) for f in facts}


def test_threads_scan_with_their_own_scratch() -> None:
    texts = [f"build {i} failed: Error: exit code {i % 7}\nsee /srv/app/mod_{i}/x.py and v{i}.2.3 " * 40
             for i in range(40)]
    expected = [GATES.present(t) for t in texts]
    results: dict[int, list[frozenset[str]]] = {}

    def scan(worker: int) -> None:
        results[worker] = [GATES.present(t) for t in texts for _ in range(5)][::5]

    threads = [threading.Thread(target=scan, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(found == expected for found in results.values())


def _call(call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps(arguments)}}


def test_a_cached_command_follows_its_result() -> None:
    clear_fact_cache()
    call = {"role": "assistant", "content": "", "tool_calls": [_call("a", command="make test")]}
    ok = facts_of_message(call, 5, {"a": "all good\nexit code 0"})
    failed = facts_of_message(call, 5, {"a": "boom\nexit code 2"})
    assert Fact("command", "make test → exit 0", 5) in ok and Fact("command", "make test → exit 2", 5) in failed


def test_values_found_later_keep_the_order_and_caps_of_one_pass() -> None:
    paths = " ".join(f"src/pkg_{i}/m.py" for i in range(100))
    message = {"role": "assistant", "content": f"Error: bad\n{paths}",
               "tool_calls": [_call("a", command="ls", path="src/pkg_3/m.py")]}
    clear_fact_cache()
    whole = facts_of_message(message, 9)
    clear_fact_cache()
    first = facts_of_message(message, 9, values=False)
    later = facts_of_message(message, 9)
    assert later == whole and first == [f for f in whole if f.kind in ("command", "error")
                                        or f == Fact("path", "src/pkg_3/m.py", 9)]
    assert len([f for f in whole if f.kind == "path"]) == evidence._PER_MESSAGE["path"]


def test_remembered_facts_are_assembled_without_a_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [{"role": "user", "content": "Always run pytest -q before you commit; the API is at https://x.io/v1"},
                {"role": "assistant", "content": "", "tool_calls": [_call("a", command="pytest -q")]},
                {"role": "tool", "tool_call_id": "a", "content": "E   AssertionError: 3 != 4\n1 failed in 0.2s"}]
    clear_fact_cache()
    fresh = extract_facts(messages, lambda i: i + 1)
    clear_fact_cache()
    remember_facts(messages)

    def no_scan(*args: Any) -> Any:
        raise AssertionError("a remembered message was scanned again")

    monkeypatch.setattr(evidence, "_text_facts", no_scan)
    assert extract_facts([dict(m) for m in messages], lambda i: i + 1) == fresh
    assert {f.kind for f in fresh} >= {"constraint", "command", "error", "url"}


def test_the_whole_corpus_gives_the_same_facts_gated_cached_and_ungated(corpus_root: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.corpus import load_all

    transcripts = load_all()
    assert transcripts

    def every(scan_chars: int | None) -> list[list[Fact]]:
        return [extract_facts(t.messages, lambda i: i, scan_chars=scan_chars) for t in transcripts]

    for scan_chars in (None, 20_000):
        clear_fact_cache()
        gated = every(scan_chars)
        cached = every(scan_chars)
        with monkeypatch.context() as patch:
            patch.setattr(evidence._GATES, "present", lambda text: EVERY)
            clear_fact_cache()
            ungated = every(scan_chars)
            # Nor does the rule finder's own gate (an ASCII sentence without a cue word is not tried) lose a rule.
            patch.setattr(fact_patterns, "_ASCII_CUE_RE", re.compile(""))
            clear_fact_cache()
            every_sentence = every(scan_chars)
        assert gated == ungated == every_sentence and cached == ungated
    assert sum(len(facts) for facts in ungated) > 5_000
