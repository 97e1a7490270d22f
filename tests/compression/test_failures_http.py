"""The summary failure paths over real HTTP: OpenAICompatProvider against the loopback fake LLM server."""

from __future__ import annotations

import re

from agent.llm.openai_compat import OpenAICompatProvider
from tests.compression.helpers import check_invariants, coding_session, make_compressor
from tests.fakes.llm_server import FakeLLMServer

SUMMARY = "## Historical Task Snapshot\nfix m19\n\n## Goal\nmake every test module pass"


def _provider(server: FakeLLMServer, model: str = "aux-model") -> OpenAICompatProvider:
    return OpenAICompatProvider(server.openai_base_url, api_key="sk-test-key-000000000000", model=model,
                                max_retries=0)


async def test_llm_summary_over_http(fake_llm: FakeLLMServer) -> None:
    fake_llm.reply(SUMMARY)
    provider = _provider(fake_llm)
    compressor = make_compressor(summary_provider=provider)
    messages = coding_session(20)
    out = await compressor.compress(messages)
    await provider.aclose()
    assert out.summary_kind == "llm" and "make every test module pass" in out.messages[out.head_end]["content"]
    sent = fake_llm.last_request.json
    # The target the prompt asks for, a quarter more; prompt + output fit the summary model's window (unknown
    # here, so the main one: 8,000).
    target = int(re.search(r"Target length: about ([\d,]+) tokens", sent["messages"][-1]["content"])[1]
                 .replace(",", ""))
    assert sent["model"] == "aux-model" and sent["max_tokens"] == int(target * 1.25)
    assert fake_llm.last_request.prompt_tokens + sent["max_tokens"] <= 8_000
    assert "Historical Task Snapshot" in sent["messages"][-1]["content"]
    check_invariants(messages, out.messages, compressed=True)


async def test_auth_failure_over_http_aborts(fake_llm: FakeLLMServer) -> None:
    fake_llm.fail("auth")
    provider = _provider(fake_llm)
    compressor = make_compressor(summary_provider=provider)
    messages = coding_session(20)
    out = await compressor.compress(messages)
    await provider.aclose()
    assert out.aborted and out.messages == messages and compressor.auth_failure
    assert "sk-test-key" not in out.reason


async def test_dropped_connection_over_http_aborts(fake_llm: FakeLLMServer) -> None:
    fake_llm.drop_mid_stream()
    provider = _provider(fake_llm)
    compressor = make_compressor(summary_provider=provider)
    out = await compressor.compress(coding_session(20))
    await provider.aclose()
    assert out.aborted and compressor.network_failure and "network failure" in out.reason


async def test_server_error_over_http_retries_on_main_then_static(fake_llm: FakeLLMServer) -> None:
    fake_llm.fail("server_error", times=2)
    aux, main = _provider(fake_llm, "aux-model"), _provider(fake_llm, "main-model")
    compressor = make_compressor(summary_provider=aux, main_provider=main)
    messages = coding_session(20)
    out = await compressor.compress(messages)
    await aux.aclose()
    await main.aclose()
    assert [r.json["model"] for r in fake_llm.requests] == ["aux-model", "main-model"]
    assert out.compressed and out.summary_kind == "static" and not out.aborted
    assert compressor.cooldown_remaining > 0
    check_invariants(messages, out.messages, compressed=True)


async def test_server_error_then_main_model_succeeds_over_http(fake_llm: FakeLLMServer) -> None:
    fake_llm.fail("server_error")
    fake_llm.reply(SUMMARY)
    aux, main = _provider(fake_llm, "aux-model"), _provider(fake_llm, "main-model")
    compressor = make_compressor(summary_provider=aux, main_provider=main)
    out = await compressor.compress(coding_session(20))
    await aux.aclose()
    await main.aclose()
    assert out.summary_kind == "llm"


async def test_empty_reply_over_http_is_a_failure(fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("   ")
    provider = _provider(fake_llm)
    compressor = make_compressor(summary_provider=provider)
    out = await compressor.compress(coding_session(20))
    await provider.aclose()
    assert out.summary_kind == "static" and not out.aborted


async def test_summary_window_overflow_over_http_is_learned_and_asked_again_in_parts(fake_llm: FakeLLMServer) -> None:
    fake_llm.context_window = 3_000  # smaller than assumed (the main window, 8,000): the server says so
    fake_llm.default_text = SUMMARY
    provider = _provider(fake_llm)
    compressor = make_compressor(summary_provider=provider)
    out = await compressor.compress(coding_session(40))
    await provider.aclose()
    assert compressor.summary_context_length == 3_000
    assert out.summary_kind == "llm" and "make every test module pass" in out.messages[out.head_end]["content"]
    first, *retries = fake_llm.requests
    assert first.prompt_tokens + first.json["max_tokens"] > 3_000 and retries
    assert all(r.prompt_tokens + r.json["max_tokens"] <= 3_000 for r in retries)


async def test_a_summary_window_too_small_for_any_part_falls_back(fake_llm: FakeLLMServer) -> None:
    fake_llm.context_window = 500
    provider = _provider(fake_llm)
    compressor = make_compressor(summary_provider=provider)
    out = await compressor.compress(coding_session(20))
    await provider.aclose()
    assert out.summary_kind == "static" and "(500 tokens) cannot hold a part" in out.reason
    assert len(fake_llm.requests) == 1  # nothing more is sent once the window is known to be too small
