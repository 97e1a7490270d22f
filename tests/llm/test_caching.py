"""Prompt caching: system_and_3 placement, idempotence, no mutation, TTLs, and what providers send."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.llm.caching import (
    apply_cache_markers,
    cache_marker,
    caching_enabled_for,
    count_cache_markers,
    validate_cache_ttl,
)
from tests.fakes.llm_server import FakeLLMServer
from tests.llm.conftest import MakeProvider

MARK = {"type": "ephemeral"}
SIX = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "u2"},
    {"role": "assistant", "content": "a2"},
    {"role": "user", "content": [{"type": "text", "text": "u3a"}, {"type": "text", "text": "u3b"}]},
]


def _marked_indices(messages: list[Any]) -> list[int]:
    return [i for i, m in enumerate(messages) if count_cache_markers([m])]


def test_system_and_last_three() -> None:
    out = apply_cache_markers(SIX)
    assert _marked_indices(out) == [0, 3, 4, 5]
    assert out[0]["content"] == [{"type": "text", "text": "sys", "cache_control": MARK}]
    assert out[3]["content"] == [{"type": "text", "text": "u2", "cache_control": MARK}]
    assert out[5]["content"] == [{"type": "text", "text": "u3a"}, {"type": "text", "text": "u3b", "cache_control": MARK}]
    assert out[1] is SIX[1]


def test_caller_list_is_not_mutated() -> None:
    before = copy.deepcopy(SIX)
    apply_cache_markers(SIX, ttl="1h")
    assert before == SIX


def test_idempotent_and_never_more_than_four() -> None:
    once = apply_cache_markers(SIX)
    assert apply_cache_markers(once) == once
    grown = [*once, {"role": "assistant", "content": "a3"}, {"role": "user", "content": "u4"}]
    again = apply_cache_markers(grown)
    assert _marked_indices(again) == [0, 5, 6, 7]
    assert again[3]["content"] == [{"type": "text", "text": "u2"}]


def test_empty_content_marks_the_message_and_tools_only_natively() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                               "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "result"},
    ]
    openrouter = apply_cache_markers(messages, system_included=False)
    assert openrouter[1]["cache_control"] == MARK
    assert openrouter[2] == messages[2]
    native = apply_cache_markers(messages, system_included=False, native_anthropic=True)
    assert native[2]["cache_control"] == MARK
    assert native[2]["content"] == "result"


def test_system_not_included_marks_only_the_tail() -> None:
    out = apply_cache_markers(SIX, system_included=False)
    assert _marked_indices(out) == [3, 4, 5]


def test_ttls() -> None:
    assert cache_marker("5m") == MARK
    assert cache_marker("1h") == {"type": "ephemeral", "ttl": "1h"}
    assert validate_cache_ttl("1h") == "1h"
    for bad in ("10m", "", "1H", "60m"):
        with pytest.raises(ValueError, match="TTL"):
            validate_cache_ttl(bad)


@pytest.mark.parametrize(("provider", "model", "url", "expected"), [
    ("anthropic", "claude-sonnet-4-5", "https://api.anthropic.com", True),
    ("openrouter", "anthropic/claude-3.5-sonnet", "https://openrouter.ai/api/v1", True),
    ("custom", "anthropic/claude-3.5-sonnet", "https://openrouter.ai/api/v1", True),
    ("openai", "gpt-4o", "https://api.openai.com/v1", False),
    ("openrouter", "openai/gpt-4o", "https://openrouter.ai/api/v1", False),
    ("vllm", "claude-imitation", "http://127.0.0.1:8000/v1", False),
])
def test_caching_enabled_for(provider: str, model: str, url: str, expected: bool) -> None:
    assert caching_enabled_for(provider, model, url) is expected


async def test_native_anthropic_sends_markers(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    await make_provider("anthropic", cache_ttl="1h").complete(SIX[1:], system="sys")
    body = fake_llm.last_request.json
    marker = {"type": "ephemeral", "ttl": "1h"}
    assert body["system"] == [{"type": "text", "text": "sys", "cache_control": marker}]
    marked = [m for m in body["messages"] if any("cache_control" in b for b in m["content"])]
    assert len(marked) == 3
    assert body["messages"][0]["content"] == [{"type": "text", "text": "u1"}]


async def test_openrouter_claude_sends_markers_plain_openai_does_not(fake_llm: FakeLLMServer,
                                                                     make_provider: MakeProvider) -> None:
    router = make_provider("openai", name="openrouter", model="anthropic/claude-sonnet-4")
    await router.complete(SIX[1:], system="sys")
    assert count_cache_markers(fake_llm.last_request.json["messages"]) == 4
    await make_provider("openai").complete(SIX[1:], system="sys")
    assert count_cache_markers(fake_llm.last_request.json["messages"]) == 0
    assert fake_llm.last_request.json["messages"][0] == {"role": "system", "content": "sys"}


async def test_a_one_off_prompt_is_sent_without_markers(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    # cache=False (a summary call): nothing later repeats the prompt, so no marker bills it as a cache write.
    await make_provider("anthropic").complete(SIX[1:], system="sys", cache=False)
    body = fake_llm.last_request.json
    assert body["system"] == [{"type": "text", "text": "sys"}]
    assert not any("cache_control" in b for m in body["messages"] for b in m["content"])
    router = make_provider("openai", name="openrouter", model="anthropic/claude-sonnet-4")
    await router.complete(SIX[1:], system="sys", cache=False)
    assert count_cache_markers(fake_llm.last_request.json["messages"]) == 0
    await router.complete(SIX[1:], system="sys")  # the chat's requests keep theirs
    assert count_cache_markers(fake_llm.last_request.json["messages"]) == 4
