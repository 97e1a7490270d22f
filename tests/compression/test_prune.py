"""Stage 1 pruning (R-C1) with the worked examples of the issue."""

from __future__ import annotations

import json
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.compression import describe, evidence, prune
from agent.compression.describe import search_exit
from agent.compression.messages import content_text
from agent.compression.prune import (
    ARGUMENTS_MAX_CHARS,
    DUPLICATE_NOTE,
    IMAGE_PLACEHOLDER,
    adopt_arguments,
    calls_key,
    clear_prune_cache,
    find_prune_boundary,
    form_key,
    prune_messages,
    remember_pruned,
    shrink_arguments,
)
from agent.tokens import get_counter, key_digest
from bench.corpus import iter_transcripts
from tests.compression.helpers import assistant, call, image_part, result, system, user


def _tail() -> list[dict]:
    return [user("and now?"), assistant("Done.")]


def test_results_up_to_200_chars_are_kept() -> None:
    short = "x" * 200
    messages = [system(), user("go"), call("c1", "terminal", {"command": "ls"}), result("c1", short), *_tail()]
    out = prune_messages(messages, protect_from=4)
    assert out.messages[3]["content"] == short
    assert out.pruned == 0


def test_long_terminal_result_becomes_npm_test_one_liner() -> None:
    output = "\n".join(f"line {i}" for i in range(46)) + "\nProcess exited with code 0"
    messages = [system(), user("test it"), call("c1", "terminal", {"command": "npm test"}), result("c1", output),
                *_tail()]
    out = prune_messages(messages, protect_from=4)
    assert out.messages[3]["content"] == "[terminal] ran `npm test` -> exit 0, 47 lines output"
    assert out.summarized == 1
    assert messages[3]["content"] == output, "input must not be mutated"


def test_read_file_one_liner_names_file_line_and_size() -> None:
    body = "a" * 3_400
    messages = [system(), user("read"), call("c1", "read_file", {"path": "config.py"}), result("c1", body), *_tail()]
    out = prune_messages(messages, protect_from=4)
    assert out.messages[3]["content"] == "[read_file] read config.py from line 1 (3,400 chars)"


def test_failed_command_one_liner_keeps_last_error_line() -> None:
    output = "running\n" * 40 + "AssertionError: expected 3 got 4\nexit code: 1"
    messages = [system(), user("t"), call("c1", "bash", {"cmd": "pytest -q"}), result("c1", output), *_tail()]
    line = prune_messages(messages, protect_from=4).messages[3]["content"]
    assert line.startswith("[bash] ran `pytest -q` -> exit 1, 42 lines output")
    assert "exit code: 1" in line


def test_orphan_result_still_gets_an_informative_line() -> None:
    messages = [system(), user("x"), result("ghost", "payload " * 60, name="lookup"), *_tail()]
    line = prune_messages(messages, protect_from=3).messages[2]["content"]
    assert line.startswith("[lookup] -> 480 chars, 1 lines: payload payload")


def test_identical_5000_char_results_dedup_to_the_newest() -> None:
    blob = "same output\n" + "z" * 4_988
    messages = [system(), user("a")]
    for i in range(3):
        messages += [call(f"c{i}", "read_file", {"path": "big.txt"}), result(f"c{i}", blob)]
    messages += _tail()
    out = prune_messages(messages, protect_from=len(messages) - 3)
    assert out.messages[3]["content"] == DUPLICATE_NOTE
    assert out.messages[5]["content"] == DUPLICATE_NOTE
    assert out.messages[7]["content"] == blob, "the newest copy is in the tail and stays in full"
    assert out.deduplicated == 2


def test_protected_tail_is_untouched() -> None:
    messages = [system(), user("go"), call("c1", "terminal", {"command": "make"}), result("c1", "y" * 5_000),
                *_tail()]
    out = prune_messages(messages, protect_from=2)
    assert out.messages == messages


def test_50kb_write_file_arguments_shrink_to_valid_json() -> None:
    args = {"path": "src/app.py", "content": "print('hi')\n" * 4_500, "mode": "w"}
    raw = json.dumps(args)
    assert len(raw) > 50_000
    messages = [system(), user("write"), call("c1", "write_file", raw), result("c1", "ok"), *_tail()]
    out = prune_messages(messages, protect_from=4)
    shrunk = out.messages[2]["tool_calls"][0]["function"]["arguments"]
    parsed = json.loads(shrunk)
    assert parsed["path"] == "src/app.py" and parsed["mode"] == "w"
    assert len(shrunk) < 1_000 and "more chars truncated" in parsed["content"]
    assert out.arguments_shrunk == 1


