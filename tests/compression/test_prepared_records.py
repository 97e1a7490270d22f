"""Prepared records: what a compaction takes from them is exactly what it would have computed, and a record that is
not valid for its message as it is now is never taken."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.compression import blocks, evidence, prepared, prune
from agent.compression.blocks import remember_blocks, summary_block
from agent.compression.engine import CompressionResult, ContextEngine
from agent.compression.evidence import Fact, extract_facts, fact_tokens, remember_facts
from agent.compression.prepared import adopt_records, forget_prepared, prepare_records
from agent.compression.prune import ARGUMENTS_MAX_CHARS
from agent.compression.summary import serialize_message
from agent.tokens import TokenCounter, get_counter
from tests.compression.helpers import (
    ScriptedProvider,
    assistant,
    call,
    coding_session,
    make_compressor,
    result,
    system,
    user,
)
from tests.compression.test_properties import EXAMPLES, SETTINGS, transcripts

COUNTER = get_counter()
CL100K = get_counter("cl100k_base")
Messages = list[dict[str, Any]]


def _forget() -> None:
    """What a restarted process knows: no fact, no block, no count."""
    forget_prepared()
    COUNTER._cache.clear()


def _storing() -> Any:
    """A compressor that keeps a record for every message, however short (these tests hold every kind to it)."""
    compressor = make_compressor()
    compressor.record_min_chars = 0
    return compressor


def _compress(messages: Messages, window: int, **kwargs: Any) -> tuple[CompressionResult, list[Any]]:
    """One compaction on the LLM path, and the prompts its summary model was sent."""
    provider = ScriptedProvider([])
    compressor = make_compressor(context_length=window, summary_provider=provider)
    outcome = asyncio.run(compressor.compress(messages, force=True, **kwargs))
    return outcome, [sent["messages"] for sent in provider.calls]


def _three_ways(messages: Messages, window: int) -> None:
    """A compaction after a restart with the records == one without them == one in the process that stored them
    (handed the records or not)."""
    counts = [COUNTER.count_message(m) for m in messages]
    _forget()
    cold = _compress(messages, window, token_counts=counts)
    _forget()
    records = _storing().on_messages_stored(messages)
    _forget()
    adopted = _compress(messages, window, token_counts=counts, prepared=records)
    _forget()
    _storing().on_messages_stored(messages)
    COUNTER.count_each(messages)
    warm = _compress(messages, window)
    assert adopted == cold
    assert warm == cold
    assert _compress(messages, window, prepared=records) == cold


def _computed_anyway(*args: object) -> Any:
    raise AssertionError("computed although a record held it")


@contextlib.contextmanager
def _nothing_computed() -> Iterator[None]:
    """Inside: no text is scanned for facts and nothing is tokenized (what records hold is taken, not computed)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evidence, "_text_facts", _computed_anyway)
        patch.setattr(COUNTER, "count_text", _computed_anyway)
        yield


def _taken_equals_computed(messages: Messages) -> None:
    """Every message's facts, their counts and its block, taken from its record, equal the computed ones."""
    _forget()
    facts = remember_facts(messages, COUNTER)
    counts = {text: COUNTER.count_text(" " + text) for _, entry in facts for _, text in entry.upto("value")}
    computed_blocks = remember_blocks(messages, COUNTER)
    records = prepare_records(messages, COUNTER)
    _forget()
    assert adopt_records(messages, records, COUNTER) == len(messages)
    with _nothing_computed():
        taken = remember_facts(messages, COUNTER)
        taken_counts = {text: fact_tokens(text, COUNTER) for _, entry in taken for _, text in entry.upto("value")}
        taken_blocks = remember_blocks(messages, COUNTER)
    assert taken == facts and taken_counts == counts and taken_blocks == computed_blocks


# ----- equality: the corpus and generated texts ------------------------------------------------------------------

