"""Fixtures for the LLM layer's tests: the fake server, one shared httpx client, provider factory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from agent.llm import AnthropicProvider, OpenAICompatProvider
from agent.llm.http_provider import HttpProvider
from tests.fakes.llm_fixture import fake_llm  # noqa: F401 - re-exported pytest fixture
from tests.fakes.llm_server import FakeLLMServer

OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"

MakeProvider = Callable[..., HttpProvider]


@pytest.fixture
async def http_client() -> AsyncIterator[httpx.AsyncClient]:
    """One shared client, as the gateway uses."""
    async with httpx.AsyncClient() as client:
        yield client


@pytest.fixture
def make_provider(fake_llm: FakeLLMServer, http_client: httpx.AsyncClient) -> MakeProvider:  # noqa: F811
    """``make_provider("openai" | "anthropic", **overrides)`` → a provider pointed at the fake (no retries)."""

    def make(api: str, **kw: Any) -> HttpProvider:
        kw.setdefault("max_retries", 0)
        kw.setdefault("client", http_client)
        if api == "openai":
            return OpenAICompatProvider(fake_llm.openai_base_url, kw.pop("api_key", OPENAI_KEY),
                                        kw.pop("model", "gpt-4o"), **kw)
        return AnthropicProvider(fake_llm.base_url, kw.pop("api_key", ANTHROPIC_KEY),
                                 kw.pop("model", "claude-sonnet-4-5"), **kw)

    return make