def test_unparsable_arguments_become_a_valid_json_stub() -> None:
    stub = shrink_arguments('{"path": "a.py", "content": "unterminated')
    assert json.loads(stub) == {"_unparsable_arguments": '{"path": "a.py", "content": "unterminated'}
    assert shrink_arguments('{"small": 1}') is None
    big_list = json.dumps({"items": list(range(5_000))})
    assert len(big_list) > ARGUMENTS_MAX_CHARS
    assert json.loads(shrink_arguments(big_list))["items"][-1] == "… [4,980 more items truncated]"


def test_images_in_old_tool_results_become_placeholders() -> None:
    content = [{"type": "text", "text": "screenshot"}, image_part("B" * 10_000)]
    messages = [system(), user("look"), call("c1", "screenshot", {}), result("c1", content), *_tail()]
    out = prune_messages(messages, protect_from=4)
    assert out.messages[3]["content"] == [{"type": "text", "text": "screenshot"},
                                          {"type": "text", "text": IMAGE_PLACEHOLDER}]
    assert out.images_removed == 1


def test_anchor_messages_are_never_pruned() -> None:
    big_args = json.dumps({"content": "q" * 5_000})
    last_reply = {**call("c9", "write_file", big_args, text="Here is the file I wrote."), "content": "Here it is."}
    messages = [system(), user("final ask"), last_reply, result("c9", "ok")]
    out = prune_messages(messages, protect_from=4)
    assert out.messages[2] is last_reply


def test_prune_boundary_uses_budget_with_message_floor() -> None:
    counter = get_counter()
    messages = [user("m" * 400) for _ in range(10)]
    per = counter.count_message(messages[0])
    assert find_prune_boundary(messages, tail_budget=per * 5, min_tail=3, counter=counter) == 5
    assert find_prune_boundary(messages, tail_budget=0, min_tail=3, counter=counter) == 7


# ------------------------------------------------------------------------- exit statuses, found fast


_EXIT_ALPHABET = st.sampled_from(["exit", "EXITED", "with", "code", "status", "return", "ReturnCode", "exit_code",
                                  "ſtatus", "ı", " ", "  ", ":", "=", "'", '"', ">", "-", "0", "1", "17", "255",
                                  "\n", "x", "_", "é", "a", "İ", "\u212a", "EXİT"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_EXIT_ALPHABET, max_size=30).map("".join))
def test_an_exit_status_is_found_where_the_pattern_alone_finds_it(text: str) -> None:
    for pattern in (describe._EXIT_RE, evidence._EXIT_RE):
        fast, slow = search_exit(pattern, text), pattern.search(text)
        assert (fast and (fast.span(), fast.groups())) == (slow and (slow.span(), slow.groups())), text


def test_the_first_exit_status_is_found_whichever_word_it_starts_with() -> None:
    text = "retry: status code 3, then returncode=1, then EXIT CODE 2"
    for pattern in (describe._EXIT_RE, evidence._EXIT_RE):
        assert search_exit(pattern, text).group(1) == "3"  # type: ignore[union-attr]
        assert search_exit(pattern, text[text.index("then"):]).group(1) == "1"  # type: ignore[union-attr]
        assert search_exit(pattern, "ſtatus code 4").group(1) == "4"  # type: ignore[union-attr]
        assert search_exit(pattern, "no status here, only returns") is None


def test_the_letters_folding_into_the_exit_words_are_all_known() -> None:
    letters = {letter for word in describe._EXIT_WORDS for letter in word}
    pattern = re.compile(f"(?i)[{''.join(sorted(letters))}]")
    folding = {chr(point) for point in range(128, sys.maxunicode + 1) if pattern.fullmatch(chr(point))}
    assert folding == set(describe._FOLDING_INTO_EXIT_WORDS)
    assert [chr(p) for p in range(sys.maxunicode + 1) if len(chr(p).lower()) != 1] == ["İ"]


def test_an_exit_status_is_found_where_the_pattern_alone_finds_it_in_the_corpus() -> None:
    texts = [content_text(m) for t in iter_transcripts() for m in t.messages if m.get("role") == "tool"]
    if not texts:
        pytest.skip("the corpus folder is missing (set CONCORD_CORPUS_DIR)")
    for text in texts:
        for pattern in (describe._EXIT_RE, evidence._EXIT_RE):
            fast, slow = search_exit(pattern, text), pattern.search(text)
            assert (fast and (fast.span(), fast.groups())) == (slow and (slow.span(), slow.groups()))


# ----- what pruning makes of a message, kept per message ----------------------------------------------------------

def _session_with(command: str, output: str, name: str = "terminal") -> list[dict]:
    return [system(), user("run it"), call("c1", name, {"command": command}), result("c1", output), *_tail()]


def _refusing(*args: object) -> str:
    raise AssertionError("described again although the line was kept")


