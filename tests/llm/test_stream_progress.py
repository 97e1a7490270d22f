"""Both providers report a streamed reply's text as it grows (``on_text``), from the same SSE code."""

from __future__ import annotations

import pytest

from agent.llm.errors import NetworkError
from tests.fakes.llm_server import FakeLLMServer
from tests.llm.conftest import MakeProvider

USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_on_text_hears_the_text_so_far(api: str, make_provider: MakeProvider, fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("one two three four", text_pieces=4,
                   tool_calls=[{"name": "search_history", "arguments": {"query": "x"}}])
    heard: list[str] = []

    async def on_text(text: str) -> None:
        heard.append(text)

    completion = await make_provider(api).complete(USER, stream=True, on_text=on_text)
    assert heard == ["one t", "one two th", "one two three f", "one two three four"]  # four pieces of 5
    assert completion.text == "one two three four" and completion.tool_calls


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_a_dropped_stream_still_fails_after_the_text_it_showed(api: str, make_provider: MakeProvider,
                                                                      fake_llm: FakeLLMServer) -> None:
    fake_llm.drop_mid_stream("partial words here", after_chunks=5)
    heard: list[str] = []

    async def on_text(text: str) -> None:
        heard.append(text)

    with pytest.raises(NetworkError):
        await make_provider(api, max_retries=0).complete(USER, stream=True, on_text=on_text)
    assert heard and all("partial words here".startswith(h) for h in heard)
