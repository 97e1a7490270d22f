"""The hygiene decision (R-G3): 85% of the window, or more than the hard message limit."""

from __future__ import annotations

from agent.tokens import get_counter
from gateway.conversation.hygiene import REASON_MESSAGES, REASON_TOKENS, check_hygiene, session_tokens


def _check(tokens: int, messages: int = 10) -> object:
    return check_hygiene(tokens=tokens, token_source="usage", message_count=messages, context_length=10_000,
                         threshold=0.85, hard_message_limit=5000)


def test_below_85_percent_is_left_alone() -> None:
    check = _check(8_499)
    assert not check.needed and check.token_limit == 8_500


def test_at_85_percent_compresses() -> None:
    check = _check(8_500)
    assert check.needed and check.reason == REASON_TOKENS


def test_message_limit_compresses_regardless_of_tokens() -> None:
    assert not _check(10, messages=5000).needed
    check = _check(10, messages=5001)
    assert check.needed and check.reason == REASON_MESSAGES


def test_session_tokens_prefers_real_usage_then_counts_exactly() -> None:
    counter = get_counter()
    messages = [{"role": "user", "content": "hello there " * 50}]
    assert session_tokens(1234, messages, counter) == (1234, "usage")
    for sentinel in (0, -1):
        tokens, source = session_tokens(sentinel, messages, counter, system="be nice")
        assert source == "count"
        assert tokens == counter.count_request(messages, system="be nice") > 100
    # Tool schemas are part of the request, so they count (R-T2).
    schema = [{"type": "function", "function": {"name": "lookup", "description": "find things " * 40,
                                                "parameters": {"type": "object", "properties": {}}}}]
    with_tools, _ = session_tokens(0, messages, counter, system="be nice", tools=schema)
    assert with_tools == counter.count_request(messages, system="be nice", tools=schema) > tokens + 40
