"""Patterns rewritten to take time linear in their text find what their plain forms found, and the texts that
made the plain forms quadratic or worse are read at once: the redactor's PEM keys (cut off, or a BEGIN line with no
END), JWTs, URL credentials, Chinese and prose cues, the issue, path and number finders and the error lines of the
evidence ledger, the ledger's section headers in a summary, memory's "remember that …" and its citations, a heading's
closing hashes for Telegram, Ollama's num_ctx, an HTML error body's tags and a summary's reasoning blocks.

The plain forms below are the patterns as they were before the rewrite: a reference, small inputs only. A redaction
rule with a linear `Rule.find` keeps its plain form as its pattern.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
import time
from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from adapters import telegram_format
from agent import memory
from agent.compression import fact_patterns, ledger, summary
from agent.compression.evidence import clear_fact_cache, facts_of_message
from agent.compression.redact import redact_secrets
from agent.compression.secret_rules import RULES, fold_ascii
from agent.llm import classify, window_probe

EXAMPLES = int(os.environ.get("CONCORD_HYPOTHESIS_EXAMPLES", "300"))

PLAIN_ISSUE = re.compile(r"(?i)(?=[pitbm#])(?:\b(?:PR|pull request|issue|ticket|bug|MR)\s*#?\s*\d{1,7}\b|"
                         r"(?<![\w&#])#\d{2,7}\b)")
PLAIN_HEADER = re.compile(r"^\s*#{1,4}\s*\**\s*(.+?)\s*\**\s*:?\s*$")
PLAIN_REMEMBER = re.compile(r"(?im)^\s*(?:please\s+)?remember(?:\s+that)?\s*[:,]?\s+(.{3,500}?)\s*$")
PLAIN_PATH_START = r"(?:(?:~|\.{1,2})?/(?:[\w.+@-]+/)*[\w.+@-]+(?:/[\w.+@-]+)+/?"
PATH_START_NOW = r"(?:(?:~|\.{1,2})?/[\w.+@-]++(?:/[\w.+@-]++)++/?"
PLAIN_PROSE_TAIL = r"updated to)\s*:?\s+|"
PROSE_TAIL_NOW = r"updated to)(?:\s*+:)?\s++|"
PLAIN_PEM_TAIL = re.compile(
    r"(?:[A-Za-z0-9+/=]{16,}[ \t]*\r?\n)+-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----", re.ASCII)
PLAIN_ZH_SEP = r"(?P<sep>\s*(?:(?:是|为|改成|改为|设为|设置为|换成|换为)\s*[:：]?|[:：=＝])?\s*)"
ZH_SEP_NOW = r"(?P<sep>\s*+(?:(?:是|为|改成|改为|设为|设置为|换成|换为)\s*+(?:[:：]\s*+)?|[:：=＝]\s*+)?)"
PLAIN_NUMBER = re.compile(rf"(?=[$€£¥\d])(?:[$€£¥]\s?\d[\d,]*(?:\.\d+)?\b"
                          rf"|(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:{fact_patterns._UNITS})(?![A-Za-z]))")
ERROR_MARGIN_NOW, PLAIN_ERROR_MARGIN = r"^\s*+(?:E\s++)?+(?:", r"^\s*(?:E\s+)?(?:"
ERROR_PREFIX_NOW = rf"[^\s\d]{fact_patterns._AT_ERROR}|\d(?<!\d\d)(?<!\S:\d)\d*+{fact_patterns._AT_ERROR}"
PLAIN_ERROR_PREFIX = r"\S:(?:\d+:)*\s(?:fatal\s)?error:\s"
ERROR_AFTER_MARGIN_NOW = r"|(?<=\s)\.\.\.\s(?:FAIL|ERROR)$"
CITE_NOW, PLAIN_CITE = r"(?<![ \t])[ \t]*+<!--", r"[ \t]*<!--"
HEADING_CLOSE_NOW, PLAIN_HEADING_CLOSE = r"(?<![ \t])[ \t]++#++[ \t]*+$", r"[ \t]+#+[ \t]*$"
NUM_CTX_NOW, PLAIN_NUM_CTX = r"(?:\A|(?<=\S)[^\S\n]*+\n)\s*+num_ctx", r"^\s*num_ctx"
RULE = {rule.name: rule for rule in RULES}
T = TypeVar("T")
_BASE64 = string.ascii_letters + string.digits + "+/="


def _texts(*pieces: str, size: int = 30) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(pieces), max_size=size).map("".join)


def _spans(pattern: re.Pattern[str], text: str) -> list[tuple[int, int, tuple[str | None, ...]]]:
    return [(m.start(), m.end(), m.groups()) for m in pattern.finditer(text)]


def _plain(pattern: re.Pattern[str], now: str, plain: str) -> re.Pattern[str]:
    assert now in pattern.pattern  # the reference is built from the pattern as it is
    return re.compile(pattern.pattern.replace(now, plain), pattern.flags)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("QUJD", "ZGVmZ2hpamtsbW5vcA==", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "a", "+/", "=", " ", "\t", "\n",
              "\r\n", "key: ", "-", "-----END RSA PRIVATE KEY-----", "-----END PRIVATE KEY-----",
              "-----END CERTIFICATE-----", "-----END OPENSSH PRIVATE KEY-----\n", "-----END EC PRIVATE KEY BLOCK-----",
              "x-----END ", size=40))
def test_the_pem_tail_rule_finds_what_its_plain_form_found(text: str) -> None:
    assert _spans(RULE["pem_private_key_tail"].pattern, text) == _spans(PLAIN_PEM_TAIL, text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("密码", "口令", "登录密码", "是", "为", "改成", "设置为", ":", "：", "=", "＝", " ", "\t", "\n", "  ", "\"",
              "「", "Hunter22", "abc", "s3cr3t!#", ".", "x", "密码是", "密码："))
def test_the_chinese_cue_rule_finds_what_its_plain_form_found(text: str) -> None:
    rule = RULE["chinese_cue"].pattern
    assert _spans(rule, text) == _spans(_plain(rule, ZH_SEP_NOW, PLAIN_ZH_SEP), text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("-----BEGIN PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----", "-----END PRIVATE KEY-----",
              "-----END EC PRIVATE KEY BLOCK-----", "-----END CERTIFICATE-----", "-----END ", "-----", "-", "\n", " ",
              "MIIE", "abc+/=", "Proc-Type: 4,ENCRYPTED", "x", "END", "PRIVATE KEY-----", "-----BEGIN ", size=16))
@example("-----END PRIVATE KEY-----\n-----BEGIN PRIVATE KEY-----\nabc")  # an END before the BEGIN
@example("-----BEGIN A PRIVATE KEY-----END PRIVATE KEY-----")  # an END inside the BEGIN line
@example("-----BEGIN PRIVATE KEY-----\nab\n-----BEGIN PRIVATE KEY-----\ncd\n-----END PRIVATE KEY-----\n"
         "-----BEGIN PRIVATE KEY-----\nef")
def test_the_private_key_rule_finds_what_its_pattern_finds(text: str) -> None:
    rule = RULE["pem_private_key"]
    assert _spans(rule.pattern, text) == [(m.start(), m.end(), m.groups()) for m in rule.finditer(text)]


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("eyJ", "x", "-", ".", "abcdefgh", " ", "é", "eyJabcdefgh.", "eyJabcdefgh.eyJabcdefgh.abcdefgh"))
@example("xeyJ-eyJabcdefgh.eyJabcdefgh.abcdefgh")  # a run's first eyJ that cannot start a token
@example("eyJ-eyJabcdefgh.eyJabcdefgh.abcdefgh")
@example("eyJab-eyJabcdefgh.eyJabcdefgh.abcdefgh.eyJabcdefgh.eyJabcdefgh.abcdefgh")
def test_the_jwt_rule_finds_what_its_pattern_finds(text: str) -> None:
    rule = RULE["jwt"]
    assert _spans(rule.pattern, text) == [(m.start(), m.end(), m.groups()) for m in rule.finditer(text)]


@pytest.mark.parametrize("name", ["url_userinfo", "url_token_userinfo"])
@settings(max_examples=EXAMPLES, deadline=None)
@given(text=_texts("a", "B", "1", ".", "+", "_", "://", ":", "@", "/", " ", "é", "u:pwd@", "abcdefghijklmnopq@"))
@example(text="_a.b://u:pwd@x")  # a scheme's first letter that cannot start a match
@example(text="1a+b-c://abcdefghijklmnopq@x")
@example(text="x.y://a.b://u:pwd@")
def test_a_url_rule_finds_what_its_pattern_finds(name: str, text: str) -> None:
    rule, folded = RULE[name], fold_ascii(text)
    assert _spans(rule.pattern, folded) == [(m.start(), m.end(), m.groups()) for m in rule.finditer(folded)]


def test_a_wrapped_private_key_tail_is_still_redacted_whole() -> None:
    body = "\n".join(["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"] * 3)
    text = f"the file ends with\n{body}\n-----END PRIVATE KEY-----\nand that is all"
    redacted = redact_secrets(text)
    assert "MIIEvQ" not in redacted and redacted.startswith("the file ends with\n") and "that is all" in redacted


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("password", "my password", " is", " was", " set to", " updated to", ":", " ", "  ", "\t", "\n", "\"",
              "Hunter22", "s3cr3t!", "x", "1", "is"))
def test_the_prose_cue_finds_what_its_plain_form_found(text: str) -> None:
    rule = RULE["prose_cue"]
    plain = _plain(rule.pattern, PROSE_TAIL_NOW, PLAIN_PROSE_TAIL)
    folded = text.lower()
    assert _spans(rule.pattern, folded) == _spans(plain, folded)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("PR", "pr", "issue", "pull request", "#", " ", "  ", "\t", "\n", "1", "12", "1234567", "12345678", "a",
              "&", "bug"))
def test_the_issue_finder_finds_what_its_plain_form_found(text: str) -> None:
    assert _spans(fact_patterns._ISSUE_RE, text) == _spans(PLAIN_ISSUE, text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("1", "12", "٣", ",", ".", ".5", " ", "\n", "$", "€ ", "$1,", "1,", "ms", "5ms", "s", "%", "秒", "a", "_", "e"))
@example("$1,5ms")  # an amount ends inside a run, a measure starts after it
@example("$1.5,3ms")
@example("a1,2ms, x,5ms, .1,,2%")
def test_the_number_finder_finds_what_its_plain_form_found(text: str) -> None:
    spans = [m.span(group) for m in fact_patterns._NUMBER_RE.finditer(text) for group in ("amount", "then", "measure")
             if m.start(group) >= 0]
    assert spans == [m.span() for m in PLAIN_NUMBER.finditer(text)]


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts(" ", "  ", "\t", "\n", "E", "E ", "error", "error:", " error: ", "Error", "ERROR", "fatal ", ":", "::", "1",
              "12", "1:", "٣", "a", "x.", ".", "...", "... FAIL", "... ERROR", " ... FAIL", "FAIL", "FAILED", "(", "ValueError",
              "command not found", "npm ERR!", "--- FAIL: ", "E: ", "\r", size=16))
@example(" ... FAIL")  # the blank before "..." is the margin's
@example("E\t... ERROR")
@example("\n... FAIL")
@example("12:3: error: x")
@example("a:1::1:1: error: x")
@example("x 1:22:3: fatal error: x")
def test_an_error_line_reads_as_with_its_plain_form(line: str) -> None:
    plain = _plain(_plain(_plain(fact_patterns.ERROR_RE, ERROR_MARGIN_NOW, PLAIN_ERROR_MARGIN), ERROR_PREFIX_NOW,
                          PLAIN_ERROR_PREFIX), ERROR_AFTER_MARGIN_NOW, "")
    now, then = fact_patterns.ERROR_RE.match(line), plain.match(line)
    assert (now and now.span()) == (then and then.span())


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("/", "~", ".", "..", "a", "b.py", "x-y", "@", "+", "src", "/usr", "bin/", "#", " ", size=14))
def test_the_path_finder_accepts_what_its_plain_form_accepted(text: str) -> None:
    plain = _plain(fact_patterns._PATH_RE, PATH_START_NOW, PLAIN_PATH_START)
    assert bool(fact_patterns._PATH_RE.fullmatch(text)) == bool(plain.fullmatch(text))


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("#", "##", "#####", " ", "  ", "\t", "*", "**", ":", "Goal", "a", "b c", "Relevant Files", "x*y",
              size=14))
def test_a_summary_header_reads_as_with_its_plain_form(line: str) -> None:
    now, plain = ledger._HEADER_RE.match(line), PLAIN_HEADER.match(line)
    assert (now and now.group(1)) == (plain and plain.group(1))


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("remember", "Remember", "please ", "that", " that", ":", ",", " ", "  ", "\t", "\n", "\r\n", "ab",
              "x", "milk", "thatcher", "REMEMBER THAT"))
def test_remember_finds_the_facts_its_plain_form_found(text: str) -> None:
    now = [m.group(1) for m in memory._REMEMBER.finditer(text)]
    plain = [m.group(1) for m in PLAIN_REMEMBER.finditer(text)]
    assert not any(fact[:1].isspace() for fact in now)
    # The one difference: where a fact shorter than 3 non-blank characters followed the cue, the plain form
    # padded it with the blanks before it (then the rewrite reads the line another way, or not at all).
    if not any(fact[:1].isspace() for fact in plain):
        assert now == plain


def test_remember_still_reads_a_request() -> None:
    text = "hi\nPlease remember that:   my cat is called Miso  \nremember, tea no sugar\nremember:  ok"
    assert [m.group(1) for m in memory._REMEMBER.finditer(text)] == ["my cat is called Miso", "tea no sugar"]


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("<!-- from ", "a", " in ", "b:1", " -->", " ", "\t", "\n", "x", "<!--", "-->", "- tea"))
def test_a_memory_citation_is_found_as_with_its_plain_form(text: str) -> None:
    assert _spans(memory._CITE, text) == _spans(_plain(memory._CITE, CITE_NOW, PLAIN_CITE), text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts(" ", "\t", "#", "##", "a", "\n", "x#"))
def test_a_headings_closing_hashes_are_found_as_with_their_plain_form(text: str) -> None:
    plain = _plain(telegram_format._HEADING_CLOSE, HEADING_CLOSE_NOW, PLAIN_HEADING_CLOSE)
    assert _spans(telegram_format._HEADING_CLOSE, text) == _spans(plain, text)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("num_ctx", " ", "\t", "\n", "5", "12", "x", "\r", "\u2028", " num_ctx 8\n", "stop", size=14))
def test_num_ctx_reads_the_number_its_plain_form_read(text: str) -> None:
    # The match may start earlier (at the blanks before its line); what is read from it is the same.
    now, plain = window_probe._NUM_CTX.search(text), _plain(window_probe._NUM_CTX, NUM_CTX_NOW, PLAIN_NUM_CTX).search(text)
    assert (now and (now.group(1), now.end())) == (plain and (plain.group(1), plain.end()))


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("<", ">", "a", "<b>", " ", "</", "\n"))
def test_an_error_bodys_tags_are_squashed_as_before(text: str) -> None:
    assert classify._squash(text) == " ".join(re.sub(r"<[^>]+>", " ", text).split())


@settings(max_examples=EXAMPLES, deadline=None)
@given(_texts("<think>", "</think>", "<THINK>", "</Think>", "<thinking>", "</thinking>", "<reasoning>", "</reasoning>",
              "<reaſoning>", "</reaſoning>", "x", " ", "\n", "<", ">"))
def test_a_summarys_reasoning_blocks_are_removed_as_before(text: str) -> None:
    assert summary._without_reasoning(text) == summary._THINK_RE.sub("", text)


def _at_once(read: Callable[[str], T], text: str) -> T:
    # A hang guard, not a speed goal: the plain forms took 10 s to minutes on these texts (the quadratic ones are long
    # enough for 30 s or more); linear takes milliseconds, so the bound is far from both.
    started = time.perf_counter()
    result = read(text)
    assert time.perf_counter() - started < 10.0
    return result


@pytest.mark.parametrize("text", [
    pytest.param("remember" + " " * 4_000 + "x" * 600, id="remember, blanks, a line too long"),
    pytest.param("\n" * 30_000 + "remember", id="remember after blank lines"),
])
def test_remember_reads_hostile_messages_at_once(text: str) -> None:
    _at_once(lambda t: list(memory._REMEMBER.finditer(t)), text)


def test_a_summary_line_of_blanks_is_read_at_once() -> None:
    _at_once(ledger._HEADER_RE.match, "# a" + " " * 20_000 + "b")


def _base64(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(_BASE64) for _ in range(n))


def _wrapped(text: str, width: int = 76) -> str:
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))


@pytest.mark.parametrize("text", [
    pytest.param("eyJ-" * 64_000, id="a run of eyJ- (a JWT's start, over and over)"),
    pytest.param("a." * 64_000 + "://", id="a URL scheme of 128,000 characters"),
    pytest.param("-----END CERTIFICATE-----\n" + _base64(80_000, 1), id="one base64 line after an END line"),
    pytest.param(_wrapped(_base64(80_000, 2)) + "\n-----END CERTIFICATE-----\n",
                 id="a wrapped base64 file before a certificate's END"),
    pytest.param("密码" + " " * 40_000 + "\n口令是" + "\t" * 40_000, id="password cues in Chinese followed by blanks"),
])
def test_secrets_texts_that_were_quadratic_are_redacted_at_once(text: str) -> None:
    assert _at_once(redact_secrets, text) == text


@pytest.mark.parametrize("text", [
    pytest.param("my password is" + " " * 30_000 + "!", id="a password cue before blanks"),
    pytest.param("PR 1 PR" + " " * 30_000 + "x", id="an issue cue before blanks"),
    pytest.param("see /" + "a/" * 10_000 + "a# done", id="a path of ten thousand segments"),
])
def test_texts_that_were_quadratic_are_read_at_once(text: str) -> None:
    clear_fact_cache()
    _at_once(redact_secrets, text)
    _at_once(lambda t: facts_of_message({"role": "tool", "content": t}, 1), text)


def test_private_key_begin_lines_without_an_end_are_redacted_at_once() -> None:
    text = "-----END PRIVATE KEY-----\n" + "-----BEGIN PRIVATE KEY-----\n" * 12_000
    assert _at_once(redact_secrets, text) == "-----END PRIVATE KEY-----\n" + "[REDACTED]\n" * 12_000


@pytest.mark.parametrize("text", [
    pytest.param("took 5 ms: [" + ",".join(str(i % 10) for i in range(16_000)) + "]", id="a JSON array of ints"),
    pytest.param(" " * 9_000 + "1:" * 5_000 + "x Error", id="blanks, then a chain of line numbers, on one line"),
])
def test_evidence_texts_that_were_quadratic_are_read_at_once(text: str) -> None:
    clear_fact_cache()
    _at_once(lambda t: facts_of_message({"role": "tool", "content": t}, 1), text)


@pytest.mark.parametrize("result", [
    pytest.param(" " * 32_000, id="a line of blanks"),
    pytest.param("1:" * 32_000, id="a chain of line numbers"),
])
def test_a_commands_result_is_read_at_once(result: str) -> None:
    call = {"id": "c1", "function": {"name": "bash", "arguments": json.dumps({"command": "make test"})}}
    clear_fact_cache()
    facts = _at_once(lambda r: facts_of_message({"role": "assistant", "content": "", "tool_calls": [call]}, 1,
                                                {"c1": r}), result)
    assert ("command", "make test → ran") in [(fact.kind, fact.text) for fact in facts]


@pytest.mark.parametrize(("read", "text"), [
    pytest.param(memory._entry, "- a" + " " * 160_000 + "x", id="a memory line of blanks"),
    pytest.param(telegram_format.markdown_to_telegram_html, "# a" + " " * 64_000 + "x", id="a heading of blanks"),
    pytest.param(window_probe._NUM_CTX.search, "\n" * 128_000 + "x", id="Ollama parameters of blank lines"),
    pytest.param(classify.parse_error_body, "<" * 200_000, id="an error body of unclosed tags"),
    pytest.param(summary.clean_summary_output, "<think>" * 30_000 + "a summary", id="a summary of unclosed reasoning"),
])
def test_other_texts_that_were_quadratic_are_read_at_once(read: Callable[[str], object], text: str) -> None:
    _at_once(read, text)
