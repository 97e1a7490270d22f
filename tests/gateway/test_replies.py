"""Bounds on what goes out (`gateway.delivery.replies`) and text made storable where it enters (`agent.storable`,
`adapters.base.Inbound`)."""

from __future__ import annotations

import pytest

from adapters.base import Inbound, storable_text
from agent.storable import storable
from gateway.conversation.status_commands import StatusFigures, format_status
from gateway.delivery.replies import cap_reply


def test_a_short_reply_is_sent_as_it_is() -> None:
    assert cap_reply("hello", 500) == "hello"


def test_a_long_reply_is_cut_at_a_line_with_a_note() -> None:
    text = "\n".join(f"line {i} " + "word " * 10 for i in range(5_000))
    capped = cap_reply(text, 2_000)
    assert len(capped) <= 2_000
    body, _, note = capped.partition("\n\n[… reply cut here: ")
    assert text.startswith(body) and body.endswith("word") and "more characters" in note


def test_an_open_code_block_is_closed_before_the_note() -> None:
    text = "Here:\n```python\n" + "x = 1\n" * 2_000 + "```\nDone."
    capped = cap_reply(text, 1_000)
    assert capped.count("```") % 2 == 0 and len(capped) <= 1_000


def test_unstorable_characters_become_replacement_characters() -> None:
    assert storable_text("a\x00b\ud800c") == "a\ufffdb\ufffdc"
    message = {"role": "assistant", "content": [{"type": "text", "text": "x\x00"}], "n": 3}
    assert storable(message) == {"role": "assistant", "content": [{"type": "text", "text": "x\ufffd"}], "n": 3}
    clean = {"role": "user", "content": "fine"}
    assert storable(clean) == clean


def test_inbound_text_is_made_storable_and_must_be_text() -> None:
    inbound = Inbound(platform="console", chat_id="c", chat_type="dm", thread_id=None, user_id="u",
                      user_name="A\x00nn", message_id="1", text="hi \udc00")
    assert (inbound.text, inbound.user_name) == ("hi \ufffd", "A\ufffdnn")
    with pytest.raises(TypeError, match="must be text"):
        Inbound(platform="console", chat_id="c", chat_type="dm", thread_id=None, user_id="u", user_name="A",
                message_id="1", text=123)  # type: ignore[arg-type]


def test_status_shows_what_the_next_request_will_hold() -> None:
    figures = StatusFigures("s", 450, "usage", 4_096, 2_611, 3_481, 5_000, 12, 3, "compressor", "m",
                            next_request_tokens=2_300, tool_count=2)
    text = format_status(figures)
    # Each says what it is: the model's own figure for the last request, and Concord's count of the next one.
    assert "Context: 450 / 4,096 tokens (11%, last real prompt: the size the model reported for its last " \
           "request)" in text
    assert "Next request: 2,300 / 4,096 tokens (56%: 12 messages, system prompt, 2 tool schemas, as counted " \
           "here before your next message)" in text
    counted = format_status(StatusFigures("s", 450, "count", 4_096, 2_611, 3_481, 5_000, 12, 3, "compressor", "m"))
    assert "(11%, counted: no request has reported its size yet)" in counted
