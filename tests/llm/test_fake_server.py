"""The fake server itself: recording, counted usage, context-window enforcement, dynamic responders."""

from __future__ import annotations

from typing import Any

import pytest

from agent.llm import ContextOverflow
from agent.tokens import get_counter
from tests.fakes.llm_server import Fail, FakeLLMServer, Reply
from tests.llm.conftest import MakeProvider


def _long(words: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "word " * words}]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_prompt_tokens_match_the_project_counter(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                       api: str) -> None:
    messages = [{"role": "user", "content": "count me please"}, {"role": "assistant", "content": "sure"},
                {"role": "user", "content": "thanks"}]
    reply = await make_provider(api, prompt_caching=False).complete(messages, system="sys")
    expected = get_counter().count_request(messages, system="sys")
    assert reply.usage.prompt_tokens == expected


@pytest.mark.parametrize(("api", "style", "limit_in_text"), [
    ("openai", "openai", "maximum context length is 300 tokens"),
    ("openai", "llamacpp", "available context size"),
    ("anthropic", "openai", "> 300 maximum"),
])
async def test_context_window_is_enforced(fake_llm: FakeLLMServer, make_provider: MakeProvider, api: str,
                                          style: str, limit_in_text: str) -> None:
    fake_llm.context_window = 300
    fake_llm.overflow_style = style
    fake_llm.reply("kept for the retry")
    with pytest.raises(ContextOverflow, match=limit_in_text) as caught:
        await make_provider(api).complete(_long(400))
    assert caught.value.limit == 300
    assert caught.value.prompt_tokens == fake_llm.last_request.prompt_tokens > 300
    assert fake_llm.pending == 1
    assert (await make_provider(api).complete(_long(10), max_tokens=100)).text == "kept for the retry"


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_window_with_max_tokens_gives_output_variant(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                           api: str) -> None:
    fake_llm.context_window = 300
    with pytest.raises(ContextOverflow) as caught:
        await make_provider(api).complete(_long(200), max_tokens=200)
    prompt = fake_llm.last_request.prompt_tokens
    assert caught.value.output_tokens_variant
    assert caught.value.available_output_tokens == 300 - prompt


async def test_responder_answers_when_script_is_empty(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    def respond(body: dict[str, Any]) -> Reply | Fail | str:
        last = body["messages"][-1]["content"]
        if last == "break":
            return Fail("server_error", {})
        return f"echo: {last}" if last != "tool" else Reply("", tool_calls=[{"name": "t", "arguments": {}}])

    fake_llm.responder = respond
    fake_llm.reply("scripted first")
    provider = make_provider("openai")
    assert (await provider.complete([{"role": "user", "content": "a"}])).text == "scripted first"
    assert (await provider.complete([{"role": "user", "content": "b"}])).text == "echo: b"
    assert (await provider.complete([{"role": "user", "content": "tool"}])).tool_calls[0]["function"]["name"] == "t"
    with pytest.raises(Exception, match="500"):
        await provider.complete([{"role": "user", "content": "break"}])
    assert [r.json["messages"][-1]["content"] for r in fake_llm.requests] == ["a", "b", "tool", "break"]


def test_unknown_failure_kind_is_refused_when_scripted() -> None:
    server = FakeLLMServer()
    with pytest.raises(ValueError, match="no failure kind"):
        server.fail("no_such_kind")
    server.fail("llamacpp_context")
    assert server.pending == 1
