"""Counting once per compression: the count-cache key, counts handed in by the caller, the middle
serialized newest-first only as far as the summary window allows, and the prompt's size from block counts."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.compression.messages import content_text
from agent.compression.parts import serialize_parts
from agent.compression.redact import redact_secrets
from agent.compression.summary import (
    SUMMARIZER_SYSTEM,
    derive_focus_topic,
    serialize_message,
    strip_summary,
)
from agent.tokens import TokenCounter, TokenLedger, count_key, get_counter
from bench.corpus import iter_transcripts
from tests.compression.helpers import (
    ScriptedProvider,
    assistant,
    call,
    coding_session,
    image_part,
    make_compressor,
    result,
    system,
    user,
)

Message = dict[str, Any]
Messages = list[Message]


@pytest.fixture
def tokenized(monkeypatch: pytest.MonkeyPatch) -> Callable[[TokenCounter], list[str]]:
    """Record every text a counter tokenizes."""

    def wrap(counter: TokenCounter) -> list[str]:
        calls: list[str] = []
        real = counter.count_text

        def spy(text: str) -> int:
            calls.append(text)
            return real(text)

        monkeypatch.setattr(counter, "count_text", spy)
        return calls

    return wrap


def _varied_messages() -> Messages:
    long_text = "0123456789abcdef" * 2_000
    return [
        system(), user("short"), user("short"), {"role": "user", "content": "short", "name": "bob"},
        assistant("short"), user(long_text), user(long_text + "!"), user([{"type": "text", "text": "short"}]),
        user([{"type": "text", "text": "short"}, image_part()]),
        call("c1", "read_file", {"path": "/a"}), call("c1", "read_file", {"path": "/b"}),
        call("c2", "read_file", {"path": "/a"}, text="short"), result("c1", "short"),
        {"role": "assistant", "content": None, "tool_calls": []},
    ]


# ----------------------------------------------------------------------------------------- the cache key


def test_count_key_separates_whatever_changes_the_count_and_nothing_else() -> None:
    counter = get_counter()
    messages = _varied_messages()
    by_key: dict[tuple[Any, ...], int] = {}
    for message in messages:
        exact = counter._uncached_message(message)
        assert by_key.setdefault(count_key(message), exact) == exact, message
        assert counter.count_message(message) == exact
    # Equal messages share a key (copies too), and so does the same text sent as a text part, which costs
    # the same; role, name, text, tool calls and images all separate keys.
    assert count_key(messages[1]) == count_key(dict(messages[2])) == count_key(messages[7])
    assert len({count_key(m) for m in messages}) == len(messages) - 2


def test_count_key_of_a_long_text_is_a_fixed_size_digest() -> None:
    huge = user("x" * 1_000_000)
    key = count_key(huge)
    assert isinstance(key[-1], bytes) and len(key[-1]) == 16
    assert count_key(user("x" * 999_999 + "y")) != key
    assert count_key(user("short text"))[-1] == "short text"  # short texts are their own key: no hashing


def test_equal_messages_of_one_list_are_tokenized_once(tokenized: Callable[[TokenCounter], list[str]]) -> None:
    counter = TokenCounter()
    calls = tokenized(counter)
    assert counter.count_each([user("same text"), user("other text"), dict(user("same text"))]) == [
        counter.count_message(user("same text")), counter.count_message(user("other text")),
        counter.count_message(user("same text"))]
    assert calls.count("same text") == 1 and calls.count("other text") == 1


def test_a_cache_hit_tokenizes_nothing(tokenized: Callable[[TokenCounter], list[str]]) -> None:
    counter = TokenCounter()
    calls = tokenized(counter)
    messages = _varied_messages()
    first = counter.count_each(messages)
    calls.clear()
    assert counter.count_each([dict(m) for m in messages]) == first
    assert calls == []


# ----------------------------------------------------------------------------------------- the ledger


def test_ledger_seeded_with_held_counts_tokenizes_only_what_is_appended(
        tokenized: Callable[[TokenCounter], list[str]]) -> None:
    counter = TokenCounter()
    calls = tokenized(counter)
    history = coding_session(5)
    held = [get_counter().count_message(m) for m in history]
    ledger = TokenLedger(counter)
    ledger.seed(history, held)
    assert ledger.sync(history) == sum(held) and calls == []
    history.append(user("one more"))
    assert ledger.sync(history) == sum(held) + counter.count_message(history[-1])
    assert ledger.counts == [*held, counter.count_message(history[-1])]
    with pytest.raises(ValueError, match="token counts"):
        ledger.seed(history, held)


# ----------------------------------------------------------------------------------------- compress(token_counts=)


def _compress(messages: Messages, **kwargs: Any) -> Any:
    provider = ScriptedProvider(["## Goal\nkept the exact value"])
    compressor = make_compressor(context_length=12_000, summary_provider=provider)
    outcome = asyncio.run(compressor.compress(messages, force=True, **kwargs))
    return outcome, provider


def test_held_counts_give_the_same_result_and_spare_tokenizing_the_input(
        tokenized: Callable[[TokenCounter], list[str]]) -> None:
    messages = coding_session(40)
    held = [get_counter().count_message(m) for m in messages]
    plain, plain_provider = _compress(messages)
    counter = make_compressor()._counter
    calls = tokenized(counter)
    counter._cache.clear()
    given, given_provider = _compress(messages, token_counts=held)
    assert given.compressed and given.summary_kind == "llm"
    assert given.messages == plain.messages and given.stats() == plain.stats()
    assert given_provider.calls == plain_provider.calls
    inputs = {content_text(m) for m in messages[given.tail_start:]}  # kept verbatim: never counted again
    assert not inputs & set(calls)


def test_result_carries_the_exact_count_of_each_of_its_messages() -> None:
    messages = coding_session(40)
    outcome, _ = _compress(messages)
    counter = get_counter()
    assert list(outcome.token_counts) == [counter.count_message(m) for m in outcome.messages]
    assert sum(outcome.token_counts) == outcome.tokens_after
    few = [system(), user("hi")]
    unchanged, _ = _compress(few, token_counts=[7, 9])
    assert not unchanged.compressed and unchanged.token_counts == (7, 9) and unchanged.tokens_before == 16


def test_held_counts_of_the_wrong_length_are_refused() -> None:
    with pytest.raises(ValueError, match="2 messages but 1 token counts"):
        _compress([system(), user("hi")], token_counts=[5])


# ----------------------------------------------------------------------------------------- serialization


def _newest_first(blocks: Sequence[str], limit: int, counter: TokenCounter) -> tuple[str, int]:
    """What a newest-first serialization of ``blocks`` keeps within ``limit``, and how many it leaves out."""
    kept: list[str] = []
    used = 0
    for block in reversed(blocks):
        cost = counter.count_text(block) + 2
        if used + cost > limit and kept:
            break
        kept.append(block)
        used += cost
    return "\n\n".join(kept[::-1]), len(blocks) - len(kept)


def test_newest_first_serialization_keeps_exactly_what_fits(corpus_root: Path) -> None:
    counter = get_counter()
    kinds = ("claude_code", "miniswe", "irc")
    transcripts = [t for t in iter_transcripts(corpus_root, kinds) if len(t.messages) > 40]
    picked = [next(t for t in transcripts if t.corpus == kind) for kind in kinds]
    rng = random.Random(15)
    for transcript in picked:
        middle = transcript.messages[1:-10]
        blocks = [serialize_message(m) for m in middle]
        sizes = [counter.count_text(b) + 2 for b in blocks]
        for limit in (max(sizes), rng.randrange(max(sizes), sum(sizes) + 1), sum(sizes) + 10):
            parts = serialize_parts(middle, limit, counter, max_parts=1)
            text, omitted = _newest_first(blocks, limit, counter)
            assert parts.parts == (text,) and parts.older == omitted, (transcript.name, limit)
            # The block sum is what the prompt is budgeted at: never below the exact count.
            assert parts.tokens[0] >= counter.count_text(text)


def test_only_what_fits_is_serialized(monkeypatch: pytest.MonkeyPatch) -> None:
    import agent.compression.summary as summary

    seen: list[str] = []
    real = summary.redact_secrets
    monkeypatch.setattr(summary, "redact_secrets", lambda text: seen.append(text) or real(text))
    middle = [user(f"message {i} " + "word " * 50) for i in range(2_000)]
    parts = serialize_parts(middle, 2_000, get_counter(), max_parts=1)
    assert parts.older > 1_950  # most were left out of the parts (a static summary covers them)…
    assert len(seen) < 60  # …and never serialized or redacted


def _old_focus(messages: Sequence[Message], turns: int = 3) -> str:
    texts = (strip_summary(content_text(m)).strip() for m in messages if m.get("role") == "user")
    asks = [text for text in texts if text]
    return redact_secrets(" | ".join(" ".join(a.split()) for a in asks[-turns:])[-300:])


def test_focus_topic_read_from_the_newest_asks_only_is_unchanged() -> None:
    rng = random.Random(7)
    for _ in range(200):
        messages: Messages = []
        for _ in range(rng.randrange(0, 12)):
            role = rng.choice(["user", "assistant", "tool"])
            text = rng.choice(["", "   ", "fix the build", "password=hunter22 now", "x " * rng.randrange(1, 200)])
            messages.append({"role": role, "content": text})
        assert derive_focus_topic(messages) == _old_focus(messages)


# ----------------------------------------------------------------------------------------- prompt size


def test_prompt_plus_output_cap_fits_the_summary_window_when_it_binds() -> None:
    counter = get_counter()
    messages = coding_session(120, output_lines=60)
    provider = ScriptedProvider(["## Goal\nok"])
    compressor = make_compressor(context_length=60_000, summary_context_length=45_000, summary_provider=provider)
    outcome = asyncio.run(compressor.compress(messages, force=True))
    assert outcome.summary_kind == "llm"
    sent = provider.calls[0]
    prompt_tokens = counter.count_text(sent["messages"][0]["content"]) + counter.count_text(SUMMARIZER_SYSTEM)
    assert prompt_tokens + sent["max_tokens"] <= 45_000


def test_the_plan_with_held_counts_agrees_and_tokenizes_nothing(
        tokenized: Callable[[TokenCounter], list[str]]) -> None:
    messages = coding_session(40)
    held = [get_counter().count_message(m) for m in messages]
    compressor = make_compressor(context_length=12_000, summary_provider=ScriptedProvider([]))
    few = [system(), user("hi")]
    assert compressor.will_summarize(messages) is compressor.will_summarize(messages, token_counts=held) is True
    assert compressor.has_content_to_compress(few, token_counts=[3, 4]) is False
    calls = tokenized(compressor._counter)
    compressor._counter._cache.clear()
    assert compressor.will_summarize(messages, token_counts=held)
    assert not {content_text(m) for m in messages} & set(calls)
