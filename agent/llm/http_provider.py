"""What both HTTP providers share: settings, key checks, caching decision, retries and the transport."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from agent.llm.base import Completion, Provider, TextProgress
from agent.llm.caching import caching_enabled_for, validate_cache_ttl
from agent.llm.errors import AuthError
from agent.llm.retry import RetryPolicy
from agent.llm.transport import HttpTransport

__all__ = ["DEFAULT_TIMEOUT", "HttpProvider", "Request"]

DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class Request:
    """One completion request as the provider was asked for it."""

    messages: Sequence[Mapping[str, Any]]
    system: str | None
    tools: Sequence[Mapping[str, Any]] | None
    max_tokens: int | None
    model: str
    stream: bool
    temperature: float | None
    on_text: TextProgress | None = None
    cache: bool = True  # whether to mark the prompt for the provider's prompt cache (where caching is on)


class HttpProvider(Provider):
    """A provider that POSTs to one base URL; subclasses supply headers and the wire format."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        *,
        name: str,
        client: httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        extra_headers: Mapping[str, str] | None = None,
        max_retries: int = 2,
        retry: RetryPolicy | None = None,
        prompt_caching: bool | None = None,
        cache_ttl: str = "5m",
        require_api_key: bool = False,
    ) -> None:
        if not model:
            raise ValueError("a model name is required")
        if not base_url:
            raise ValueError("a base_url is required")
        self.name = name
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.cache_ttl = validate_cache_ttl(cache_ttl)
        self.prompt_caching = (
            caching_enabled_for(name, model, base_url) if prompt_caching is None else prompt_caching
        )
        self._api_key = api_key or None
        self._require_api_key = require_api_key
        self._retry = retry or RetryPolicy(max_retries=max_retries)
        headers = {**self._auth_headers(self._api_key), **dict(extra_headers or {})}
        self._transport = HttpTransport(
            base_url=self._endpoint_root(self.base_url),
            headers=headers,
            timeout=timeout,
            client=client,
            provider=name,
            secrets=(self._api_key,) if self._api_key else (),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"

    @property
    def _secrets(self) -> tuple[str, ...]:
        """Literal strings to redact from any error text."""
        return (self._api_key,) if self._api_key else ()

    @staticmethod
    def _endpoint_root(base_url: str) -> str:
        """The URL the API paths are appended to (overridden where providers disagree about /v1)."""
        return base_url

    @abstractmethod
    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        """Headers carrying the key and protocol version."""

    @abstractmethod
    async def _complete_once(self, request: Request) -> Completion:
        """One attempt at the request, raising LLMError on failure."""

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        model: str | None = None,
        stream: bool = False,
        temperature: float | None = None,
        on_text: TextProgress | None = None,
        cache: bool = True,
    ) -> Completion:
        """Run one chat completion, retrying rate limits, timeouts and 5xx within the retry policy."""
        if self._require_api_key and not self._api_key:
            raise AuthError(f"no API key configured for provider {self.name!r}", provider=self.name)
        request = Request(messages, system, tools, max_tokens, model or self.model, stream, temperature, on_text,
                          cache)
        return await self._retry.run(lambda: self._complete_once(request), label=f"{self.name} completion")

    async def aclose(self) -> None:
        """Close the HTTP client if this provider created it (idempotent)."""
        await self._transport.aclose()
