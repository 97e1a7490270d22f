"""Anthropic provider: message conversion both ways, headers, usage arithmetic, streaming."""

from __future__ import annotations

import json

import httpx
import pytest

from agent.llm import AnthropicProvider, BadResponse
from agent.llm.anthropic_format import blocks_to_message, to_anthropic_messages, tools_to_anthropic
from agent.llm.usage import parse_anthropic_usage
from tests.fakes.llm_server import FakeLLMServer
from tests.llm.conftest import ANTHROPIC_KEY, MakeProvider

PNG_URL = "data:image/png;base64,iVBORw0KGgo="
CONVERSATION = [
    {"role": "system", "content": "You are Concord."},
    {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                 {"type": "image_url", "image_url": {"url": PNG_URL}}]},
    {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}},
        {"id": "toolu_2", "type": "function", "function": {"name": "grep", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "x = 1"},
    {"role": "tool", "tool_call_id": "toolu_2", "content": ""},
    {"role": "system", "content": "Summary of earlier turns: none."},
    {"role": "user", "content": "and now?"},
]


def test_conversion_to_messages_api() -> None:
    system, messages = to_anthropic_messages(CONVERSATION)
    assert system == [{"type": "text", "text": "You are Concord."},
                      {"type": "text", "text": "Summary of earlier turns: none."}]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"][1] == {"type": "image", "source": {
        "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    assert messages[1]["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}},
        {"type": "tool_use", "id": "toolu_2", "name": "grep", "input": {"_raw_arguments": "not json"}},
    ]
    # Both results and the following user text merge into one user turn, results first.
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "x = 1"}]},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "(no output)"},
        {"type": "text", "text": "and now?"},
    ]
    assert CONVERSATION[2]["tool_calls"][0]["function"]["arguments"] == '{"path": "a.py"}'


def test_http_image_urls_and_message_level_markers() -> None:
    marker = {"type": "ephemeral"}
    _, messages = to_anthropic_messages([
        {"role": "user", "content": [{"type": "image_url", "image_url": "https://example.org/cat.png"}]},
        {"role": "assistant", "content": None, "cache_control": marker, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    ])
    assert messages[0]["content"] == [{"type": "image", "source": {"type": "url", "url": "https://example.org/cat.png"}}]
    assert messages[1]["content"][-1]["cache_control"] == marker


def test_tool_schema_conversion() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}},
             {"name": "g", "input_schema": {"type": "object"}}]
    assert tools_to_anthropic(tools) == [{"name": "f", "input_schema": {"type": "object"}, "description": "d"},
                                         {"name": "g", "input_schema": {"type": "object"}}]


def test_reply_blocks_to_internal_message() -> None:
    message = blocks_to_message([{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Done."},
                                 {"type": "tool_use", "id": "toolu_x", "name": "f", "input": {"a": 1}}])
    assert message == {"role": "assistant", "content": "Done.", "tool_calls": [
        {"id": "toolu_x", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}


def test_usage_adds_cache_tokens_to_prompt() -> None:
    usage = parse_anthropic_usage({"input_tokens": 50, "output_tokens": 7, "cache_read_input_tokens": 1000,
                                   "cache_creation_input_tokens": 200})
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        1250, 7, 1000, 200)


@pytest.mark.parametrize("stream", [False, True])
async def test_round_trip_with_tools_and_cache_usage(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                     stream: bool) -> None:
    fake_llm.reply("Reading it.", tool_calls=[{"name": "read_file", "arguments": {"path": "z.py"}}],
                   usage={"prompt_tokens": 3000, "cache_read_tokens": 2000, "cache_write_tokens": 500})
    provider = make_provider("anthropic", prompt_caching=False)
    reply = await provider.complete(CONVERSATION[1:], system="Top system.", max_tokens=512, stream=stream,
                                    tools=[{"type": "function", "function": {"name": "read_file", "parameters": {}}}])
    sent = fake_llm.last_request
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.json["max_tokens"] == 512
    assert sent.json["system"][0] == {"type": "text", "text": "Top system."}
    assert sent.json["tools"] == [{"name": "read_file", "input_schema": {"type": "object", "properties": {}}}]
    assert reply.text == "Reading it."
    assert reply.finish_reason == "tool_calls"
    assert json.loads(reply.tool_calls[0]["function"]["arguments"]) == {"path": "z.py"}
    assert reply.tool_calls[0]["id"].startswith("toolu_")
    assert (reply.usage.prompt_tokens, reply.usage.cache_read_tokens, reply.usage.cache_write_tokens) == (
        3000, 2000, 500)
    assert reply.usage.completion_tokens > 0


@pytest.mark.parametrize("stream", [False, True])
async def test_default_max_tokens_and_counted_usage(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                    stream: bool) -> None:
    reply = await make_provider("anthropic").complete([{"role": "user", "content": "hi"}], stream=stream)
    assert fake_llm.last_request.json["max_tokens"] == 4096
    assert reply.usage.prompt_tokens == fake_llm.last_request.prompt_tokens
    assert reply.finish_reason == "stop"


async def test_base_url_with_v1_suffix(fake_llm: FakeLLMServer, http_client: httpx.AsyncClient) -> None:
    provider = AnthropicProvider(fake_llm.base_url + "/v1", "k-123456", "claude-3-5-haiku", client=http_client)
    assert (await provider.complete([{"role": "user", "content": "x"}])).text == "ok"
    assert fake_llm.last_request.path == "/v1/messages"


async def test_malformed_streamed_tool_input_is_bad_response(fake_llm: FakeLLMServer,
                                                             make_provider: MakeProvider) -> None:
    fake_llm.reply("", tool_calls=[{"name": "add", "arguments": '{"a": 1, "b": tw'}])
    with pytest.raises(BadResponse, match="not valid JSON"):
        await make_provider("anthropic").complete([{"role": "user", "content": "x"}], stream=True)
