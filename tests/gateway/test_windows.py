"""The gateway learns the window its server really serves, keeps it across restarts and shows it in /status."""

from __future__ import annotations

import itertools
import re
import statistics
from typing import Any

from agent.llm.window import LEARNED_OVERFLOW, LEARNED_TRUNCATION, window_key
from gateway.app.runtime_parts import build_runtime
from gateway.conversation.windows import StoredWindows
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import GatewayFactory, is_summary_request, make_settings

UNKNOWN = {"model": "local", "context_length": None}


def _words(n: int) -> str:
    return " ".join(f"word{i % 50}" for i in range(n))


async def test_an_overflow_error_teaches_the_window_which_survives_a_restart(
    gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, tmp_path: Any
) -> None:
    fake_llm.context_window = 8_192  # refuses with "maximum context length is 8192 tokens", like vLLM
    gateway, adapter = await gateway_factory(llm=UNKNOWN)
    assert gateway.rt.window is not None and gateway.rt.window.tokens == 128_000  # assumed: "local" is unknown
    await adapter.say("a long one: " + _words(7_000))
    assert not adapter.texts()[-1].startswith("⚠️"), adapter.texts()
    assert (gateway.rt.window.tokens, gateway.rt.window.source) == (8_192, LEARNED_OVERFLOW)
    await adapter.say("/status", admin_hint=True)
    assert "Window: 8,192 tokens, learned from the server's overflow error" in adapter.texts()[-1]
    stored = await StoredWindows(gateway.rt.store.chat_settings).recall(window_key(fake_llm.openai_base_url, "local"))
    assert stored == (8_192, LEARNED_OVERFLOW)
    # The next start begins where this one ended, although the server still says nothing by itself.
    restarted = await build_runtime(make_settings(fake_llm, tmp_path, llm=UNKNOWN), store=gateway.rt.store)
    try:
        assert restarted.window is not None and restarted.window.tokens == 8_192
        assert restarted.new_engine().context_length == 8_192
    finally:
        await restarted.provider.aclose()


async def test_a_server_that_truncates_silently_is_found_out(gateway_factory: GatewayFactory,
                                                             fake_llm: FakeLLMServer) -> None:
    served = 4_000

    def truncating(body: dict[str, Any]) -> Reply:
        # Like Ollama past num_ctx: the oldest messages are dropped and the usage counts what was kept.
        if is_summary_request(body):
            return Reply("## Goal\nThe user talks.")
        return Reply("noted", usage={"prompt_tokens": min(fake_llm.count_prompt("openai", body), served)})

    fake_llm.responder = truncating
    gateway, adapter = await gateway_factory(llm=UNKNOWN)
    for turn in range(40):
        await adapter.say(f"line {turn}: " + _words(150))
        if gateway.rt.window is not None and gateway.rt.window.tokens == served:
            break
    assert gateway.rt.window is not None
    assert (gateway.rt.window.tokens, gateway.rt.window.source) == (served, LEARNED_TRUNCATION)
    learned_at = len(fake_llm.requests)
    for turn in range(5):
        await adapter.say(f"after {turn}: " + _words(150))
    later = [r for r in fake_llm.requests[learned_at:] if not is_summary_request(r.json)]
    assert later and all(r.prompt_tokens + r.json["max_tokens"] <= served for r in later)


def _chat_like(body: dict[str, Any], calls: list[str]) -> Reply:
    """A model answering chat lines in 30-90 tokens and summaries at the length their prompt asks for."""
    if is_summary_request(body):
        calls.append("summary")
        target = int(re.search(r"Target length: about ([\d,]+) tokens", str(body["messages"]))[1].replace(",", ""))
        return Reply(f"## Goal\nsummary {len(calls)} " + _words(target))
    calls.append("chat")
    return Reply("noted " + _words(30 + len(calls) * 7 % 60))


async def test_a_4096_window_found_at_start_up_is_never_exceeded_and_compactions_are_spaced(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    fake_llm.reports_window = ("vllm", 4_096)
    fake_llm.context_window = 4_096  # refuses what does not fit, like vLLM
    calls: list[str] = []
    fake_llm.responder = lambda body: _chat_like(body, calls)
    _, adapter = await gateway_factory(llm=UNKNOWN)
    lines = [f"Speaker{i % 2}: line {i} about " + _words(12 + i % 25) for i in range(120)]
    summaries: list[int] = []
    for number, line in enumerate(lines):
        before = calls.count("summary")
        await adapter.say(line)
        assert not adapter.texts()[-1].startswith("⚠️"), adapter.texts()[-1]
        if calls.count("summary") > before:
            summaries.append(number)
    requests = fake_llm.requests
    assert all(r.prompt_tokens + r.json.get("max_tokens", 0) <= 4_096 for r in requests if "messages" in r.json)
    assert calls.count("chat") == len(lines)  # none refused, none retried
    gaps = [b - a for a, b in itertools.pairwise(summaries)]
    assert summaries and statistics.median(gaps) >= 5