def test_the_whole_corpus_compacts_alike_with_records_without_and_warm(corpus_root: Path) -> None:
    from bench.corpus import load_all

    transcripts_ = load_all()
    assert transcripts_
    largest = max(transcripts_, key=lambda t: len(t.messages))
    for i, transcript in enumerate(transcripts_):
        # What is taken from a record is checked for every message; whole compactions (four per transcript,
        # most of this test's time) for every third transcript and the largest, from every corpus.
        _taken_equals_computed(transcript.messages)
        if i % 3 == 0 or transcript is largest:
            _three_ways(transcript.messages, max(COUNTER.count_messages(transcript.messages), 4_000))


FRAGMENTS = ("Never push to main! ", "Edit src/app/main.py and /srv/x/y.toml ", "password=hunter2hunter2 ",
             "token=sk-live-abcdefghijklmnopqrstuvwx ", "Error: boom\n", "exit code 2\n", "see https://x.io/v1 ",
             "PR #12 took 42 ms ", "数据 テスト ", "\ud800", "\n\n", "v1.2.3 ")


@st.composite
def _texts(draw: st.DrawFn) -> str:
    text = "".join(draw(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=30)), max_size=12)))
    # Now and then past the summary block's cut (5,500 characters), where the cut ends are redacted apart.
    return text * draw(st.sampled_from([1, 1, 1, 400]))


@st.composite
def _sessions(draw: st.DrawFn) -> Messages:
    messages: Messages = [system()]
    for i in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["user", "assistant", "call"]))
        if kind == "user":
            messages.append(user(draw(_texts())))
        elif kind == "assistant":
            messages.append(assistant(draw(_texts())))
        else:
            messages.append(call(f"c{i}", "terminal", {"command": draw(_texts()), "path": "src/a.py"},
                                 text=draw(st.none() | _texts())))
            if draw(st.booleans()):
                messages.append(result(f"c{i}", draw(_texts())))
    return messages


