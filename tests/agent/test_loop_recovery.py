"""Error recovery over real HTTP (R-P3, R-C11): each provider error the fake words like the real thing."""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
from PIL import Image

from agent.loop import AgentLoop
from agent.turn import StopReason
from tests.agent.loop_support import KeepTailEngine, Sinks, history, make_provider
from tests.fakes.llm_server import FakeLLMServer

SECRET = "sk-test-secret-key-0123456789"


def _loop(server: FakeLLMServer, engine: KeepTailEngine, sinks: Sinks | None = None, **kwargs: Any) -> AgentLoop:
    sinks = sinks or Sinks()
    return AgentLoop(provider=make_provider(server), engine=engine, system_prompt="sys", session_id="s1",
                     notices=sinks.notice, events=sinks.event, **kwargs)


def _engine(context_length: int = 200_000, **kwargs: Any) -> KeepTailEngine:
    return KeepTailEngine(context_length=context_length, **kwargs)


async def test_overflow_with_stated_limit_lowers_window_compresses_and_retries(fake_llm: FakeLLMServer) -> None:
    engine = _engine()
    fake_llm.fail("context_overflow", limit=50_000, prompt=60_000)
    fake_llm.reply("recovered")
    result = await _loop(fake_llm, engine).run_turn(history(10), "q")
    assert result.stop_reason is StopReason.FINAL and result.text == "recovered"
    assert engine.context_length == 50_000 and result.context_length == 50_000
    assert [(c.force, c.message_count) for c in engine.calls] == [(True, 22)]
    assert [c.trigger for c in result.compactions] == ["recovery"]
    assert len(fake_llm.requests[1].messages) < len(fake_llm.requests[0].messages)


async def test_compression_budget_is_shared_and_bounded(fake_llm: FakeLLMServer) -> None:
    engine, sinks = _engine(), Sinks()
    fake_llm.fail("context_overflow", limit=100_000, prompt=120_000)
    fake_llm.fail("payload_too_large")
    fake_llm.fail("long_context_tier")
    fake_llm.fail("context_overflow", limit=100_000, prompt=120_000)
    fake_llm.reply("never used")
    result = await _loop(fake_llm, engine, sinks).run_turn(history(10), "q")
    assert result.stop_reason is StopReason.ERROR
    assert len(engine.calls) == 3 and all(c.force for c in engine.calls)
    assert len(fake_llm.requests) == 4
    assert "after 3 compression attempts" in result.error_text
    assert "/compress" in result.error_text and "/new" in result.error_text
    assert sinks.kinds()[-1] == "error" and sinks.notices[-1].text == result.error_text
    assert result.messages[-1] == {"role": "user", "content": "q"}  # nothing half-done was appended


async def test_payload_too_large_compresses_and_retries(fake_llm: FakeLLMServer) -> None:
    engine = _engine()
    fake_llm.fail("payload_too_large")
    fake_llm.reply("fine")
    result = await _loop(fake_llm, engine).run_turn(history(10), "q")
    assert result.text == "fine" and len(engine.calls) == 1
    assert engine.context_length == 200_000  # a 413 says nothing about the window


async def test_long_context_tier_drops_to_200k(fake_llm: FakeLLMServer) -> None:
    engine = _engine(context_length=1_000_000)
    fake_llm.fail("long_context_tier")
    fake_llm.reply("fine")
    result = await _loop(fake_llm, engine).run_turn(history(10), "q")
    assert result.text == "fine" and engine.context_length == 200_000 and result.context_length == 200_000


async def test_available_output_tokens_shrinks_max_tokens_not_the_history(fake_llm: FakeLLMServer) -> None:
    engine = _engine()
    fake_llm.context_window = 6_000  # the fake refuses prompt + max_tokens over the window, in OpenAI's words
    result = await _loop(fake_llm, engine, max_tokens=5_000).run_turn(history(4), "q")
    assert result.stop_reason is StopReason.FINAL and engine.calls == []
    first, second = fake_llm.requests
    assert first.json["max_tokens"] == 5_000
    assert second.json["max_tokens"] == 6_000 - first.prompt_tokens
    assert engine.context_length == 6_000


async def test_output_shrinking_stops_when_the_provider_keeps_refusing(fake_llm: FakeLLMServer) -> None:
    fake_llm.fail("context_output", times=2, limit=8_192, prompt=8_100, completion=100)
    result = await _loop(fake_llm, _engine(), max_tokens=100).run_turn([], "q")
    assert [r.json["max_tokens"] for r in fake_llm.requests] == [100, 92]
    assert result.stop_reason is StopReason.ERROR and "no room to answer" in result.error_text


