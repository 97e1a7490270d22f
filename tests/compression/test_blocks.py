"""A message's summary-prompt block, kept per message: always what serializing it now would give."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given

from agent.compression import blocks
from agent.compression.blocks import block_key, clear_block_cache, summary_block
from agent.compression.parts import serialize_parts
from agent.compression.summary import format_summary, serialize_message
from agent.tokens import get_counter
from tests.compression.helpers import assistant, call, image_part, make_compressor, result, user
from tests.compression.test_properties import SETTINGS, transcripts

COUNTER = get_counter()
CL100K = get_counter("cl100k_base")


def _exact(message: dict[str, Any], counter=COUNTER) -> tuple[str, int]:
    text = serialize_message(message)
    return text, counter.count_text(text)


@SETTINGS
@given(transcripts())
def test_a_block_is_what_serializing_and_counting_the_message_gives(messages: list[dict[str, Any]]) -> None:
    for message in messages:  # cached or not (generated transcripts repeat texts), always the exact block
        assert summary_block(message, COUNTER) == _exact(message)


def _variants() -> list[dict[str, Any]]:
    """Messages that differ from the first in one thing each that the block shows."""
    long = "log line with password=hunter2hunter2 " * 400
    base = call("c1", "terminal", {"cmd": "ls"}, text="running it")
    return [
        base,
        {**base, "role": "user"},
        {**base, "name": "bob"},
        call("c1", "terminal", {"cmd": "ls -la"}, text="running it"),
        call("c1", "read_file", {"cmd": "ls"}, text="running it"),
        call("c1", "terminal", {"cmd": "ls"}, text="running it now"),
        {**base, "tool_calls": [*base["tool_calls"], *call("c2", "terminal", {"cmd": "pwd"})["tool_calls"]]},
        {**base, "content": [{"type": "text", "text": "running it"}, image_part()]},
        user(long),
        user(long + "x"),
        user(format_summary("an older summary")),
        result("c1", "file_a.py"),
        {"content": "no role at all"},
    ]


def test_messages_that_differ_in_anything_the_block_shows_get_their_own_blocks() -> None:
    clear_block_cache()
    variants = _variants()
    assert len({block_key(m, COUNTER.encoding_name) for m in variants}) == len(variants)
    # A text part alone reads as the same text: same block, same key.
    as_parts = {**variants[0], "content": [{"type": "text", "text": "running it"}]}
    assert block_key(as_parts, "o200k_base") == block_key(variants[0], "o200k_base")
    for message in random.Random(7).sample(variants * 2, 2 * len(variants)):
        assert summary_block(message, COUNTER) == _exact(message)
        assert summary_block(message, CL100K) == _exact(message, CL100K)


def test_a_stored_message_is_never_serialized_again(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_block_cache()
    stored = [user("Deploy the app with token=sk-live-abcdefghijklmnopqrstuvwx"), assistant("deployed"),
              call("c9", "terminal", {"cmd": "make test"}), result("c9", "12 passed")]
    expected = [_exact(m) for m in stored]
    make_compressor(context_length=8_000).on_messages_stored(stored)

    def no_serializing(message: object) -> str:
        raise AssertionError("a stored message was serialized again")

    monkeypatch.setattr(blocks, "serialize_message", no_serializing)
    assert [summary_block(dict(m), COUNTER) for m in stored] == expected  # equal copies hit as well
    assert "[REDACTED]" in expected[0][0] and "sk-live" not in expected[0][0]
    parts = serialize_parts(stored, 10_000, COUNTER)
    assert parts.parts == ("\n\n".join(text for text, _ in expected),)