# Each example compacts four times: a third of the other properties' examples.
FEWER = settings(SETTINGS, max_examples=max(EXAMPLES // 3, 1))


@FEWER
@given(_sessions())
def test_generated_texts_compact_alike_with_records_without_and_warm(messages: Messages) -> None:
    _taken_equals_computed(messages)
    _three_ways(messages, 4_000)


@FEWER
@given(transcripts())
def test_generated_transcripts_compact_alike_with_records_without_and_warm(messages: Messages) -> None:
    _taken_equals_computed(messages)
    _three_ways(messages, 4_000)


# ----- the round trip: stored, restarted, compacted ------------------------------------------------------------

def test_a_compaction_after_a_restart_takes_what_the_records_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = coding_session(40)
    counts = COUNTER.count_each(messages)
    _forget()
    serialized = _counting(monkeypatch, blocks, "serialize_message")
    cold = _compress(messages, 8_000, token_counts=counts)
    made = len(serialized)
    records = _storing().on_messages_stored(messages)
    assert len(records) == len(messages) and all(isinstance(r, str) for r in records)
    _forget()
    assert adopt_records(messages, records, COUNTER) == len(messages)
    _forget()
    serialized.clear()
    scanned = _counting(monkeypatch, evidence, "_text_facts")
    described = _counting(monkeypatch, prune, "describe_tool_result")
    adopted = _compress(messages, 8_000, token_counts=counts, prepared=records)
    assert adopted == cold and adopted[0].compressed
    assert scanned == [] and described == []
    # Not even the blocks of what pruning rewrote are made again: the records hold the one-liners' counts too.
    assert made > 0 and serialized == []


def _restarted(messages: Messages) -> tuple[list[int], tuple[CompressionResult, list[Any]], list[str | None]]:
    """The messages' counts, a compaction at 8,000 tokens computed without records (it compacts), and the records
    made when they were stored; nothing is cached after it, as after a restart."""
    counts = COUNTER.count_each(messages)
    _forget()
    cold = _compress(messages, 8_000, token_counts=counts)
    assert cold[0].compressed
    records = _storing().on_messages_stored(messages)
    _forget()
    return counts, cold, records


def test_a_compaction_after_a_restart_takes_shrunk_arguments_from_the_records(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = coding_session(30)
    writes: Messages = []
    for i in range(4):  # large writes early on: pruning shrinks their arguments
        writes += [call(f"w{i}", "write_file", {"path": f"src/m{i}.py", "content": f"x{i} = 1\n" * 2_000}),
                   result(f"w{i}", "written")]
    messages[2:2] = writes
    counts, cold, records = _restarted(messages)
    shrunk = _counting(monkeypatch, prune, "shrink_arguments")
    serialized = _counting(monkeypatch, blocks, "serialize_message")
    adopted = _compress(messages, 8_000, token_counts=counts, prepared=records)
    assert adopted == cold
    # Small arguments are still checked (parsed); the large ones are neither parsed nor shrunk, nor is what they
    # become serialized or tokenized again.
    assert shrunk and all(len(raw) <= ARGUMENTS_MAX_CHARS for raw, in shrunk) and serialized == []


@pytest.mark.parametrize("second", [
    "", "Writing it again, the first attempt failed:", "x" * 60_000,
], ids=["no text", "another text", "a text clipping cuts"])
def test_what_pruning_makes_of_a_message_is_counted_as_that_message(second: str) -> None:
    # The same large write twice (a retry), with different texts: the record of one must not lend its pruned
    # message's counts to the other, nor to a message clipping has cut before pruning shrinks its arguments.
    messages = coding_session(12)
    write = call("w0", "write_file", {"path": "src/big.py", "content": "y = 2\n" * 2_000},
                 text="Now let me write the module:")
    retry = {**call("w1", "write_file", {"path": "src/big.py", "content": "y = 2\n" * 2_000}), "content": second}
    messages[2:2] = [write, result("w0", "failed: disk full"), retry, result("w1", "written")]
    counts, cold, records = _restarted(messages)
    assert _compress(messages, 8_000, token_counts=counts, prepared=records) == cold


def test_a_record_made_or_read_here_is_not_read_again_until_a_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = coding_session(20)
    records = _storing().on_messages_stored(messages)
    read = _counting(monkeypatch, prepared, "_take")
    # Made here: handed back with every compaction of the session, they are not read at all.
    assert adopt_records(messages, records, COUNTER) == len(messages) and read == []
    _forget()
    assert adopt_records(messages, records, COUNTER) == len(messages)
    distinct = len(read)
    assert 0 < distinct <= len(messages)
    assert adopt_records(messages, records, COUNTER) == len(messages) and len(read) == distinct


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Any]:
    calls: list[Any] = []
    original = getattr(module, name)

    def counted(*args: Any) -> Any:
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_records_not_one_per_message_are_all_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = coding_session(40)
    records = _storing().on_messages_stored(messages)
    _forget()
    assert adopt_records(messages, records[:-1], COUNTER) == 0
    assert adopt_records(messages[:-1], records, COUNTER) == 0
    counts = COUNTER.count_each(messages)
    _forget()
    cold = _compress(messages, 8_000, token_counts=counts)
    _forget()
    scanned = _counting(monkeypatch, evidence, "_text_facts")
    assert _compress(messages, 8_000, token_counts=counts, prepared=[*records, records[0]]) == cold
    assert scanned, "records one too many were taken"


# ----- what is never taken -------------------------------------------------------------------------------------

def _session(text: str = "Never push to main! Edit src/old.py now.", command: str = "make test",
             output: str | None = "3 passed\nexit code 0") -> Messages:
    messages = [system(), user(text), call("c1", "terminal", {"command": command})]
    if output is not None:
        messages.append(result("c1", output))
    return [*messages, assistant("done")]


def _facts_with(records: Sequence[str | None], messages: Messages,
                counter: TokenCounter = COUNTER) -> tuple[int, list[Fact]]:
    """How many ``records`` were adopted after a restart, and the facts a compaction then finds in ``messages``."""
    _forget()
    adopted = adopt_records(messages, records, counter)
    return adopted, extract_facts(messages, lambda i: i)


def _computed(messages: Messages) -> list[Fact]:
    _forget()
    return extract_facts(messages, lambda i: i)


def _records(messages: Messages, counter: TokenCounter = COUNTER) -> list[str | None]:
    _forget()
    return prepare_records(messages, counter)


@pytest.mark.parametrize(("made_for", "handed", "stale", "fresh"), [
    (_session(), _session(text="Never push to main! Edit src/new.py now."), ("path", "src/old.py"),
     ("path", "src/new.py")),
    (_session(), _session(command="make lint"), ("command", "make test → exit 0"), ("command", "make lint → exit 0")),
    (_session(), _session(output="1 failed\nexit code 2"), ("command", "make test → exit 0"),
     ("command", "make test → exit 2")),
    (_session(), _session(output=None), ("command", "make test → exit 0"), ("command", "make test → no result recorded")),
], ids=["text changed", "call arguments changed", "tool result changed", "tool result removed"])
def test_a_record_made_for_other_content_is_never_taken(made_for: Messages, handed: Messages, stale: tuple[str, str],
                                                        fresh: tuple[str, str]) -> None:
    records = _records(made_for)
    if len(handed) < len(made_for):  # the result erased: its row and record with it
        records = [r for m, r in zip(made_for, records, strict=True) if m.get("role") != "tool"]
    adopted, facts = _facts_with(records, handed)
    assert adopted == len(handed)  # well formed, this version and encoding: adopted, but not taken by the message
    assert facts == _computed(handed)
    kinds_texts = {(f.kind, f.text) for f in facts}
    assert fresh in kinds_texts and stale not in kinds_texts


def test_a_changed_result_voids_the_calls_facts_not_its_block() -> None:
    records = _records(_session())
    handed = _session(output="1 failed\nexit code 2")
    expected = _plain(handed[2])
    _forget()
    adopt_records(handed, records, COUNTER)
    with _nothing_computed():
        assert summary_block(handed[2], COUNTER) == expected
    assert ("command", "make test → exit 2") in {(f.kind, f.text) for f in extract_facts(handed, lambda i: i)}


def _plain(message: Mapping[str, Any]) -> tuple[str, int]:
    text = serialize_message(message)
    return text, COUNTER.count_text(text)


def _with_field(record: str | None, index: int, value: Any) -> str:
    data = json.loads(str(record))
    data[index] = value
    return json.dumps(data)


@pytest.mark.parametrize("bad", [
    "", "{", "not json", "null", "[]", "{}", "[1, 2, 3]", "[" * 100_000 + "]" * 100_000, '"a text"',
])
def test_a_malformed_record_is_ignored(bad: str) -> None:
    messages = _session()
    adopted, facts = _facts_with([bad] * len(messages), messages)
    assert adopted == 0 and facts == _computed(messages)


@pytest.mark.parametrize(("index", "value"), [
    (0, "another-version"), (1, "cl100k_base"), (2, 7), (4, -1), (4, True), (4, 1 << 40), (5, -3), (5, 1.5), (6, 2),
    (6, True), (7, "first"), (7, [[99, "src/old.py", 3]]), (7, [[0, 5, 3]]), (7, [[0, "Never push", -1]]),
    (7, [[0, "Never push"]]), (8, None), (-1, "a line"), (-1, ["digest"]), (-1, ["digest", "a line"]),
    (-1, [None, "a line", 9, 12, 1]), (-1, ["digest", 3, 9, 12, 1]), (-1, ["digest", "a line", -9, 12, 1]),
    (-1, ["digest", "a line", 9, 1.5, 1]), (-1, ["digest", "a line", 9, 12, 2]), (-1, ["digest", "a line", 9, 12, True]),
    (-1, ["digest", "a line", 9, 12, 1, 0]), (-1, ["digest", [3], 9, 12, 1]), (-1, ["digest", {"a": 1}, 9, 12, 1]),
], ids=lambda v: repr(v)[:20])
def test_a_record_with_a_field_out_of_place_is_ignored(index: int, value: Any) -> None:
    messages = _session()
    records = [_with_field(r, index, value) for r in _records(messages)]
    adopted, facts = _facts_with(records, messages)
    assert adopted == 0 and facts == _computed(messages)


def test_records_of_another_encoding_are_ignored() -> None:
    messages = _session()
    assert _facts_with(_records(messages, CL100K), messages)[0] == 0
    assert _facts_with(_records(messages), messages, CL100K)[0] == 0
    assert _facts_with(_records(messages, CL100K), messages, CL100K)[0] == len(messages)


def test_records_of_another_format_version_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = _session()
    records = _records(messages)
    monkeypatch.setattr(prepared, "FORMAT_VERSION", "AAAAAAAAAAA")
    assert _facts_with(records, messages)[0] == 0


def test_the_format_version_follows_the_code_and_without_its_source_there_are_no_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = Path(prepared.__file__).parent
    copy = tmp_path / "compression"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(prepared, "__file__", str(copy / "prepared.py"))
    assert prepared._format_version() == prepared.FORMAT_VERSION
    (copy / "ledger.py").write_text((copy / "ledger.py").read_text() + "\n")
    assert prepared._format_version() not in (None, prepared.FORMAT_VERSION)
    (copy / "gone.py").symlink_to(tmp_path / "nowhere.py")
    assert prepared._format_version() is None
    monkeypatch.setattr(prepared, "FORMAT_VERSION", None)
    messages = _session()
    records = _records(messages)
    assert records == [None] * len(messages)
    with _nothing_computed():  # the facts and blocks were prepared all the same
        extract_facts(messages, lambda i: i)
        remember_blocks(messages, COUNTER)
    assert adopt_records(messages, [json.dumps([None] * 10)] * len(messages), COUNTER) == 0


# ----- the records themselves --------------------------------------------------------------------------------

def test_a_record_holds_no_block_text_and_survives_any_text() -> None:
    long = user("a line of build output, nothing secret in it\n" * 500)
    odd = user("a lone surrogate \ud800 in a library caller's text, and 数据")
    secret = user("deploy with token=sk-live-abcdefghijklmnopqrstuvwx please")
    # A secret across the block's cut (4,000 characters in): redacted in the cut's ends alone.
    at_cut = user("x " * 1_995 + "password=hunter2hunter2 " + "y " * 1_000)
    messages = [system(), long, odd, secret, at_cut]
    records = _records(messages)
    assert len(str(records[1]).encode()) < 200 < len(long["content"])
    for record in records:
        str(record).encode("utf-8")  # a store can take it
    # Only the blocks that redaction changed are rebuilt with it.
    assert [json.loads(str(r))[6] for r in records[1:]] == [1, 1, 0, 0]
    _forget()
    assert adopt_records(messages, records, COUNTER) == len(messages)
    assert [summary_block(m, COUNTER) for m in messages] == [_plain(m) for m in messages]


def test_an_engine_without_records_returns_none_for_each_message() -> None:
    class Bare(ContextEngine):
        def should_compress(self, prompt_tokens: int | None = None) -> bool:
            return False

        async def compress(self, messages: Sequence[Mapping[str, Any]], current_tokens: int | None = None,
                           focus_topic: str | None = None, force: bool = False) -> CompressionResult:
            raise NotImplementedError

        def update_from_response(self, usage: Any) -> None:
            pass

    assert Bare().on_messages_stored(_session()) == [None] * 5
    assert not Bare.accepts_prepared and make_compressor().accepts_prepared


def test_a_short_chat_line_gets_no_record_unless_it_calls_a_tool_or_is_a_result() -> None:
    long_line = "Deploy /srv/app/main.py with make release, then " * 5
    messages = [user("thanks!"), assistant("ok, noted."), user(long_line),
                call("c1", "terminal", {"command": "ls"}), result("c1", "a.py")]
    records = make_compressor().on_messages_stored(messages)
    assert [r is not None for r in records] == [False, False, True, True, True]
    forget_prepared()
    assert adopt_records(messages, records, COUNTER) == 3