@pytest.mark.parametrize(("earlier", "names_compress"), [(0, False), (12, True)])
async def test_no_room_to_answer_suggests_compress_only_when_it_can_help(
        fake_llm: FakeLLMServer, earlier: int, names_compress: bool) -> None:
    fake_llm.fail("context_output", times=2, limit=8_192, prompt=8_100, completion=100)
    result = await _loop(fake_llm, _engine(), max_tokens=100).run_turn(history(earlier), "q")
    assert result.stop_reason is StopReason.ERROR and "no room to answer" in result.error_text
    assert ("/compress" in result.error_text) is names_compress and "/new" in result.error_text


async def test_recovery_when_nothing_can_be_compressed(fake_llm: FakeLLMServer) -> None:
    fake_llm.fail("context_overflow", limit=100, prompt=150)
    result = await _loop(fake_llm, _engine()).run_turn([], "a single message")
    assert result.stop_reason is StopReason.ERROR
    assert "nothing more can be compressed" in result.error_text and "/new" in result.error_text


async def test_recovery_compression_aborted(fake_llm: FakeLLMServer) -> None:
    sinks = Sinks()
    fake_llm.fail("payload_too_large")
    result = await _loop(fake_llm, _engine(abort_reason="auth failure"), sinks).run_turn(history(10), "q")
    assert result.stop_reason is StopReason.ERROR
    assert "Context compression aborted (auth failure)" in result.error_text
    # The frozen-conversation warning reaches the chat once, not again as the turn's error.
    assert sinks.kinds() == ["compacting", "compression_aborted"]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("auth", "refused the credentials"),
        ("quota", "no quota left"),
        ("model_not_found", "not available"),
        ("rate_limit", "rate-limiting"),
        ("server_error", "The model call failed: ServerError"),
    ],
)
async def test_unrecoverable_errors_stop_with_a_clear_secret_free_message(fake_llm: FakeLLMServer, kind: str,
                                                                          expected: str) -> None:
    fake_llm.fail(kind, key=SECRET)
    result = await _loop(fake_llm, _engine()).run_turn(history(2), "q")
    assert result.stop_reason is StopReason.ERROR
    assert expected in result.error_text and SECRET not in result.error_text
    assert len(fake_llm.requests) == 1


def _png_data_url(width: int, height: int) -> str:
    image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, "PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _sent_image(request: Any) -> Image.Image:
    parts = request.messages[-1]["content"]
    url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
    raw = base64.b64decode(url.split(",", 1)[1])
    assert len(raw) <= 4 * 1024 * 1024
    return Image.open(io.BytesIO(raw))


async def test_image_too_large_reencodes_a_10000x7000_png_and_retries(fake_llm: FakeLLMServer) -> None:
    photo = {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                         {"type": "image_url", "image_url": {"url": _png_data_url(10_000, 7_000)}}]}
    fake_llm.fail("image_too_large")
    fake_llm.reply("a gradient")
    result = await _loop(fake_llm, _engine()).run_turn([], photo)
    assert result.stop_reason is StopReason.FINAL and result.text == "a gradient"
    assert _sent_image(fake_llm.requests[0]).size == (10_000, 7_000)
    resent = _sent_image(fake_llm.requests[1])
    assert max(resent.size) <= 8_000
    assert result.images_reencoded == 1 and result.history_replaced
    assert result.messages[0]["content"][1]["image_url"]["url"] != photo["content"][1]["image_url"]["url"]


async def test_image_still_too_large_after_reencoding_stops(fake_llm: FakeLLMServer) -> None:
    wide = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": _png_data_url(8_100, 8)}}]}
    fake_llm.fail("image_too_large", times=2)
    result = await _loop(fake_llm, _engine()).run_turn([], wide)
    assert result.stop_reason is StopReason.ERROR and "still too large" in result.error_text
    assert len(fake_llm.requests) == 2


async def test_image_error_without_any_shrinkable_image_stops(fake_llm: FakeLLMServer) -> None:
    fake_llm.fail("image_too_large")
    result = await _loop(fake_llm, _engine()).run_turn([], "text only")
    assert result.stop_reason is StopReason.ERROR and "could be re-encoded" in result.error_text
