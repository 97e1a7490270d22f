"""OpenAI-compatible provider end to end against the fake: bodies sent, replies and usage read."""

from __future__ import annotations

import json

import httpx
import pytest

from agent.llm import OpenAICompatProvider
from agent.llm.http_provider import Request
from agent.llm.usage import parse_openai_usage
from tests.fakes.llm_server import FakeLLMServer
from tests.llm.conftest import OPENAI_KEY, MakeProvider

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
CONVERSATION = [
    {"role": "user", "content": "show config"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"},
]


@pytest.mark.parametrize("stream", [False, True])
async def test_text_reply_and_usage(fake_llm: FakeLLMServer, make_provider: MakeProvider, stream: bool) -> None:
    fake_llm.reply("Hello there, friend.", usage={"cache_read_tokens": 5})
    reply = await make_provider("openai").complete([{"role": "user", "content": "hi"}], system="Be brief.",
                                                   stream=stream, max_tokens=64, temperature=0.2)
    sent = fake_llm.last_request
    assert reply.text == "Hello there, friend."
    assert reply.finish_reason == "stop"
    assert reply.model == "gpt-4o"
    assert reply.usage.prompt_tokens == sent.prompt_tokens > 0
    assert reply.usage.completion_tokens > 0
    assert reply.usage.cache_read_tokens == 5
    assert sent.json["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent.json["max_tokens"] == 64
    assert sent.json["temperature"] == 0.2
    assert sent.headers["Authorization"] == f"Bearer {OPENAI_KEY}"
    if stream:
        assert sent.json["stream_options"] == {"include_usage": True}
    else:
        assert "stream" not in sent.json


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_calls_round_trip(fake_llm: FakeLLMServer, make_provider: MakeProvider, stream: bool) -> None:
    fake_llm.reply("", tool_calls=[{"name": "read_file", "arguments": {"path": "b.py"}, "id": "call_9"},
                                   {"name": "read_file", "arguments": {"path": "c.py"}}])
    reply = await make_provider("openai").complete(CONVERSATION, tools=TOOLS, stream=stream)
    assert reply.finish_reason == "tool_calls"
    assert reply.text == ""
    assert [c["id"] for c in reply.tool_calls] == ["call_9", "call_fake_1"]
    assert [json.loads(c["function"]["arguments"]) for c in reply.tool_calls] == [{"path": "b.py"}, {"path": "c.py"}]
    sent = fake_llm.last_request.json
    assert sent["tools"] == TOOLS
    assert sent["messages"] == CONVERSATION


async def test_internal_keys_are_not_sent(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    message = {"role": "user", "content": "hi", "timestamp": 123, "token_count": 4}
    await make_provider("openai").complete([message])
    assert fake_llm.last_request.json["messages"] == [{"role": "user", "content": "hi"}]
    assert message == {"role": "user", "content": "hi", "timestamp": 123, "token_count": 4}


async def test_extra_headers_and_per_call_model(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    provider = make_provider("openai", name="openrouter", extra_headers={"HTTP-Referer": "https://concord.test"})
    reply = await provider.complete([{"role": "user", "content": "hi"}], model="meta/llama-3.1-8b")
    assert fake_llm.last_request.headers["HTTP-Referer"] == "https://concord.test"
    assert fake_llm.last_request.json["model"] == "meta/llama-3.1-8b"
    assert reply.model == "meta/llama-3.1-8b"


async def test_keyless_local_server(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    await make_provider("openai", api_key=None).complete([{"role": "user", "content": "hi"}])
    assert "Authorization" not in fake_llm.last_request.headers


async def test_stream_without_usage_reports_zero(fake_llm: FakeLLMServer, http_client: httpx.AsyncClient) -> None:
    # A server that ignores stream_options sends no usage chunk; the caller must see "not reported".
    fake_llm.raw(200, 'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
                      "data: [DONE]\n\n", content_type="text/event-stream")
    provider = OpenAICompatProvider(fake_llm.openai_base_url, None, "local", client=http_client, max_retries=0)
    reply = await provider.complete([{"role": "user", "content": "x"}], stream=True)
    assert reply.text == "hi"
    assert not reply.usage.reported


async def test_owned_client_is_closed(fake_llm: FakeLLMServer) -> None:
    provider = OpenAICompatProvider(fake_llm.openai_base_url, None, "local", max_retries=0)
    assert (await provider.complete([{"role": "user", "content": "x"}])).text == "ok"
    await provider.aclose()
    await provider.aclose()
    assert provider._transport._client.is_closed


async def test_shared_client_stays_open(make_provider: MakeProvider, http_client: httpx.AsyncClient) -> None:
    await make_provider("openai").aclose()
    assert not http_client.is_closed


def test_official_openai_gets_max_completion_tokens() -> None:
    provider = OpenAICompatProvider("https://api.openai.com/v1", "k", "gpt-5")
    body = provider.build_body(Request([{"role": "user", "content": "x"}], None, None, 100, "gpt-5", False, None))
    assert body["max_completion_tokens"] == 100
    assert "max_tokens" not in body


def test_usage_parsing_variants() -> None:
    usage = parse_openai_usage({"prompt_tokens": 100, "completion_tokens": 20,
                                "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 30},
                                "completion_tokens_details": {"reasoning_tokens": 12}})
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cache_read_tokens, usage.cache_write_tokens,
            usage.reasoning_tokens) == (100, 20, 60, 30, 12)
    assert parse_openai_usage({"prompt_tokens": 10, "prompt_cache_hit_tokens": 4}).cache_read_tokens == 4
    assert not parse_openai_usage(None).reported
    assert parse_openai_usage({"prompt_tokens": "12", "completion_tokens": -3}).prompt_tokens == 0


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="model"):
        OpenAICompatProvider("http://127.0.0.1:1/v1", None, "")
    with pytest.raises(ValueError, match="TTL"):
        OpenAICompatProvider("http://127.0.0.1:1/v1", None, "m", cache_ttl="10m")
