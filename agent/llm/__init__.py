"""The LLM layer: providers over httpx, one error tree, usage records, prompt caching, model metadata."""

from agent.llm.anthropic import AnthropicProvider
from agent.llm.base import Completion, Provider, Usage
from agent.llm.caching import apply_cache_markers, caching_enabled_for, validate_cache_ttl
from agent.llm.errors import (
    AuthError,
    BadResponse,
    ContextOverflow,
    ImageTooLarge,
    InvalidRequest,
    LLMError,
    LLMTimeout,
    LongContextTier,
    ModelNotFound,
    NetworkError,
    PayloadTooLarge,
    RateLimited,
    ServerError,
)
from agent.llm.models import (
    ProviderSpec,
    build_provider,
    build_provider_from_spec,
    context_length_for,
    resolve_auxiliary,
)
from agent.llm.openai_compat import OpenAICompatProvider
from agent.llm.retry import RetryPolicy

__all__ = [
    "AnthropicProvider",
    "AuthError",
    "BadResponse",
    "Completion",
    "ContextOverflow",
    "ImageTooLarge",
    "InvalidRequest",
    "LLMError",
    "LLMTimeout",
    "LongContextTier",
    "ModelNotFound",
    "NetworkError",
    "OpenAICompatProvider",
    "PayloadTooLarge",
    "Provider",
    "ProviderSpec",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "Usage",
    "apply_cache_markers",
    "build_provider",
    "build_provider_from_spec",
    "caching_enabled_for",
    "context_length_for",
    "resolve_auxiliary",
    "validate_cache_ttl",
]
