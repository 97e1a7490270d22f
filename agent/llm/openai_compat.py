"""OpenAI-compatible Chat Completions: OpenAI, OpenRouter, vLLM, Ollama, llama.cpp server, LM Studio.

Point ``base_url`` at anything that serves ``POST {base_url}/chat/completions`` (usually ending in ``/v1``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from functools import partial
from typing import Any

import httpx

from agent.llm.base import Completion, TextProgress, Usage
from agent.llm.caching import apply_cache_markers
from agent.llm.classify import classify_http_error
from agent.llm.errors import BadResponse, NetworkError
from agent.llm.http_provider import DEFAULT_TIMEOUT, HttpProvider, Request
from agent.llm.retry import RetryPolicy
from agent.llm.transport import SSEEvent, decode_event_json
from agent.llm.usage import parse_openai_usage

__all__ = ["OpenAICompatProvider"]

_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


class OpenAICompatProvider(HttpProvider):
    """Chat Completions over httpx, non-streaming or SSE, with tool calls and usage."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        model: str = "",
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        extra_headers: Mapping[str, str] | None = None,
        max_retries: int = 2,
        retry: RetryPolicy | None = None,
        name: str = "openai",
        prompt_caching: bool | None = None,
        cache_ttl: str = "5m",
        require_api_key: bool = False,
    ) -> None:
        super().__init__(base_url, api_key, model, name=name, client=client, timeout=timeout,
                         extra_headers=extra_headers, max_retries=max_retries, retry=retry,
                         prompt_caching=prompt_caching, cache_ttl=cache_ttl, require_api_key=require_api_key)
        # OpenAI's own API rejects max_tokens for reasoning models; every other server only knows max_tokens.
        self._max_tokens_key = "max_completion_tokens" if "api.openai.com" in self.base_url else "max_tokens"

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def build_body(self, request: Request) -> dict[str, Any]:
        """The JSON body for a request (public so callers and tests can see exactly what is sent)."""
        messages: list[Mapping[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.extend(request.messages)
        if self.prompt_caching and request.cache:
            messages = apply_cache_markers(messages, ttl=self.cache_ttl, native_anthropic=False)
        keys = (*_MESSAGE_KEYS, "cache_control") if self.prompt_caching else _MESSAGE_KEYS
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [{k: m[k] for k in keys if k in m} for m in messages],
        }
        if request.max_tokens is not None:
            body[self._max_tokens_key] = request.max_tokens
        if request.tools:
            body["tools"] = list(request.tools)
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    async def _complete_once(self, request: Request) -> Completion:
        body = self.build_body(request)
        if request.stream:
            return await self._transport.post_sse("/chat/completions", body,
                                                  partial(self._consume_stream, on_text=request.on_text))
        return self._parse_reply(await self._transport.post_json("/chat/completions", body))

    def _raise_embedded_error(self, data: Mapping[str, Any]) -> None:
        """Some routers answer 200 with an error object; classify it like the status it names."""
        error = data.get("error")
        if not error:
            return
        code = error.get("code") if isinstance(error, Mapping) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 500
        raise classify_http_error(status, json.dumps(data), provider=self.name, secrets=self._secrets)

    def _parse_reply(self, data: Mapping[str, Any]) -> Completion:
        self._raise_embedded_error(data)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise BadResponse("reply has no choices", provider=self.name)
        message = choices[0].get("message")
        if not isinstance(message, Mapping):
            raise BadResponse("reply choice has no message", provider=self.name)
        tool_calls = [_normalise_call(c) for c in message.get("tool_calls") or () if isinstance(c, Mapping)]
        return self._completion(_content_text(message.get("content")), tool_calls, choices[0].get("finish_reason"),
                                parse_openai_usage(data.get("usage")), data.get("model"))

    def _completion(self, text: str, tool_calls: list[dict[str, Any]], finish_reason: Any, usage: Usage,
                    model: Any) -> Completion:
        if not text and not tool_calls:
            raise BadResponse(f"reply has empty content (finish_reason={finish_reason!r})", provider=self.name)
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        return Completion(message=message, usage=usage, finish_reason=finish_reason,
                          model=model if isinstance(model, str) else None)

    async def _consume_stream(self, events: AsyncIterator[SSEEvent], on_text: TextProgress | None = None
                              ) -> Completion:
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish_reason: str | None = None
        usage = Usage()
        model: str | None = None
        async for event in events:
            if event.data.strip() == "[DONE]":
                return self._completion("".join(text), [_normalise_call(calls[i]) for i in sorted(calls)],
                                        finish_reason, usage, model)
            chunk = decode_event_json(event, self.name)
            self._raise_embedded_error(chunk)
            model = chunk.get("model") or model
            if chunk.get("usage"):
                usage = parse_openai_usage(chunk["usage"])
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                if isinstance(delta.get("content"), str) and delta["content"]:
                    text.append(delta["content"])
                    if on_text is not None:
                        await on_text("".join(text))
                for piece in delta.get("tool_calls") or ():
                    _merge_call_delta(calls, piece)
                finish_reason = choice.get("finish_reason") or finish_reason
        raise NetworkError("stream ended before [DONE]; the reply may be incomplete", provider=self.name)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return ""


def _merge_call_delta(calls: dict[int, dict[str, Any]], piece: Mapping[str, Any]) -> None:
    index = piece.get("index", len(calls))
    call = calls.setdefault(index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
    if piece.get("id"):
        call["id"] = piece["id"]
    fn = piece.get("function") or {}
    if fn.get("name"):
        call["function"]["name"] += fn["name"]
    if fn.get("arguments"):
        call["function"]["arguments"] += fn["arguments"]


def _normalise_call(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return {
        # Some local servers omit ids; a tool result cannot be paired with its call without one.
        "id": str(call.get("id") or f"call_{uuid.uuid4().hex[:24]}"),
        "type": "function",
        "function": {"name": str(fn.get("name") or ""), "arguments": arguments or "{}"},
    }
