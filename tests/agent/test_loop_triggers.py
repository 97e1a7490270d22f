"""The loop's compression triggers over real HTTP: preflight (gate, passes, progress, real-usage anchor),
post-response (prompt tokens only, the -1 sentinel, missing usage), notices and the R-S4 follow-up."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from agent.compression.engine import CompressionResult
from agent.events import EVENT_COMPRESS
from agent.loop import AgentLoop
from agent.memory import MemoryProvider
from agent.tokens import TokenCounter, get_counter
from agent.tools.registry import Tool, ToolRegistry
from agent.turn import Compaction, StopReason
from tests.agent.loop_support import (
    NOTE,
    CompressCall,
    KeepTailEngine,
    Sinks,
    assert_tool_pairs_consistent,
    filler,
    history,
    make_provider,
)
from tests.fakes.llm_server import FakeLLMServer

THRESHOLD = 5_000


def _engine(**kwargs: Any) -> KeepTailEngine:
    kwargs.setdefault("threshold_tokens", THRESHOLD)
    return KeepTailEngine(context_length=200_000, **kwargs)


def _loop(server: FakeLLMServer, engine: KeepTailEngine, sinks: Sinks | None = None, **kwargs: Any) -> AgentLoop:
    sinks = sinks or Sinks()
    return AgentLoop(provider=make_provider(server), engine=engine, system_prompt="Be brief.", session_id="s1",
                     notices=sinks.notice, events=sinks.event, **kwargs)


def _big_tool(words: int) -> ToolRegistry:
    async def read(args: dict[str, Any]) -> str:
        return filler(words, 3)

    return ToolRegistry([Tool("read", "read a file", {"type": "object"}, read, max_result_chars=10**6)])


# --- preflight ----------------------------------------------------------------------------------------------

async def test_preflight_compresses_an_oversized_history_before_the_call(fake_llm: FakeLLMServer) -> None:
    engine, sinks = _engine(), Sinks()
    old = history(40)
    assert get_counter().count_messages(old) > THRESHOLD
    result = await _loop(fake_llm, engine, sinks).run_turn(old, "next question")
    assert len(engine.calls) == 1 and not engine.calls[0].force
    assert fake_llm.requests[0].prompt_tokens < THRESHOLD
    assert [c.trigger for c in result.compactions] == ["preflight"]
    # The engine's one-time note lands in the system prompt, which is sent apart from the messages.
    assert result.system_prompt == "Be brief." + NOTE
    assert fake_llm.requests[0].messages[0] == {"role": "system", "content": "Be brief." + NOTE}
    assert all(m["role"] != "system" for m in result.messages)
    assert result.messages[-1]["content"] == "ok" and result.messages[-2]["content"] == "next question"
    assert engine.session_starts == [("s1", len(result.compactions[0].result.messages))]
    assert [e.kind for e in sinks.events if e.kind == EVENT_COMPRESS] == [EVENT_COMPRESS]
    assert sinks.kinds() == ["compacting"]


class ShavingEngine(KeepTailEngine):
    """Removes only the two oldest messages per pass: progress every time, never enough."""

    async def compress(self, messages: Sequence[Mapping[str, Any]], current_tokens: int | None = None,
                       focus_topic: str | None = None, force: bool = False) -> CompressionResult:
        self.calls.append(CompressCall(current_tokens, force, len(messages)))
        new = [dict(messages[0]), *messages[3:]]
        self.compression_count += 1
        self.last_prompt_tokens = -1
        before, after = get_counter().count_messages(messages), get_counter().count_messages(new)
        return CompressionResult(new, True, len(messages), len(new), before, after)


class StubbornEngine(KeepTailEngine):
    """Claims success but changes almost nothing: no progress."""

    async def compress(self, messages: Sequence[Mapping[str, Any]], current_tokens: int | None = None,
                       focus_topic: str | None = None, force: bool = False) -> CompressionResult:
        self.calls.append(CompressCall(current_tokens, force, len(messages)))
        new = [dict(messages[0]), {**messages[1], "content": str(messages[1]["content"]) + "."}, *messages[2:]]
        tokens = get_counter().count_messages(messages)
        return CompressionResult(new, True, len(messages), len(new), tokens, tokens)


async def test_preflight_runs_at_most_three_passes(fake_llm: FakeLLMServer) -> None:
    engine = ShavingEngine(context_length=200_000, threshold_tokens=THRESHOLD)
    await _loop(fake_llm, engine).run_turn(history(40), "q")
    assert len(engine.calls) == 3
    assert [c.message_count for c in engine.calls] == [82, 80, 78]  # system + 80 + the new question, shaved


async def test_preflight_stops_when_a_pass_makes_no_progress(fake_llm: FakeLLMServer) -> None:
    engine = StubbornEngine(context_length=200_000, threshold_tokens=THRESHOLD)
    result = await _loop(fake_llm, engine).run_turn(history(40), "q")
    assert len(engine.calls) == 1
    assert result.stop_reason is StopReason.FINAL


class SpyCounter(TokenCounter):
    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def count_request(self, *args: Any, **kwargs: Any) -> int:
        self.requests += 1
        return super().count_request(*args, **kwargs)


async def test_cheap_gate_skips_the_exact_count_for_short_small_histories(fake_llm: FakeLLMServer) -> None:
    counter = SpyCounter()
    await _loop(fake_llm, _engine(), counter=counter).run_turn(history(1), "hi")
    assert counter.requests == 0
    await _loop(fake_llm, _engine(), counter=counter).run_turn(history(3), "hi")  # 7 > 1 + 2 + 1 messages
    assert counter.requests == 1


async def test_few_but_huge_messages_still_reach_the_exact_count(fake_llm: FakeLLMServer) -> None:
    engine = _engine(keep=1)
    huge = [{"role": "user", "content": filler(4_000)}, {"role": "assistant", "content": filler(4_000, 1)}]
    result = await _loop(fake_llm, engine).run_turn(huge, "short")
    assert len(engine.calls) == 1 and result.compacted
    assert fake_llm.requests[0].prompt_tokens < THRESHOLD


async def test_preflight_trusts_real_usage_once_the_provider_measured_the_prefix(fake_llm: FakeLLMServer) -> None:
    # The provider's tokenizer says the conversation is far smaller than ours does (e.g. heavy schemas).
    old = history(14)
    assert 3_500 < get_counter().count_messages(old) < THRESHOLD
    engine = _engine()
    loop = _loop(fake_llm, engine)
    fake_llm.reply("first", usage={"prompt_tokens": 1_000})
    first = await loop.run_turn(old, "q1")
    fake_llm.reply("second", usage={"prompt_tokens": 2_000})
    second = await loop.run_turn(first.messages, "q2: " + filler(1_200))
    assert fake_llm.requests[1].prompt_tokens > THRESHOLD  # by our count it is over …
    assert engine.calls == [] and not second.compacted  # … but the real-usage anchor says it fits

    fresh_engine = _engine()  # without the anchor the exact count decides, and compresses
    await _loop(fake_llm, fresh_engine).run_turn(first.messages, "q2: " + filler(1_200))
    assert len(fresh_engine.calls) == 1


# --- post-response ------------------------------------------------------------------------------------------

async def test_post_response_compresses_on_real_prompt_tokens(fake_llm: FakeLLMServer) -> None:
    engine = _engine()
    fake_llm.reply("", tool_calls=[{"id": "t1", "name": "read", "arguments": {}}],
                   usage={"prompt_tokens": THRESHOLD + 1})
    fake_llm.reply("done")
    result = await _loop(fake_llm, engine, tools=_big_tool(10)).run_turn(history(4), "read it")
    assert [c.trigger for c in result.compactions] == ["post_response"]
    assert engine.calls[0].tokens == THRESHOLD + 1
    assert_tool_pairs_consistent(result.messages)


async def test_completion_tokens_never_trigger(fake_llm: FakeLLMServer) -> None:
    engine = _engine()
    fake_llm.reply("", tool_calls=[{"id": "t1", "name": "read", "arguments": {}}],
                   usage={"completion_tokens": 10 * THRESHOLD})
    fake_llm.reply("done", usage={"completion_tokens": 10 * THRESHOLD})
    result = await _loop(fake_llm, engine, tools=_big_tool(10)).run_turn(history(4), "think hard")
    assert engine.calls == [] and not result.compacted


async def test_minus_one_sentinel_means_waiting_not_pressure(fake_llm: FakeLLMServer) -> None:
    engine = _engine(keep_sentinel_on_missing_usage=True)
    engine.last_prompt_tokens = -1  # just compressed; the next reply reports no usage
    fake_llm.reply("", tool_calls=[{"id": "t1", "name": "read", "arguments": {}}],
                   usage={"prompt_tokens": 0, "completion_tokens": 0})
    fake_llm.reply("done")
    result = await _loop(fake_llm, engine, tools=_big_tool(600)).run_turn(history(14), "read the file")
    # Post-response saw -1 and did nothing; the exact preflight before the next call caught the big result.
    assert [c.trigger for c in result.compactions] == ["preflight"]


async def test_missing_usage_falls_back_to_the_estimate(fake_llm: FakeLLMServer) -> None:
    engine = _engine()
    fake_llm.reply("", tool_calls=[{"id": "t1", "name": "read", "arguments": {}}],
                   usage={"prompt_tokens": 0, "completion_tokens": 0})
    fake_llm.reply("done", usage={"prompt_tokens": 0, "completion_tokens": 0})
    result = await _loop(fake_llm, engine, tools=_big_tool(1_000)).run_turn(history(14), "read the file")
    assert [c.trigger for c in result.compactions] == ["post_response"]
    assert engine.calls[0].tokens is not None and engine.calls[0].tokens >= THRESHOLD
    assert fake_llm.requests[-1].prompt_tokens < THRESHOLD


# --- notices and what follows a compaction (R-S4, R-G7) ----------------------------------------------------

async def test_skipped_notice_when_anti_thrashing_blocks(fake_llm: FakeLLMServer) -> None:
    engine, sinks = _engine(blocked_streak=2), Sinks()
    fake_llm.reply("", tool_calls=[{"id": "t1", "name": "read", "arguments": {}}])
    fake_llm.reply("done")
    await _loop(fake_llm, engine, sinks, tools=_big_tool(5)).run_turn(history(40), "q")
    assert engine.calls == []
    assert sinks.kinds() == ["compression_skipped"]  # once, although three checks were over the threshold
    assert "last 2 compressions saved <10% each" in sinks.notices[0].text


async def test_compressed_many_times_notice(fake_llm: FakeLLMServer) -> None:
    engine, sinks = _engine(), Sinks()
    engine.compression_count = 1
    await _loop(fake_llm, engine, sinks).run_turn(history(40), "q")
    assert sinks.kinds() == ["compacting", "compressed_many_times"]
    assert sinks.notices[1].text == "Session compressed 2 times — accuracy may degrade. Consider /new"


async def test_aborted_preflight_compression_warns_and_still_answers(fake_llm: FakeLLMServer) -> None:
    engine, sinks = _engine(abort_reason="summary model unreachable"), Sinks()
    result = await _loop(fake_llm, engine, sinks).run_turn(history(40), "q")
    assert result.stop_reason is StopReason.FINAL and not result.compacted
    assert sinks.kinds() == ["compacting", "compression_aborted"]
    assert "⚠️ Context compression aborted (summary model unreachable)" in sinks.notices[1].text


class RecordingMemory(MemoryProvider):
    def __init__(self, engine: KeepTailEngine) -> None:
        self.engine = engine
        self.log: list[tuple[str, Any]] = []

    async def on_pre_compress(self, messages: Sequence[Mapping[str, Any]]) -> None:
        self.log.append(("pre_compress", (len(messages), len(self.engine.calls))))

    async def on_session_switch(self, old_session_id: str, new_session_id: str) -> None:
        self.log.append(("switch", (old_session_id, new_session_id)))


async def test_memory_hooks_and_session_rotation(fake_llm: FakeLLMServer) -> None:
    engine, sinks = _engine(), Sinks()
    memory = RecordingMemory(engine)
    rotations: list[Compaction] = []

    async def rotate(compaction: Compaction) -> str:
        rotations.append(compaction)
        return "s2"

    loop = _loop(fake_llm, engine, sinks, memory=memory, switch_session=rotate)
    result = await loop.run_turn(history(40), "q")
    # Memory saw all 81 messages before the engine was called, then the switch.
    assert memory.log == [("pre_compress", (81, 0)), ("switch", ("s1", "s2"))]
    assert result.session_id == "s2" == loop.session_id
    assert rotations[0].old_session_id == "s1" and rotations[0].system_prompt.endswith(NOTE)
    compaction = result.compactions[0]
    assert (compaction.old_session_id, compaction.session_id) == ("s1", "s2")
    assert engine.session_starts[0][0] == "s2"
    event = next(e for e in sinks.events if e.kind == EVENT_COMPRESS)
    assert event.session_id == "s2" and event.data["compaction"] is compaction


async def test_failing_memory_and_sinks_do_not_break_the_turn(fake_llm: FakeLLMServer) -> None:
    class Broken(MemoryProvider):
        async def on_pre_compress(self, messages: Sequence[Mapping[str, Any]]) -> None:
            raise RuntimeError("disk full")

        async def on_session_switch(self, old_session_id: str, new_session_id: str) -> None:
            raise RuntimeError("disk full")

    async def bad_sink(item: Any) -> None:
        raise RuntimeError("chat down")

    engine = _engine()
    loop = AgentLoop(provider=make_provider(fake_llm), engine=engine, system_prompt="s", session_id="s1",
                     memory=Broken(), notices=bad_sink, events=bad_sink)
    result = await loop.run_turn(history(40), "q")
    assert result.stop_reason is StopReason.FINAL and result.compacted


async def test_cancel_while_the_gateway_persists_a_compaction(fake_llm: FakeLLMServer) -> None:
    entered = asyncio.Event()

    async def slow_rotate(compaction: Compaction) -> str:
        entered.set()
        await asyncio.sleep(60)
        return "never"

    engine = _engine()
    loop = _loop(fake_llm, engine, switch_session=slow_rotate)
    task = asyncio.create_task(loop.run_turn(history(40), "q"))
    await asyncio.wait_for(entered.wait(), 5)
    task.cancel()
    result = await task
    assert result.stop_reason is StopReason.CANCELLED
    # The list was already replaced, and the result says so, so the gateway stores the compacted list.
    assert result.compacted and result.compactions[0].session_id == "s1"
    assert len(result.messages) == len(result.compactions[0].result.messages) - 1
    assert fake_llm.requests == []


async def test_compacting_is_announced_only_when_a_summary_call_will_be_made(fake_llm: FakeLLMServer) -> None:
    from agent.compression.compressor import ContextCompressor
    from tests.compression.helpers import ScriptedProvider

    # No summary model (or one cooling down): the static fallback is inserted silently, no "compacting…".
    static = ContextCompressor(context_length=8_000, summary_provider=None)
    sinks = Sinks()
    result = await _loop(fake_llm, static, sinks).run_turn(history(40), "q")  # type: ignore[arg-type]
    assert result.compacted and result.compactions[0].result.summary_kind == "static"
    assert "compacting" not in sinks.kinds()

    paid = ContextCompressor(context_length=8_000, summary_provider=ScriptedProvider(["## Goal\nanswer q"]))
    sinks = Sinks()
    result = await _loop(fake_llm, paid, sinks).run_turn(history(40), "q")  # type: ignore[arg-type]
    assert result.compactions[0].result.summary_kind == "llm" and sinks.kinds()[0] == "compacting"


async def test_a_frozen_conversation_is_warned_about_once_per_turn(fake_llm: FakeLLMServer) -> None:
    # Every check of a tool-using turn is over the threshold and every compression aborts (R-C8).
    engine, sinks = _engine(abort_reason="auth failure"), Sinks()
    for n in range(3):
        fake_llm.reply("", tool_calls=[{"id": f"t{n}", "name": "read", "arguments": {}}])
    fake_llm.reply("done")
    result = await _loop(fake_llm, engine, sinks, tools=_big_tool(5)).run_turn(history(40), "q")
    assert result.stop_reason is StopReason.FINAL and len(engine.calls) > 2
    assert sinks.kinds().count("compression_aborted") == 1


async def test_preflight_defers_to_the_engine_when_real_usage_proved_the_compacted_list_fits(
        fake_llm: FakeLLMServer) -> None:
    from agent.compression.compressor import ContextCompressor
    from agent.llm.base import Usage

    # A restarted gateway: the engine remembers (R-P1) that the provider measured the compacted list below the
    # threshold, but this fresh loop has no real-usage anchor; our tokenizer over-counts the same list.
    engine = ContextCompressor(context_length=8_000, summary_provider=None)
    engine.last_prompt_tokens = -1
    engine.update_from_response(Usage(prompt_tokens=3_000))
    assert engine.deferred_to_real_usage
    old = history(40)
    assert get_counter().count_messages(old) > engine.threshold_tokens
    fake_llm.reply("fits", usage={"prompt_tokens": 3_500})
    result = await _loop(fake_llm, engine).run_turn(old, "q")  # type: ignore[arg-type]
    assert not result.compacted and result.text == "fits"
    # Real usage stays the judge: a report over the threshold ends the deferral, and the next check compresses.
    assert engine.deferred_to_real_usage
    fake_llm.reply("over", usage={"prompt_tokens": engine.threshold_tokens + 1})
    fake_llm.reply("after")
    loop = _loop(fake_llm, engine)  # type: ignore[arg-type]
    await loop.run_turn(result.messages, "q2")
    assert not engine.deferred_to_real_usage
    third = await loop.run_turn(result.messages, "q3")
    assert third.compacted and third.compactions[0].trigger == "preflight"
