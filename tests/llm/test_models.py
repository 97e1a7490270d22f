"""Model metadata: context windows, summary-model resolution, provider construction."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest

from agent.llm import AnthropicProvider, AuthError, OpenAICompatProvider
from agent.llm.models import (
    DEFAULT_CONTEXT_LENGTH,
    ProviderSpec,
    build_provider,
    build_provider_from_spec,
    context_length_for,
    resolve_auxiliary,
)
from tests.fakes.llm_server import FakeLLMServer


@pytest.mark.parametrize(("model", "expected"), [
    ("claude-sonnet-4-5", 200_000),
    ("anthropic/claude-3.5-sonnet", 200_000),
    ("gpt-4o-mini", 128_000),
    ("gpt-4.1-mini", 1_047_576),
    ("gpt-4", 8_192),
    ("gpt-5-mini", 400_000),
    ("llama3.1:8b", 131_072),
    ("meta-llama/llama-3.3-70b-instruct", 131_072),
    ("qwen2.5-coder:7b", 32_768),
    ("totally-unknown", DEFAULT_CONTEXT_LENGTH),
])
def test_known_context_lengths(model: str, expected: int) -> None:
    assert context_length_for(model) == expected


def test_override_and_default() -> None:
    assert context_length_for("claude-sonnet-4-5", 1_000_000) == 1_000_000
    assert context_length_for("mystery", default=4096) == 4096


@dataclass
class Section:
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None


class Secret:
    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value


MAIN = Section("anthropic", "claude-sonnet-4-5", None, "main-key-123456")


def test_no_auxiliary_model_falls_back_to_main() -> None:
    assert resolve_auxiliary(MAIN, None) == ProviderSpec("anthropic", "claude-sonnet-4-5", None, "main-key-123456")
    assert resolve_auxiliary(MAIN, Section(provider="openai")).model == "claude-sonnet-4-5"


def test_same_provider_inherits_key_and_url() -> None:
    aux = resolve_auxiliary(MAIN, {"model": "claude-3-5-haiku"})
    assert aux == ProviderSpec("anthropic", "claude-3-5-haiku", None, "main-key-123456")


def test_other_endpoint_never_gets_the_main_key() -> None:
    aux = resolve_auxiliary(MAIN, Section("openai", "gpt-4o-mini"))
    assert (aux.provider, aux.api_key, aux.effective_base_url) == ("openai", None, "https://api.openai.com/v1")
    local = resolve_auxiliary(MAIN, Section(model="claude-3-5-haiku", base_url="http://127.0.0.1:9/v1"))
    assert local.api_key is None


def test_own_key_and_secret_values() -> None:
    aux = resolve_auxiliary({"provider": "openai", "model": "gpt-4o", "api_key": Secret("main-sk-1")},
                            {"provider": "openrouter", "model": "google/gemini-2.5-flash", "api_key": Secret("aux-1")})
    assert (aux.provider, aux.api_key) == ("openrouter", "aux-1")
    assert "aux-1" not in repr(aux)


async def test_build_provider_kinds(fake_llm: FakeLLMServer) -> None:
    async with httpx.AsyncClient() as client:
        anthropic = build_provider("anthropic", fake_llm.base_url, "k-12345678", "claude-3-5-haiku", client)
        ollama = build_provider("ollama", fake_llm.openai_base_url, None, "llama3.1:8b", client, timeout=5.0)
        assert isinstance(anthropic, AnthropicProvider)
        assert isinstance(ollama, OpenAICompatProvider)
        assert ollama.name == "ollama"
        assert (await ollama.complete([{"role": "user", "content": "x"}])).text == "ok"
        keyless = build_provider("openrouter", fake_llm.openai_base_url, None, "x/y", client)
        with pytest.raises(AuthError):
            await keyless.complete([{"role": "user", "content": "x"}])
        spec_built = build_provider_from_spec(MAIN, client)
        assert spec_built.base_url == "https://api.anthropic.com"
    assert fake_llm.requests and len(fake_llm.requests) == 1


def test_build_provider_rejects_unknown_or_urlless() -> None:
    with pytest.raises(ValueError, match="unknown LLM provider"):
        build_provider("bedrock", "http://127.0.0.1:1", None, "m")
    with pytest.raises(ValueError, match="needs a base_url"):
        build_provider("custom", None, None, "m")
