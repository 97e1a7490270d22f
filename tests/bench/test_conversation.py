"""``python -m bench.conversation``: the server's prompt-cache model bills by Anthropic's rules, and a short replay
through the gateway measures what it should."""

from __future__ import annotations

from typing import Any

import pytest

from bench import conversation
from bench._prompt_cache import PRICES, Billed, PromptCache, request_blocks
from bench.compress import REPO_ROOT

MARK = {"type": "ephemeral"}
LINES = [f"Caroline: line {i} of the conversation, about the trip to the lake and what we packed for it" for i in range(40)]


def count(text: str) -> int:
    return len(text.split())


def body(*messages: str, marked: tuple[int, ...] = (), system: str = "brief " * 50) -> dict[str, Any]:
    """An Anthropic request: a marked system prompt and one text block per message (``marked``: their indexes)."""
    return {"system": [{"type": "text", "text": system, "cache_control": MARK}],
            "messages": [{"role": "user" if i % 2 == 0 else "assistant",
                          "content": [{"type": "text", "text": text, **({"cache_control": MARK} if i in marked else {})}]}
                         for i, text in enumerate(messages)]}


def bill(cache: PromptCache, request: dict[str, Any], at: float = 0.0, output: int = 0) -> Billed:
    return cache.bill(request_blocks(request, count), output, at)


def test_a_grown_request_reads_what_the_previous_one_wrote_at_its_breakpoints() -> None:
    cache = PromptCache()
    first = bill(cache, body("a " * 100, marked=(0,)))
    assert (first.read, first.written, first.uncached, first.stable) == (0, 50 + 103, 0, 50)
    second = bill(cache, body("a " * 100, "b " * 10, "c " * 10, marked=(2,)), at=10)
    assert second.read == 153 and second.written == 26 and second.uncached == 0 and second.common_prefix == 153
    assert second.dollars() == pytest.approx((153 * PRICES.cache_read + 26 * PRICES.cache_write) / 1e6)


def test_a_changed_block_changes_every_later_one_and_markers_are_not_content() -> None:
    cache = PromptCache()
    bill(cache, body("a", "b", "c", marked=(2,)))
    moved = bill(cache, body("a", "b", "c", "d", marked=(3,)), at=1)  # same blocks, the marker moved
    assert moved.read == moved.prompt - 4
    changed = bill(cache, body("A", "b", "c", "d", marked=(3,)), at=2)
    assert changed.read == 50  # only the system prompt: its own breakpoint was written before
    other_system = bill(cache, body("a", "b", "c", "d", marked=(3,), system="other"), at=3)
    assert other_system.read == 0 and other_system.common_prefix == 0


def test_tokens_after_the_last_breakpoint_are_plain_input_and_the_cache_expires() -> None:
    cache = PromptCache()
    bill(cache, body("a " * 10, "b " * 10, marked=(0,)))
    late = bill(cache, body("a " * 10, "b " * 10, marked=(0,)), at=301)
    assert late.read == 0 and late.written == 50 + 13 and late.uncached == 13


def test_the_lookback_finds_a_cached_prefix_at_most_20_blocks_before_a_breakpoint() -> None:
    cache = PromptCache()
    words = [f"w{i}" for i in range(60)]
    bill(cache, body(*words[:10], marked=(9,)))
    near = bill(cache, body(*words[:30], marked=(29,)), at=1)  # 20 blocks on: found
    assert near.read == 50 + 10 * 4
    cache = PromptCache()
    bill(cache, body(*words[:10], marked=(9,)))
    far = bill(cache, body(*words[:31], marked=(30,)), at=1)  # 21 blocks on: only the system prompt's entry
    assert far.read == 50 and far.common_prefix == 50 + 10 * 4


async def test_a_short_replay_through_the_gateway_measures_waits_cache_and_cost() -> None:
    off = await conversation.replay(REPO_ROOT, LINES, 200_000, compaction=False, summary_seconds=0, idle_s=0.02)
    assert off.fits and off.summaries == 0 and off.waited == 0 and off.system_prompts == 1
    assert off.read_share > 0.8  # a growing conversation reads everything its previous request sent
    # Lines further apart than a summary call takes, as the benchmark's are (10 s against 5 s): with 20 ms, a busy
    # machine's compaction ahead of need had not ended when the next lines came (CI: 5 waits against 4).
    on = await conversation.replay(REPO_ROOT, LINES, 2_048, compaction=True, summary_seconds=0.2, idle_s=0.3)
    assert on.answered == len(LINES) and on.refused == 0
    assert on.summaries >= 2 and on.compactions >= 2
    # Compaction ahead of need: the summaries run after answers, while nobody waits — fewer turns wait than with it
    # off (not none: at 2K a line that would not fit waits for the compaction running on a slow machine).
    waiting = await conversation.replay(REPO_ROOT, LINES, 2_048, compaction=True, summary_seconds=0.2, idle_s=0.3,
                                        ahead=False)
    assert waiting.answered == len(LINES) and waiting.compactions >= 2 and waiting.waited >= 1
    assert on.waited < waiting.waited
    assert on.system_prompts == 1 and on.stable_read == on.compactions and on.max_breakpoints <= 4
    assert on.dollars_per_1000 > 0 and on.first_token_p99 >= on.first_token_p50
    # The breakdown adds up: in all, and for the summary calls apart (which are sent without cache markers).
    assert sum(on.split_per_1000) == pytest.approx(on.dollars_per_1000)
    assert on.summary_dollars_per_1000 > 0
    assert sum(on.summary_split_per_1000) == pytest.approx(on.summary_dollars_per_1000)
    assert on.summary_split_per_1000[:2] == (0.0, 0.0)