def test_a_stored_results_line_is_looked_up_not_described_again(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_prune_cache()
    messages = _session_with("make test", "ok\n" * 200 + "exit code 0")
    fresh = prune_messages(messages, protect_from=4)
    clear_prune_cache()
    forms = remember_pruned(messages)
    assert [form is not None for form in forms] == [False, False, False, True, False, False]
    monkeypatch.setattr(prune, "describe_tool_result", _refusing)
    monkeypatch.setattr(prune, "shrink_arguments", _refusing)
    assert prune_messages(messages, protect_from=4) == fresh
    form = forms[3]
    assert form is not None and form.message == fresh.messages[3] and form.replacement == form.message["content"]


@pytest.mark.parametrize(("changed", "expected"), [
    (_session_with("make lint", "ok\n" * 200 + "exit code 0"), "[terminal] ran `make lint` -> exit 0"),
    (_session_with("make test", "ok\n" * 200 + "exit code 2"), "[terminal] ran `make test` -> exit 2"),
    (_session_with("make test", "ok\n" * 200 + "exit code 0", name="read_file"), "[read_file]"),
], ids=["the call's arguments", "the result's text", "the tool's name"])
def test_a_line_kept_for_one_result_is_never_given_to_another(changed: list[dict], expected: str) -> None:
    clear_prune_cache()
    remember_pruned(_session_with("make test", "ok\n" * 200 + "exit code 0"))
    line = prune_messages(changed, protect_from=4).messages[3]["content"]
    assert line.startswith(expected)
    clear_prune_cache()
    assert prune_messages(changed, protect_from=4).messages[3]["content"] == line


def test_kept_checks_of_arguments_shrink_and_repair_as_the_first_did() -> None:
    clear_prune_cache()
    big = json.dumps({"path": "src/app.py", "content": "x" * 5_000})
    broken = '{"path": "a.py", "content": "unterminated'
    messages = [system(), user("write"), call("c1", "write_file", big), result("c1", "ok"),
                call("c2", "write_file", broken), result("c2", "ok"), call("c3", "read_file", {"path": "a.py"}),
                result("c3", "fine"), *_tail()]
    first = prune_messages(messages, protect_from=8)
    assert first.arguments_shrunk == 2
    again = prune_messages(messages, protect_from=8)
    assert again == first
    clear_prune_cache()
    forms = remember_pruned(messages)
    # (Only what large arguments become goes into a record: small ones are checked again at less cost.)
    assert [form.message for form in forms if form is not None] == [first.messages[2]]
    assert prune_messages(messages, protect_from=8) == first


def test_adopted_arguments_of_another_shape_are_never_taken() -> None:
    big = json.dumps({"path": "src/app.py", "content": "x" * 5_000})
    messages = [system(), user("write"), call("c1", "write_file", big), result("c1", "ok"), *_tail()]
    odd = {**messages[2], "tool_calls": [*messages[2]["tool_calls"], "not a call"]}
    clear_prune_cache()
    fresh = prune_messages(messages, protect_from=4)
    fresh_odd = prune_messages([*messages[:2], odd, *messages[3:]], protect_from=4)
    counts = ("o200k_base", 1, 1, True)
    for message, forged in ((messages[2], ('{"a": 1}', '{"b": 2}')), (odd, ('{"a": 1}', '{"b": 2}'))):
        clear_prune_cache()
        key = calls_key(message)
        assert key is not None
        adopt_arguments(key_digest(form_key(key, message)), forged, counts)  # two for one call; one for an entry without a function
        handed = [*messages[:2], message, *messages[3:]]
        assert prune_messages(handed, protect_from=4) == (fresh if message is messages[2] else fresh_odd)


def test_what_this_process_knows_is_not_looked_up_in_the_records(monkeypatch: pytest.MonkeyPatch) -> None:
    big = json.dumps({"path": "src/app.py", "content": "x" * 5_000})
    messages = [system(), user("write"), call("c1", "write_file", big), result("c1", "ok\n" * 300), *_tail()]
    clear_prune_cache()
    fresh = prune_messages(messages, protect_from=4)
    adopt_arguments("a record of another session", (None,), ("o200k_base", 1, 1, True))
    monkeypatch.setattr(prune, "key_digest", _refusing)  # (a record is found by the digest of its key)
    assert prune_messages(messages, protect_from=4) == fresh


def test_a_form_key_holds_everything_the_pruned_message_is_made_of() -> None:
    base = call("c1", "write_file", {"path": "a.py", "content": "x" * 3_000}, text="Writing it.")
    key = calls_key(base)
    assert key is not None
    variants = [{**base, "content": "Writing it again."}, {**base, "name": "helper"},
                {**base, "content": [{"type": "text", "text": "Writing it."}, image_part("AAAA")]},
                {**base, "tool_calls": [{**base["tool_calls"][0], "function": {
                    **base["tool_calls"][0]["function"], "name": "create_file"}}]}]
    assert len({form_key(key, message) for message in [base, *variants]}) == 5
    result_with_calls = {**result("c1", "ok" * 200), "tool_calls": base["tool_calls"]}
    assert form_key(("line",), result_with_calls) is None  # (its calls would stay: not kept)
