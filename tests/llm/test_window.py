"""Which window is used, and what is learned later: choose_window, TruncationWatch, ServedWindow."""

from __future__ import annotations

import logging

import pytest

from agent.llm.models import ProviderSpec
from agent.llm.window import (
    CONFIGURED,
    LEARNED_OVERFLOW,
    ServedWindow,
    TruncationWatch,
    choose_window,
    resolve_served_window,
    window_key,
)
from agent.llm.window_probe import WindowReport
from tests.fakes.llm_server import FakeLLMServer

REPORT = WindowReport(8_192, "llama.cpp /props")


def test_a_report_wins_over_table_and_learned_and_is_capped_by_the_configured_value() -> None:
    assert choose_window(reported=REPORT, configured=None, learned=(4_096, LEARNED_OVERFLOW), table=131_072,
                         default=128_000) == (8_192, "reported by the server (llama.cpp /props)")
    tokens, source = choose_window(reported=REPORT, configured=6_000, learned=None, table=None, default=128_000)
    assert tokens == 6_000 and source.startswith(CONFIGURED) and "the server reports 8,192" in source
    assert choose_window(reported=REPORT, configured=32_768, learned=None, table=None, default=1)[0] == 8_192


def test_without_a_report_the_configured_value_then_the_table_capped_by_what_was_learned() -> None:
    assert choose_window(reported=None, configured=16_384, learned=(4_096, LEARNED_OVERFLOW), table=None,
                         default=128_000) == (16_384, CONFIGURED)
    assert choose_window(reported=None, configured=None, learned=(4_096, LEARNED_OVERFLOW), table=32_768,
                         default=128_000) == (4_096, LEARNED_OVERFLOW)
    assert choose_window(reported=None, configured=None, learned=None, table=32_768,
                         default=128_000)[0] == 32_768
    tokens, source = choose_window(reported=None, configured=None, learned=None, table=None, default=128_000)
    assert tokens == 128_000 and source.startswith("assumed")


def test_truncation_is_learned_when_the_reported_size_stays_flat_while_more_is_sent() -> None:
    watch = TruncationWatch()
    assert watch.observe(6_000, 3_980) is None  # one report alone proves nothing
    assert watch.observe(6_090, 4_010) is None  # nor a little more sent: whole messages come and go
    assert watch.observe(6_300, 3_995) == 4_010


def test_a_server_counting_with_another_tokenizer_is_not_truncating() -> None:
    watch = TruncationWatch()
    # Reports grow with what is sent (a tokenizer 15% thriftier than ours): nothing is learned.
    for sent in range(3_000, 9_000, 150):
        assert watch.observe(sent, int(sent * 0.85)) is None
    # A tokenizer 30% thriftier is below the share, but its reports still grow in step.
    for sent in range(3_000, 9_000, 150):
        assert watch.observe(sent, int(sent * 0.7)) is None


def test_an_old_ollama_reporting_only_the_uncached_part_is_not_truncating() -> None:
    watch = TruncationWatch()
    for sent, delta in ((5_000, 120), (5_100, 95), (5_200, 110), (9_000, 1_900), (9_100, 80)):
        assert watch.observe(sent, delta) is None


def test_a_compaction_between_two_reports_is_not_a_truncation() -> None:
    watch = TruncationWatch()
    assert watch.observe(9_000, 4_000) is None
    assert watch.observe(2_500, 2_400) is None  # the prompt shrank: not suspicious, the streak resets
    assert watch.observe(6_000, 4_000) is None
    assert watch.observe(6_400, 4_000) == 4_000


class MemoryStore:
    def __init__(self) -> None:
        self.kept: dict[str, tuple[int, str]] = {}

    async def recall(self, key: str) -> tuple[int, str] | None:
        return self.kept.get(key)

    async def remember(self, key: str, tokens: int, source: str) -> None:
        self.kept[key] = (tokens, source)


async def test_a_served_window_only_shrinks_is_stored_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    window = ServedWindow(128_000, "Concord's model table", "k", store)
    with caplog.at_level(logging.WARNING):
        assert await window.learn(8_192, LEARNED_OVERFLOW)
        assert not await window.learn(8_192, LEARNED_OVERFLOW)
        assert not await window.learn(16_384, LEARNED_OVERFLOW)
    assert (window.tokens, window.source) == (8_192, LEARNED_OVERFLOW)
    assert store.kept == {"k": (8_192, LEARNED_OVERFLOW)}
    assert len([r for r in caplog.records if "context window lowered" in r.message]) == 1
    assert window.describe() == "8,192 tokens, learned from the server's overflow error"


async def test_resolve_asks_the_server_and_falls_back_to_what_was_learned(fake_llm: FakeLLMServer) -> None:
    spec = ProviderSpec("openai", "local", fake_llm.openai_base_url)
    store = MemoryStore()
    store.kept[window_key(fake_llm.openai_base_url, "local")] = (6_000, LEARNED_OVERFLOW)
    fake_llm.reports_window = ("llamacpp", 8_192)
    reported = await resolve_served_window(spec, store=store)
    assert reported.tokens == 8_192 and "llama.cpp /props" in reported.source
    fake_llm.reports_window = None
    learned = await resolve_served_window(spec, store=store)
    assert (learned.tokens, learned.source) == (6_000, LEARNED_OVERFLOW)
    assert (await resolve_served_window(spec, store=None)).source.startswith("assumed")
