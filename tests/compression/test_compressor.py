"""ContextCompressor orchestration and state (R-C0, R-C5…R-C7, R-C10, R-E1, R-P1/R-P2 hooks)."""

from __future__ import annotations

import json
import re

import pytest

from agent.compression.registry import create_context_engine
from agent.compression.summary import SUMMARY_END_MARKER, SUMMARY_PREFIX, format_summary
from agent.llm.base import Usage
from tests.compression.helpers import (
    Clock,
    ScriptedProvider,
    assistant,
    check_invariants,
    coding_session,
    make_compressor,
    system,
    user,
)


async def test_guard_returns_short_transcripts_unchanged() -> None:
    compressor = make_compressor()
    messages = [system(), user("a"), assistant("b"), user("c"), assistant("d"), user("e"), assistant("f"), user("g")]
    out = await compressor.compress(messages)
    assert out.messages == messages and not out.compressed and out.reason.endswith("too few messages")
    assert compressor.ineffective_count == 0
    assert not compressor.has_content_to_compress(messages)


async def test_static_compression_end_to_end() -> None:
    compressor = make_compressor()
    messages = coding_session(20)
    snapshot = json.dumps(messages)
    assert compressor.has_content_to_compress(messages)
    out = await compressor.compress(messages)
    assert json.dumps(messages) == snapshot, "input not mutated"
    assert out.compressed and out.summary_kind == "static" and not out.aborted
    assert out.tokens_after < out.tokens_before and out.messages_after < out.messages_before
    assert out.head_end == 4 and out.pruned > 0
    assert out.messages[0] == messages[0], "the system prompt is kept byte for byte (the cache's stable prefix)"
    summary = out.messages[out.head_end]
    assert summary["content"].startswith(SUMMARY_PREFIX) and summary["content"].endswith(SUMMARY_END_MARKER)
    assert out.messages[-8:] == messages[-8:], "the protected tail (8 messages here) is verbatim"
    check_invariants(messages, out.messages, compressed=True)
    assert compressor.compression_count == 1 and compressor.last_prompt_tokens == -1
    assert compressor.last_compression is out and compressor.last_compression_stats == out.stats()


async def test_head_decays_to_system_prompt_after_first_compression() -> None:
    compressor = make_compressor()
    first = await compressor.compress(coding_session(20))
    grown = first.messages + coding_session(15)[1:]
    second = await compressor.compress(grown)
    assert second.compressed and second.head_end == 1
    assert second.messages[0] == first.messages[0] == coding_session(20)[0], "the system prompt never changes"
    assert compressor.compression_count == 2


async def test_llm_summary_is_used_and_fed_back_next_time() -> None:
    provider = ScriptedProvider(["## Goal\nfirst summary body", "## Goal\nsecond summary body"])
    compressor = make_compressor(summary_provider=provider)
    first = await compressor.compress(coding_session(20), focus_topic="tests of m3")
    assert first.summary_kind == "llm" and first.reason == ""
    assert "first summary body" in first.messages[first.head_end]["content"]
    prompt = provider.calls[0]["messages"][0]["content"]
    assert "FOCUS TOPIC (requested by the user): tests of m3" in prompt and "PREVIOUS SUMMARY" not in prompt
    # max_tokens matches the target the prompt asks for (a quarter more, to finish the last line).
    target = int(re.search(r"Target length: about ([\d,]+) tokens", prompt)[1].replace(",", ""))
    assert provider.calls[0]["max_tokens"] == int(target * 1.25) and target <= compressor.threshold_tokens // 10
    await compressor.compress(first.messages + coding_session(15)[1:])
    second_prompt = provider.calls[1]["messages"][0]["content"]
    # The previous summary comes back whole: its coverage line first, then the model's text.
    assert "PREVIOUS SUMMARY:\nMessages #4–#33 of this" in second_prompt and "## Goal\nfirst summary body" in second_prompt
    assert "inferred from the latest turns" in second_prompt


async def test_previous_summary_rehydrates_from_messages_and_foreign_one_is_dropped() -> None:
    compressor = make_compressor()
    resumed = [system(), assistant(format_summary("## Goal\nresumed goal")), *coding_session(20)[1:]]
    compressor.on_session_start("s1", resumed)
    assert compressor.previous_summary == "## Goal\nresumed goal"
    fresh = coding_session(20)
    out = await compressor.compress(fresh)
    assert out.head_end == 4, "no summary in these messages: not decayed, foreign summary dropped"
    assert "resumed goal" not in out.messages[out.head_end]["content"]


async def test_has_content_ignores_a_remembered_foreign_summary_like_compress_does() -> None:
    # R-C10 must answer for the compress() that would follow; compress() drops a remembered summary that is not
    # in the messages (R-C7), so the head does not decay and everything here is in the protected head and tail.
    compressor = make_compressor(protect_first_n=3, protect_last_n=3)
    compressor.on_session_start("s1", [system(), assistant(format_summary("## Goal\nother session"))])
    words = "word " * 200
    messages = [system(), *(user(f"u{i} {words}") if i % 2 == 0 else assistant(f"a{i} {words}") for i in range(8))]
    predicted = compressor.has_content_to_compress(messages)
    out = await compressor.compress(messages)
    assert not out.compressed and out.reason.endswith("protected head and tail")
    assert predicted is out.compressed


