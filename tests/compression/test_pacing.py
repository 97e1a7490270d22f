"""When a compaction runs ahead of need (`agent.compression.pacing`) and how many turns a session went since its
last compaction (`gateway.conversation.ahead.turns_since_compaction`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent.compression.pacing import (
    SOFT_MARK_MIN_SHARE,
    TYPICAL_TURN_TOKENS,
    ahead_due,
    min_turns_between,
    soft_mark,
    turn_tokens,
)
from agent.compression.threshold import compute_threshold_tokens, output_reserve
from gateway.conversation.ahead import conversation_pace, turns_since_compaction
from gateway.store import CompactionInfo


def _threshold(window: int) -> int:
    """The threshold the gateway's compressor uses at ``window`` (default settings)."""
    return compute_threshold_tokens(window, 0.50, output_reserve(None, window))


@pytest.mark.parametrize(("window", "threshold", "turns"), [
    (8_192, 5_222, 5), (16_384, 10_444, 10), (32_768, 20_889, 20), (131_072, 64_000, 64), (200_000, 95_904, 64)])
def test_the_turns_between_compactions_follow_the_window(window: int, threshold: int, turns: int) -> None:
    assert _threshold(window) == threshold
    assert min_turns_between(threshold) == turns


def test_the_soft_mark_is_three_of_the_conversations_turns_below_the_threshold_within_bounds() -> None:
    threshold = _threshold(32_768)
    assert soft_mark(threshold, 1_000) == threshold - 3_000
    assert soft_mark(threshold) == soft_mark(threshold, 10) == int(threshold * 0.95)  # a margin above the last turn
    assert soft_mark(threshold, 5_000) == int(threshold * SOFT_MARK_MIN_SHARE)  # pastes: room for a burst
    small = _threshold(8_192)  # no turns measured yet: a typical pace
    assert soft_mark(small) == small - 3 * TYPICAL_TURN_TOKENS
    assert soft_mark(small, 450) == int(small * SOFT_MARK_MIN_SHARE)


def test_a_conversations_pace_is_the_tokens_its_turns_added() -> None:
    assert turn_tokens([100, 200, 50, 250], 2) == 300
    assert turn_tokens([], 0) == TYPICAL_TURN_TOKENS


def test_a_tiny_window_still_keeps_turns_between_compactions() -> None:
    assert min_turns_between(_threshold(2_048)) == 2
    assert min_turns_between(1) == 2


def test_below_the_soft_mark_nothing_is_due_whatever_the_turns() -> None:
    threshold = _threshold(8_192)
    assert not ahead_due(soft_mark(threshold) - 1, threshold, None)
    assert not ahead_due(soft_mark(threshold) - 1, threshold, 1_000)
    assert ahead_due(soft_mark(threshold) - 1, threshold, None, pace=400)  # a faster conversation: earlier
    assert not ahead_due(10_000, 0, None)  # an engine without a threshold


def test_past_the_soft_mark_a_compaction_waits_for_its_turns() -> None:
    threshold = _threshold(32_768)
    tokens, turns = soft_mark(threshold), min_turns_between(threshold)
    assert ahead_due(tokens, threshold, None)  # never compacted (or not known): due
    assert not ahead_due(tokens, threshold, turns - 1)
    assert ahead_due(tokens, threshold, turns)
    assert not ahead_due(threshold - 1, threshold, 0)


def test_at_the_threshold_the_window_demands_it_even_right_after_a_compaction() -> None:
    threshold = _threshold(8_192)
    assert ahead_due(threshold, threshold, 0)
    assert ahead_due(threshold * 2, threshold, 1)


def _info(active_after: int | None) -> CompactionInfo:
    return CompactionInfo(at=datetime(2030, 1, 1, tzinfo=UTC), reason="ahead of need", tokens_before=900,
                          tokens_after=300, active_after=active_after)


def test_turns_since_a_compaction_are_the_user_messages_appended_after_its_set() -> None:
    messages = [{"role": "user", "content": "[summary]"}, {"role": "user", "content": "kept"},
                {"role": "assistant", "content": "kept answer"},
                {"role": "user", "content": "new 1"}, {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "new 2"}, {"role": "assistant", "content": "a2"}]
    assert turns_since_compaction(messages, _info(3)) == 2
    assert turns_since_compaction(messages, _info(7)) == 0
    assert turns_since_compaction(messages, None) is None  # never compacted
    assert turns_since_compaction(messages, _info(None)) is None  # stored before the store recorded it


def test_the_pace_is_measured_since_the_last_compaction_or_over_the_whole_set() -> None:
    messages = [{"role": "user", "content": "[summary]"}, {"role": "assistant", "content": "kept"},
                {"role": "user", "content": "new"}, {"role": "assistant", "content": "a long answer"}]
    counts = [900, 50, 20, 280]
    assert conversation_pace(messages, counts, _info(2)) == (1, 300)
    assert conversation_pace(messages, counts, None) == (None, 625)  # never compacted: every turn stored
    assert conversation_pace(messages, counts, _info(4)) == (0, 625)  # nothing since: the whole set
