"""The guard every request passes (items 3 and 5): never over the served window, never a silent cut."""

from __future__ import annotations

from typing import Any

from agent.compression.compressor import ContextCompressor
from agent.loop import AgentLoop
from agent.recovery import cut_off_note
from agent.turn import LoopConfig, StopReason
from tests.agent.loop_support import KeepTailEngine, Sinks, filler, history, make_provider
from tests.fakes.llm_server import FakeLLMServer

WINDOW = 8_000


def _loop(server: FakeLLMServer, engine: Any, **kwargs: Any) -> AgentLoop:
    sinks = Sinks()
    return AgentLoop(provider=make_provider(server), engine=engine, system_prompt="You help.", session_id="s1",
                     notices=sinks.notice, events=sinks.event, **kwargs)


def _within_window(server: FakeLLMServer, window: int = WINDOW) -> bool:
    return all(r.prompt_tokens + (r.json.get("max_tokens") or 0) <= window for r in server.requests)


async def test_a_request_that_would_not_fit_is_compressed_first_even_without_auto_compression(
        fake_llm: FakeLLMServer) -> None:
    fake_llm.context_window = WINDOW
    fake_llm.default_text = "fine"
    engine = ContextCompressor(context_length=WINDOW, summary_provider=None, reserve_output=True)
    # The loop's own triggers are off (compression.enabled: false); the guard still keeps the request in.
    loop = _loop(fake_llm, engine, config=LoopConfig(auto_compress=False))
    result = await loop.run_turn(history(30, words=60), "and now?")
    assert result.text == "fine" and [c.trigger for c in result.compactions] == ["guard"]
    assert len(fake_llm.requests) == 1 and _within_window(fake_llm)
    assert fake_llm.requests[0].json["max_tokens"] == 2_000  # the full reserve: compression made the room


async def test_when_compression_cannot_make_room_the_answer_is_shorter_and_says_it_was_cut(
        fake_llm: FakeLLMServer) -> None:
    fake_llm.context_window = WINDOW
    fake_llm.reply("the start of a long answer", finish_reason="length")
    engine = KeepTailEngine(context_length=WINDOW, keep=1_000)  # cannot compress anything
    result = await _loop(fake_llm, engine, max_tokens=2_000).run_turn(history(25, words=55), "explain")
    [request] = fake_llm.requests
    assert 500 <= request.json["max_tokens"] < 2_000 and _within_window(fake_llm)
    note = cut_off_note(request.json["max_tokens"])
    assert result.text == f"the start of a long answer\n\n{note}"
    assert result.messages[-1]["content"] == result.text  # stored with the note: the model sees it was cut


async def test_an_answer_cut_at_its_limit_always_says_so(fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("half an answ", finish_reason="length")
    result = await _loop(fake_llm, KeepTailEngine(context_length=200_000)).run_turn([], "tell me")
    assert result.text.startswith("half an answ\n\n[… the answer was cut off at its length limit of 8,192 tokens")


async def test_a_window_too_small_for_the_system_prompt_sends_nothing(fake_llm: FakeLLMServer) -> None:
    engine = KeepTailEngine(context_length=300)
    sinks = Sinks()
    loop = AgentLoop(provider=make_provider(fake_llm), engine=engine, system_prompt=filler(200),
                     session_id="s1", notices=sinks.notice, events=sinks.event)
    result = await loop.run_turn([], "hi")
    assert result.stop_reason is StopReason.ERROR and fake_llm.requests == []
    assert "window of 300 tokens has no room" in result.error_text and "/new" in result.error_text
    assert "/compress" not in result.error_text