async def test_anti_thrashing_escalates_instead_of_switching_compression_off() -> None:
    compressor = make_compressor(context_length=8_000)
    assert not compressor.should_compress(compressor.threshold_tokens - 1)
    assert compressor.should_compress(compressor.threshold_tokens)
    tiny = [system()] + [user("x"), assistant("y")] * 5
    for _ in range(2):
        out = await compressor.compress(tiny)
        assert not out.compressed and "protected head and tail" in out.reason
    assert compressor.ineffective_count == 2
    assert compressor.should_compress(10**6)  # never "off" (R-C6 as issue 24 redefines it)
    # Level 2: the tail is the live message (and what follows it) alone, the reply before it no longer kept.
    session = coding_session(20)
    live = max(i for i, m in enumerate(session) if m["role"] == "user")
    out = await compressor.compress(session)
    assert out.compressed and out.savings_pct >= 0.10
    tail = session[live:]
    assert out.messages[-len(tail):] == tail and SUMMARY_PREFIX in out.messages[-len(tail) - 1]["content"]
    assert compressor.ineffective_count == 0 and compressor.should_compress(10**6)
    compressor.on_session_reset()
    assert compressor.compression_count == 0 and compressor.previous_summary is None


async def test_the_escalation_level_survives_a_restart_and_is_never_off() -> None:
    compressor = make_compressor(context_length=8_000)
    tiny = [system()] + [user("x"), assistant("y")] * 5
    for _ in range(4):
        await compressor.compress(tiny)
    restored = make_compressor(context_length=8_000)
    restored.load_state(compressor.export_state())
    assert restored.ineffective_count == 4 and restored.should_compress(10**6)
    assert not restored.will_summarize(coding_session(20))  # past the paid levels: the static summary
    out = await restored.compress(coding_session(20))
    assert out.compressed and out.summary_kind == "static" and restored.ineffective_count == 0


async def test_low_savings_raise_the_level_and_the_next_compression_cuts_harder() -> None:
    compressor = make_compressor(context_length=200_000)
    # Big tail messages, each still under the clipping limit (clip_limit(100_000, 8) = 9,375 tokens), that
    # leave the planned result within the threshold's room (a manual /compress below the threshold).
    huge = " ".join(f"word{k}" for k in range(2_500))
    messages = [system(), *[m for i in range(10) for m in (user(f"question {i}"), assistant(f"answer {i} " + huge[:1_500]))],
                *[m for i in range(4) for m in (user(f"{i} {huge}"), assistant(f"{i} {huge}"))]]
    out = await compressor.compress(messages)
    assert out.compressed and 0 < out.savings_pct < 0.10
    assert compressor.ineffective_count == 1 and compressor.should_compress(150_000)
    again = await compressor.compress(messages)
    assert again.compressed and again.savings_pct > 0.5 and len(again.messages) < len(out.messages)
    assert compressor.ineffective_count == 0


async def test_update_from_response_and_deferral() -> None:
    compressor = make_compressor()
    compressor.update_from_response(Usage(prompt_tokens=1234, completion_tokens=99_999))
    assert compressor.last_prompt_tokens == 1234 and not compressor.deferred_to_real_usage
    await compressor.compress(coding_session(20))
    assert compressor.last_prompt_tokens == -1 and not compressor.should_compress()
    compressor.update_from_response(Usage(prompt_tokens=compressor.threshold_tokens - 1))
    assert compressor.deferred_to_real_usage
    compressor.update_from_response(Usage(prompt_tokens=compressor.threshold_tokens - 1))
    assert compressor.deferred_to_real_usage
    compressor.update_from_response(None)
    assert compressor.last_prompt_tokens == 0 and not compressor.deferred_to_real_usage
    await compressor.compress(coding_session(20))
    compressor.update_from_response(Usage(prompt_tokens=compressor.threshold_tokens))
    assert not compressor.deferred_to_real_usage and compressor.should_compress()


async def test_a_summary_longer_than_asked_is_shortened_not_thrown_away() -> None:
    # A small model rambling past its target: the summary was paid for, and its first lines are kept.
    lines = [f"- fact {i}: " + "very long summary " * 20 for i in range(200)]
    provider = ScriptedProvider(["## Goal\nfinish the m-series\n\n## Key Decisions\n" + "\n".join(lines)])
    compressor = make_compressor(summary_provider=provider)
    messages = coding_session(20)
    out = await compressor.compress(messages)
    assert out.compressed and out.summary_kind == "llm" and out.reason == ""
    summary = out.messages[out.head_end]["content"]
    assert "finish the m-series" in summary and "- fact 0:" in summary and "- fact 199:" not in summary
    assert out.tokens_after < out.tokens_before
    assert compressor.compression_count == 1


