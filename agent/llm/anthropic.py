"""Native Anthropic Messages API provider (``POST {base_url}/v1/messages``), non-streaming and SSE."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from functools import partial
from typing import Any

import httpx

from agent.jsonlimits import loads_bounded
from agent.llm.anthropic_format import (
    STOP_REASONS,
    blocks_to_message,
    to_anthropic_messages,
    tools_to_anthropic,
)
from agent.llm.base import Completion, TextProgress
from agent.llm.caching import apply_cache_markers
from agent.llm.classify import classify_http_error, status_for_error_type
from agent.llm.errors import BadResponse, NetworkError
from agent.llm.http_provider import DEFAULT_TIMEOUT, HttpProvider, Request
from agent.llm.retry import RetryPolicy
from agent.llm.transport import SSEEvent, decode_event_json
from agent.llm.usage import parse_anthropic_usage

__all__ = ["ANTHROPIC_VERSION", "AnthropicProvider"]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096


class AnthropicProvider(HttpProvider):
    """Claude over the Messages API, speaking internal OpenAI-format messages on both sides."""

    def __init__(
        self,
        base_url: str = "https://api.anthropic.com",
        api_key: str | None = None,
        model: str = "",
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        extra_headers: Mapping[str, str] | None = None,
        max_retries: int = 2,
        retry: RetryPolicy | None = None,
        name: str = "anthropic",
        prompt_caching: bool | None = None,
        cache_ttl: str = "5m",
        require_api_key: bool = True,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        super().__init__(base_url, api_key, model, name=name, client=client, timeout=timeout,
                         extra_headers=extra_headers, max_retries=max_retries, retry=retry,
                         prompt_caching=prompt_caching, cache_ttl=cache_ttl, require_api_key=require_api_key)
        self.default_max_tokens = default_max_tokens

    @staticmethod
    def _endpoint_root(base_url: str) -> str:
        # Accept both "https://api.anthropic.com" and ".../v1"; the path below adds /v1 itself.
        return base_url.removesuffix("/v1")

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def build_body(self, request: Request) -> dict[str, Any]:
        """The JSON body for a request (public so callers and tests can see exactly what is sent)."""
        messages: list[Mapping[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.extend(request.messages)
        if self.prompt_caching and request.cache:
            messages = apply_cache_markers(messages, ttl=self.cache_ttl, native_anthropic=True)
        system, converted = to_anthropic_messages(messages)
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens if request.max_tokens is not None else self.default_max_tokens,
            "messages": converted,
        }
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = tools_to_anthropic(request.tools)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stream:
            body["stream"] = True
        return body

    async def _complete_once(self, request: Request) -> Completion:
        body = self.build_body(request)
        if request.stream:
            return await self._transport.post_sse("/v1/messages", body,
                                                  partial(self._consume_stream, on_text=request.on_text))
        return self._parse_reply(await self._transport.post_json("/v1/messages", body))

    def _raise_error_object(self, data: Mapping[str, Any]) -> None:
        if data.get("type") != "error":
            return
        error = data.get("error")
        kind = error.get("type", "") if isinstance(error, Mapping) else ""
        raise classify_http_error(status_for_error_type(kind), json.dumps(data), provider=self.name,
                                  secrets=self._secrets)

    def _finish(self, blocks: list[Mapping[str, Any]], stop_reason: Any, usage: Any, output_tokens: Any,
                model: Any) -> Completion:
        message = blocks_to_message(blocks)
        if not message["content"] and not message.get("tool_calls"):
            raise BadResponse(f"reply has empty content (stop_reason={stop_reason!r})", provider=self.name)
        return Completion(
            message=message,
            usage=parse_anthropic_usage(usage, output_tokens=output_tokens),
            finish_reason=STOP_REASONS.get(stop_reason, stop_reason) if isinstance(stop_reason, str) else None,
            model=model if isinstance(model, str) else None,
        )

    def _parse_reply(self, data: Mapping[str, Any]) -> Completion:
        self._raise_error_object(data)
        content = data.get("content")
        if not isinstance(content, list):
            raise BadResponse("reply has no content list", provider=self.name)
        blocks = [b for b in content if isinstance(b, Mapping)]
        return self._finish(blocks, data.get("stop_reason"), data.get("usage"), None, data.get("model"))

    async def _consume_stream(self, events: AsyncIterator[SSEEvent], on_text: TextProgress | None = None
                              ) -> Completion:
        blocks: dict[int, dict[str, Any]] = {}
        partial_json: dict[int, list[str]] = {}
        usage: dict[str, Any] = {}
        stop_reason: Any = None
        model: Any = None
        async for event in events:
            data = decode_event_json(event, self.name)
            self._raise_error_object(data)
            kind = data.get("type") or event.event
            if kind == "message_start":
                message = data.get("message") or {}
                model = message.get("model")
                usage.update(message.get("usage") or {})
            elif kind == "content_block_start":
                index = int(data.get("index", len(blocks)))
                blocks[index] = dict(data.get("content_block") or {})
                partial_json[index] = []
            elif kind == "content_block_delta":
                self._apply_delta(blocks, partial_json, data)
                if on_text is not None and (data.get("delta") or {}).get("type") == "text_delta":
                    await on_text("".join(str(blocks[i].get("text") or "") for i in sorted(blocks)
                                          if blocks[i].get("type") == "text"))
            elif kind == "content_block_stop":
                self._close_block(blocks, partial_json, int(data.get("index", -1)))
            elif kind == "message_delta":
                stop_reason = (data.get("delta") or {}).get("stop_reason") or stop_reason
                usage.update(data.get("usage") or {})
            elif kind == "message_stop":
                return self._finish([blocks[i] for i in sorted(blocks)], stop_reason, usage, None, model)
        raise NetworkError("stream ended before message_stop; the reply may be incomplete", provider=self.name)

    @staticmethod
    def _apply_delta(blocks: dict[int, dict[str, Any]], partial_json: dict[int, list[str]],
                     data: Mapping[str, Any]) -> None:
        index = int(data.get("index", -1))
        block = blocks.get(index)
        delta = data.get("delta") or {}
        if block is None:
            return
        if delta.get("type") == "text_delta":
            block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
        elif delta.get("type") == "input_json_delta":
            partial_json[index].append(str(delta.get("partial_json") or ""))

    def _close_block(self, blocks: dict[int, dict[str, Any]], partial_json: dict[int, list[str]],
                     index: int) -> None:
        block = blocks.get(index)
        if block is None or block.get("type") != "tool_use" or not partial_json.get(index):
            return
        raw = "".join(partial_json[index])
        try:
            block["input"] = loads_bounded(raw)
        except ValueError as exc:
            raise BadResponse(f"tool_use input in stream is not valid JSON ({len(raw)} chars)",
                              provider=self.name) from exc
