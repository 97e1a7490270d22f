"""The loop's pure parts: trigger arithmetic, the real-usage anchor, recovery plans, transcript repair, notices."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agent.engine_hooks import lower_context_length as _lower_context_length
from agent.events import aborted_notice, compression_skipped_notice
from agent.llm.errors import (
    AuthError,
    BadResponse,
    ContextOverflow,
    ImageTooLarge,
    LLMError,
    LongContextTier,
    PayloadTooLarge,
)
from agent.recovery import Action, Recovery, plan_recovery
from agent.tokens import get_counter
from agent.triggers import CountRatio, FitAnchor, cheap_gate, made_progress, post_response_tokens
from agent.turn import CANCELLED_TOOL_TEXT, close_open_tool_calls, user_message
from tests.agent.loop_support import KeepTailEngine


def test_cheap_gate() -> None:
    assert not cheap_gate(24, 100, 1_000, protect_first_n=3, protect_last_n=20)
    assert cheap_gate(25, 100, 1_000, protect_first_n=3, protect_last_n=20)
    assert cheap_gate(2, 1_000, 1_000, protect_first_n=3, protect_last_n=20)  # few but huge


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ((10, 1_000), (9, 1_000), True),  # fewer messages
        ((10, 1_000), (10, 950), True),  # exactly 5% fewer tokens
        ((10, 1_000), (10, 951), False),
        ((10, 1_000), (12, 100), True),  # more messages but 90% fewer tokens
        ((10, 0), (10, 0), False),
    ],
)
def test_made_progress(before: tuple[int, int], after: tuple[int, int], expected: bool) -> None:
    assert made_progress(*before, *after) is expected


def test_post_response_tokens() -> None:
    assert post_response_tokens(70_000) == 70_000
    assert post_response_tokens(-1) == 0  # just compressed: waiting for real usage
    assert post_response_tokens(0) is None  # no usage: the caller must estimate


def test_fit_anchor_extends_only_the_measured_request() -> None:
    counter = get_counter()
    sent = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    anchor = FitAnchor.of(500, sent, "sys")
    later = [*sent, {"role": "user", "content": "c d e"}]
    assert anchor.estimate(sent, "sys", counter) == 500
    assert anchor.estimate(later, "sys", counter) == 500 + counter.count_message(later[-1])
    assert anchor.estimate(later, "sys + compaction note", counter) is None
    edited = [sent[0], {"role": "assistant", "content": "B"}, later[-1]]
    assert anchor.estimate(edited, "sys", counter) is None
    assert anchor.estimate(sent[:1], "sys", counter) is None
    assert FitAnchor.of(3, [], "sys").estimate(later, "sys", counter) == 3 + counter.count_messages(later)
    # What the server has not seen yet, in its units: our count scaled by the ratio it showed so far.
    added = counter.count_message(later[-1])
    assert anchor.estimate(later, "sys", counter, ratio=1.5) == 500 + math.ceil(added * 1.5)


def test_the_count_ratio_learns_only_from_enough_growth_and_only_upwards() -> None:
    ratio = CountRatio()
    ratio.observe(150, 100)  # too little growth to mean anything (a chat template's framing)
    assert ratio.value == 1.0
    ratio.observe(800, 1_000)  # a thriftier tokenizer: our count stays the safe one
    assert ratio.value == 1.0
    for _ in range(20):
        ratio.observe(1_250, 1_000)
    assert 1.24 < ratio.value <= 1.25
    ratio.observe(5_000, 1_000)  # never more than half again
    assert ratio.value <= 1.5


def _plan(error: LLMError, **overrides: Any) -> Recovery:
    kwargs: dict[str, Any] = {"context_length": 200_000, "max_tokens": 4_000, "compressions_used": 0,
                                 "max_compressions": 3, "output_shrinks_left": 3, "images_shrunk": False}
    kwargs.update(overrides)
    return plan_recovery(error, **kwargs)


def test_recovery_plans() -> None:
    lowered = _plan(ContextOverflow("too long", limit=128_000))
    assert (lowered.action, lowered.context_length) == (Action.COMPRESS, 128_000)
    bigger = _plan(ContextOverflow("too long", limit=1_000_000))
    assert (bigger.action, bigger.context_length) == (Action.COMPRESS, None)
    assert _plan(PayloadTooLarge("413")).context_length is None
    assert _plan(LongContextTier("429"), context_length=1_000_000).context_length == 200_000
    spent = _plan(PayloadTooLarge("413"), compressions_used=3)
    assert spent.action is Action.STOP and "after 3 compression attempts" in spent.text
    assert _plan(ImageTooLarge("big")).action is Action.SHRINK_IMAGES
    assert _plan(ImageTooLarge("big"), images_shrunk=True).action is Action.STOP
    assert "credentials" in _plan(AuthError("401")).text
    assert "BadResponse" in _plan(BadResponse("empty")).text


def test_output_shrink_plans() -> None:
    def overflow(available: int | None, limit: int | None = 8_192) -> ContextOverflow:
        return ContextOverflow("no room", limit=limit, output_tokens_variant=True, available_output_tokens=available)

    plan = _plan(overflow(1_000))
    assert (plan.action, plan.max_tokens, plan.context_length) == (Action.SHRINK_OUTPUT, 1_000, 8_192)
    assert _plan(overflow(None, None)).max_tokens == 2_000  # halve when unstated
    assert _plan(overflow(None, None), max_tokens=None).action is Action.STOP
    assert _plan(overflow(0)).action is Action.STOP
    assert _plan(overflow(5_000)).action is Action.STOP  # would not shrink
    assert _plan(overflow(1_000), output_shrinks_left=0).action is Action.STOP


def test_lower_context_length_uses_the_engine_hook_or_the_attribute() -> None:
    engine = KeepTailEngine(context_length=200_000)
    _lower_context_length(engine, 100_000)
    assert engine.context_length == 100_000 and engine.threshold_tokens == 64_000

    class Plain:
        context_length = 200_000

    plain = Plain()
    _lower_context_length(plain, 300_000)  # type: ignore[arg-type]  # never raised
    assert plain.context_length == 200_000
    _lower_context_length(plain, 50_000)  # type: ignore[arg-type]
    assert plain.context_length == 50_000


def test_close_open_tool_calls_places_stubs_after_their_group() -> None:
    calls = [{"id": i, "type": "function", "function": {"name": "t", "arguments": "{}"}} for i in ("a", "b")]
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "user", "content": "next"},
        {"role": "assistant", "content": None, "tool_calls": [{**calls[0], "id": "c"}]},
    ]
    closed = close_open_tool_calls(messages)
    assert [(m["role"], m.get("tool_call_id")) for m in closed] == [
        ("user", None), ("assistant", None), ("tool", "b"), ("tool", "a"), ("user", None),
        ("assistant", None), ("tool", "c")]
    assert closed[3]["content"] == CANCELLED_TOOL_TEXT
    assert close_open_tool_calls(closed) == closed


def test_user_message() -> None:
    original = {"role": "user", "content": "hi", "name": "ana"}
    copy = user_message(original)
    assert copy == original and copy is not original
    assert user_message("hey") == {"role": "user", "content": "hey"}
    with pytest.raises(ValueError, match="user message"):
        user_message({"role": "assistant", "content": "x"})


def test_notice_texts() -> None:
    engine_worded = aborted_notice("Context compression aborted (auth): conversation frozen, run /compress")
    assert engine_worded.text == "⚠️ Context compression aborted (auth): conversation frozen, run /compress"
    assert "(timeout)" in aborted_notice("timeout").text and "/new" in aborted_notice("timeout").text
    assert "unknown reason" in aborted_notice("").text
    assert compression_skipped_notice(3).text.startswith("Compression skipped — last 3 compressions saved <10%")