def test_export_and_load_state_round_trip_with_wall_clock_cooldown() -> None:
    clock, wall = Clock(500.0), Clock(1_700_000_000.0)
    compressor = make_compressor(clock=clock, wall_clock=wall)
    compressor._state.cooldown_until = 530.0
    compressor._state.compression_count = 3
    compressor._state.previous_summary = "## Goal\nx"
    compressor.lower_context_length(6_000)
    data = compressor.export_state()
    assert json.loads(json.dumps(data)) == data
    assert data["cooldown_until_wall"] == 1_700_000_030.0 and data["context_length"] == 6_000

    later_clock, later_wall = Clock(10.0), Clock(1_700_000_010.0)
    restored = make_compressor(clock=later_clock, wall_clock=later_wall)
    restored.load_state(data)
    assert restored.cooldown_remaining == pytest.approx(20.0)
    assert restored.compression_count == 3 and restored.previous_summary == "## Goal\nx"
    assert restored.context_length == 6_000 and restored.threshold_tokens == compressor.threshold_tokens

    expired = make_compressor(clock=Clock(0.0), wall_clock=Clock(1_700_000_100.0))
    expired.load_state(data)
    assert expired.cooldown_remaining == 0.0
    with pytest.raises(ValueError, match="unsupported"):
        expired.load_state({"version": 99})


def test_lower_context_length_recomputes_threshold() -> None:
    compressor = make_compressor(context_length=200_000)
    assert compressor.threshold_tokens == 100_000 and compressor.tail_token_budget == 20_000
    assert compressor.max_summary_tokens == 10_000
    assert compressor.lower_context_length(100_000) == 64_000
    assert compressor.lower_context_length(150_000) == 64_000, "never raised"
    with pytest.raises(ValueError):
        compressor.lower_context_length(0)


def test_autoraise_and_validation() -> None:
    raised = make_compressor(context_length=272_000, provider_name="codex-oauth", model="gpt-5.5")
    assert raised.threshold_tokens == int(272_000 * 0.85)
    plain = make_compressor(context_length=272_000, provider_name="codex-oauth", model="gpt-5.5", autoraise=False)
    assert plain.threshold_tokens == 136_000
    for bad in ({"context_length": 0}, {"threshold": 1.5}, {"target_ratio": 0}, {"protect_last_n": -1}):
        with pytest.raises(ValueError):
            make_compressor(**bad)


def test_builtin_engine_is_selected_by_name() -> None:
    engine = create_context_engine("compressor", context_length=200_000, summary_provider=None)
    assert engine.threshold_tokens == 100_000 and engine.tools() == []


def test_public_surface_is_pinned() -> None:
    import agent.compression as package

    assert sorted(package.__all__) == package.__all__
    assert set(package.__all__) == {
        "BUILTIN_ENGINE", "CompressionResult", "ContextCompressor", "ContextEngine", "EngineNotFound",
        "SummaryModelTooSmall", "create_context_engine", "register_context_engine",
    }


def test_engine_fields_are_settable_and_gateway_style_state_loads() -> None:
    compressor = make_compressor()
    compressor.last_prompt_tokens = -1
    compressor.compression_count = 2
    compressor.update_from_response(Usage(prompt_tokens=10))
    assert compressor.deferred_to_real_usage and compressor.compression_count == 2
    restored = make_compressor()
    restored.load_state({"version": 1, "context_length": None, "compression_count": 1, "ineffective_count": 0,
                         "previous_summary": None, "cooldown_until_wall": None, "last_prompt_tokens": -1})
    restored.update_from_response(Usage(prompt_tokens=10))
    assert restored.deferred_to_real_usage and restored.compression_count == 1


async def test_a_compaction_ahead_of_need_frees_the_room_the_thresholds_would() -> None:
    # Below the threshold by its lead: kept as at the threshold, the result would be the same and the next
    # compaction that much sooner; ahead of need the tail keeps the lead less (the summary is the same size).
    messages = [system(), *[m for i in range(36) for m in (user(f"question {i} " + "about the lake " * 20),
                                                         assistant(f"answer {i} " + "noted, and more " * 20))]]
    compressor = make_compressor()
    counts = compressor._counter.count_each(messages)
    lead = compressor.threshold_tokens - sum(counts)
    assert 600 < lead < compressor.tail_token_budget
    plain = await make_compressor().compress(messages)
    ahead = await make_compressor().compress(messages, ahead_of_need=True)
    assert plain.compressed and ahead.compressed
    check_invariants(messages, ahead.messages, True)
    assert ahead.tail_start > plain.tail_start
    turn = max(counts[1:])
    assert plain.tokens_after - lead - turn <= ahead.tokens_after <= plain.tokens_after - lead + turn
    # At the threshold (no lead) it is the compaction it always was.
    over = [*messages, user("one more " + "about the lake " * 20), assistant("noted " * 1200)]
    assert (await make_compressor().compress(over, ahead_of_need=True)).messages == \
        (await make_compressor().compress(over)).messages
