"""Model metadata and provider construction: context windows, the summary model, `build_provider`.

Settings-agnostic on purpose: the resolvers take any object with ``provider / model / base_url / api_key``
attributes (a settings section, a dataclass) or a mapping, so the gateway's config module can hand its
sections in as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from agent.llm.anthropic import AnthropicProvider
from agent.llm.base import Provider
from agent.llm.openai_compat import OpenAICompatProvider

__all__ = [
    "DEFAULT_BASE_URLS",
    "DEFAULT_CONTEXT_LENGTH",
    "KNOWN_CONTEXT_LENGTHS",
    "ProviderSpec",
    "build_provider",
    "build_provider_from_spec",
    "context_length_for",
    "known_context_length",
    "resolve_auxiliary",
    "spec_from",
]

DEFAULT_CONTEXT_LENGTH = 128_000

# Longest matching prefix wins, so specific entries ("gpt-4o") beat family ones ("gpt-4").
KNOWN_CONTEXT_LENGTHS: dict[str, int] = {
    "claude-": 200_000,
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4": 200_000,
    "gemini-1.5-pro": 2_097_152,
    "gemini-": 1_048_576,
    "grok-": 131_072,
    "deepseek": 128_000,
    "llama-3.1": 131_072,
    "llama-3.2": 131_072,
    "llama-3.3": 131_072,
    "llama-4": 1_048_576,
    "llama3.1": 131_072,
    "llama3.2": 131_072,
    "llama3.3": 131_072,
    "llama": 8_192,
    "qwen3": 40_960,
    "qwen2.5": 32_768,
    "qwen": 32_768,
    "mistral-large": 131_072,
    "mistral": 32_768,
    "mixtral": 32_768,
    "gemma": 8_192,
    "phi-3": 4_096,
    "smollm": 8_192,
}

# Providers hosted at a well-known address; local servers get their usual default port.
DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "anthropic": "https://api.anthropic.com",
    "ollama": "http://127.0.0.1:11434/v1",
    "llamacpp": "http://127.0.0.1:8080/v1",
    "vllm": "http://127.0.0.1:8000/v1",
    "lmstudio": "http://127.0.0.1:1234/v1",
}
_OPENAI_COMPATIBLE = {"openai", "openrouter", "ollama", "llamacpp", "vllm", "lmstudio", "custom", "openai_compat"}
_KEY_REQUIRED = {"openai", "openrouter", "anthropic"}


def known_context_length(model: str) -> int | None:
    """The table's window for ``model`` (longest known prefix), None when the table does not know it.

    Router prefixes ("anthropic/claude-…", "openai/gpt-4o") and Ollama tags ("llama3.1:8b") are ignored.
    The table holds a model's nominal window; a local server may serve less (`agent.llm.window`).
    """
    name = (model or "").lower().rsplit("/", 1)[-1].split(":", 1)[0]
    best = max((p for p in KNOWN_CONTEXT_LENGTHS if name.startswith(p)), key=len, default=None)
    return KNOWN_CONTEXT_LENGTHS[best] if best else None


def context_length_for(model: str, override: int | None = None, *, default: int = DEFAULT_CONTEXT_LENGTH) -> int:
    """The context window of ``model``: the override when set, else the table's, else ``default``."""
    if override:
        return int(override)
    return known_context_length(model) or default


@dataclass(frozen=True)
class ProviderSpec:
    """Everything needed to build a provider. The key is hidden from repr so specs can be logged."""

    provider: str
    model: str
    base_url: str | None = None
    api_key: str | None = None
    context_length: int | None = None

    def __repr__(self) -> str:
        key = "set" if self.api_key else "none"
        return (f"ProviderSpec(provider={self.provider!r}, model={self.model!r}, base_url={self.base_url!r}, "
                f"api_key={key}, context_length={self.context_length!r})")

    @property
    def effective_base_url(self) -> str | None:
        """``base_url`` or the provider's well-known default."""
        return self.base_url or DEFAULT_BASE_URLS.get(self.provider)


def _field(source: Any, name: str) -> Any:
    value = source.get(name) if isinstance(source, Mapping) else getattr(source, name, None)
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    return value or None


def spec_from(source: Any) -> ProviderSpec:
    """A ProviderSpec from a settings section, dataclass or mapping (SecretStr keys are unwrapped)."""
    if isinstance(source, ProviderSpec):
        return source
    return ProviderSpec(
        provider=str(_field(source, "provider") or "openai").lower(),
        model=str(_field(source, "model") or ""),
        base_url=_field(source, "base_url"),
        api_key=_field(source, "api_key"),
        context_length=_field(source, "context_length"),
    )


def resolve_auxiliary(main: Any, auxiliary: Any | None) -> ProviderSpec:
    """The summary model's spec: its own settings where given, falling back to the main model's.

    With no auxiliary model configured, the main spec is returned unchanged. Missing provider, base_url or
    key are taken from the main spec, but the main key is only reused when the request goes to the same
    endpoint, so a key is never sent to a host it was not configured for.
    """
    main_spec = spec_from(main)
    if auxiliary is None or not _field(auxiliary, "model"):
        return main_spec
    aux = spec_from(auxiliary)
    provider = str(_field(auxiliary, "provider") or main_spec.provider).lower()
    same_provider = provider == main_spec.provider
    base_url = aux.base_url or (main_spec.base_url if same_provider else None)
    candidate = ProviderSpec(provider, aux.model, base_url)
    same_endpoint = same_provider and candidate.effective_base_url == main_spec.effective_base_url
    api_key = aux.api_key or (main_spec.api_key if same_endpoint else None)
    return ProviderSpec(provider, aux.model, base_url, api_key, aux.context_length)


def build_provider(
    provider: str,
    base_url: str | None,
    api_key: str | None,
    model: str,
    client: httpx.AsyncClient | None = None,
    **kwargs: Any,
) -> Provider:
    """Build the provider for a configured name ("anthropic", "openai", "openrouter", "ollama", "vllm",
    "llamacpp", "lmstudio", "custom"); ``kwargs`` go to the provider (timeout, max_retries, cache_ttl…)."""
    name = (provider or "").lower()
    url = base_url or DEFAULT_BASE_URLS.get(name)
    if not url:
        raise ValueError(f"provider {provider!r} needs a base_url")
    kwargs.setdefault("require_api_key", name in _KEY_REQUIRED)
    if name == "anthropic":
        return AnthropicProvider(url, api_key, model, client=client, name=name, **kwargs)
    if name in _OPENAI_COMPATIBLE:
        return OpenAICompatProvider(url, api_key, model, client=client, name=name, **kwargs)
    known = ", ".join(sorted({"anthropic", *_OPENAI_COMPATIBLE}))
    raise ValueError(f"unknown LLM provider {provider!r}; known: {known}")


def build_provider_from_spec(spec: Any, client: httpx.AsyncClient | None = None, **kwargs: Any) -> Provider:
    """`build_provider` for a ProviderSpec or settings section."""
    s = spec_from(spec)
    return build_provider(s.provider, s.base_url, s.api_key, s.model, client, **kwargs)
