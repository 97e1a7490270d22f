"""A loopback fake LLM provider: a real HTTP server on 127.0.0.1 speaking both APIs, scriptable per test.

    POST /v1/chat/completions   OpenAI Chat Completions (JSON or SSE)
    POST /v1/messages           Anthropic Messages (JSON or SSE)

Point an OpenAI-compatible client at ``server.openai_base_url`` and an Anthropic one at ``server.base_url``.
``reports_window = ("llamacpp" | "vllm" | "ollama" | "lmstudio", tokens)`` also answers that server's own
window endpoint with ``tokens`` (its real response shape: llama.cpp ``/props``, vLLM ``/v1/models``, Ollama
``/api/ps``, LM Studio ``/api/v0/models``); every other window endpoint answers 404, as on a real server.
Each request takes the next scripted item (``reply`` / ``fail`` / ``drop_mid_stream`` / ``raw`` …); when
the script is empty, ``responder(request_json)`` answers if set, else a plain "ok". Every request is kept in
``requests``. Usage is counted from the request with `agent.tokens`, and ``context_window`` makes the server
refuse prompts that do not fit, with the provider's own overflow wording.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from agent.tokens import get_counter
from tests.fakes.llm_wire import (
    ErrorReply,
    Reply,
    anthropic_events,
    anthropic_message,
    error_reply,
    openai_chunks,
    openai_completion,
)
from tests.fakes.loopback import serve_on_loopback

__all__ = ["Drop", "ErrorReply", "Fail", "FakeLLMServer", "RecordedRequest", "Reply"]


@dataclass
class Fail:
    """A named failure, worded per API at answer time (see `llm_wire.error_reply` for the kinds)."""

    kind: str
    params: Mapping[str, Any]
    delay: float = 0.0


@dataclass
class Drop:
    """Close the connection: before any byte (non-streaming) or after ``after_chunks`` events (streaming)."""

    text: str = "partial reply that never ends"
    after_chunks: int = 1


Spec = Reply | Fail | Drop | ErrorReply | str
_ANY_API_KINDS = frozenset({"invalid_json", "empty", "stream_error", "no_end"})


def _has_kind(api: str, kind: str) -> bool:
    try:
        error_reply(api, kind, {})
    except ValueError:
        return False
    return True
Responder = Callable[[dict[str, Any]], Spec]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as received."""

    api: str
    path: str
    json: dict[str, Any]
    headers: dict[str, str]
    prompt_tokens: int

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's messages as sent (API-native shape)."""
        return list(self.json.get("messages") or [])


def _flatten_anthropic(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """Anthropic messages as OpenAI-shaped text messages, so both APIs are counted alike."""
    def text_of(content: Any) -> str:
        if isinstance(content, str):
            return content
        out = []
        for block in content or ():
            if block.get("type") == "text":
                out.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                out.append(block.get("name", "") + json.dumps(block.get("input", {})))
            elif block.get("type") == "tool_result":
                out.append(text_of(block.get("content")))
        return "\n".join(out)

    flat = [{"role": m.get("role"), "content": text_of(m.get("content"))} for m in body.get("messages") or ()]
    return flat, text_of(body.get("system"))


class FakeLLMServer:
    """The scriptable fake; use as ``async with FakeLLMServer() as server`` or via the ``fake_llm`` fixture."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.responder: Responder | None = None
        self.context_window: int | None = None
        self.output_window_errors = True
        self.overflow_style = "openai"
        self.default_text = "ok"
        self.reports_window: tuple[str, int] | None = None
        self._script: deque[Spec] = deque()
        self._next_delay = 0.0
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # ----- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> FakeLLMServer:
        """Bind a random port on 127.0.0.1 and serve."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle_openai)
        app.router.add_post("/v1/messages", self._handle_anthropic)
        for path in ("/v1/models", "/props", "/api/ps", "/api/v0/models"):
            app.router.add_get(path, self._window_endpoint)
        self._runner, self.port = await serve_on_loopback(app, access_log=None, shutdown_timeout=0.5)
        return self

    async def stop(self) -> None:
        """Stop serving; pending delays end at once (idempotent)."""
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeLLMServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """Root URL (the Anthropic client's base_url)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """Root + /v1 (an OpenAI-compatible client's base_url)."""
        return f"{self.base_url}/v1"

    @property
    def last_request(self) -> RecordedRequest:
        """The most recent request."""
        return self.requests[-1]

    # ----- scripting -------------------------------------------------------------------------------------
    def reply(self, text: str = "ok", *, usage: Mapping[str, int] | None = None,
              tool_calls: Sequence[Mapping[str, Any]] | None = None, finish_reason: str | None = None,
              delay: float = 0.0, chunk_delay: float = 0.0, text_pieces: int = 3, trickle: float = 0.0) -> None:
        """Queue a successful reply; ``tool_calls`` items are {"name", "arguments": dict|str, "id"?}. A streamed
        reply comes in ``text_pieces`` pieces, ``chunk_delay`` seconds apart; a JSON one with ``trickle`` in
        64-byte pieces that many seconds apart."""
        self._script.append(Reply(text, tool_calls, usage, finish_reason, delay, chunk_delay=chunk_delay,
                                  text_pieces=text_pieces, trickle=trickle))

    def fail(self, kind: str, *, times: int = 1, delay: float = 0.0, **params: Any) -> None:
        """Queue ``times`` failures of a kind: context_overflow, context_output, llamacpp_context,
        payload_too_large, long_context_tier, image_too_large, rate_limit, auth, forbidden, quota,
        model_not_found, server_error, overloaded, bad_gateway, invalid_request (worded per API), and
        invalid_json, empty, stream_error, no_end (either API)."""
        if kind not in _ANY_API_KINDS and not any(_has_kind(api, kind) for api in ("openai", "anthropic")):
            raise ValueError(f"fake LLM server has no failure kind {kind!r}")
        for _ in range(times):
            self._script.append(Fail(kind, params, delay))

    def drop_mid_stream(self, text: str = "partial reply that never ends", after_chunks: int = 1) -> None:
        """Queue a connection drop (before any byte when the request does not stream)."""
        self._script.append(Drop(text, after_chunks))

    def raw(self, status: int, body: str, *, headers: Mapping[str, str] | None = None,
            content_type: str = "application/json") -> None:
        """Queue an exact HTTP reply."""
        self._script.append(ErrorReply(status, body, dict(headers or {}), content_type))

    def delay(self, seconds: float) -> None:
        """Hold the next answer back ``seconds`` before sending headers (to trip client timeouts)."""
        self._next_delay = seconds

    @property
    def pending(self) -> int:
        """Scripted items not yet used."""
        return len(self._script)

    # ----- serving ---------------------------------------------------------------------------------------
    def count_prompt(self, api: str, body: Mapping[str, Any]) -> int:
        """Prompt tokens of a request, counted with the project's exact tokenizer."""
        counter = get_counter()
        tools = body.get("tools")
        if api == "openai":
            return counter.count_request(body.get("messages") or [], tools=tools)
        messages, system = _flatten_anthropic(body)
        return counter.count_request(messages, system=system or None, tools=tools)

    def _next_spec(self, body: dict[str, Any]) -> Spec:
        if self._script:
            return self._script.popleft()
        if self.responder is not None:
            return self.responder(body)
        return Reply(self.default_text)

    def _window_error(self, api: str, prompt: int, max_tokens: int | None) -> Fail | None:
        window = self.context_window
        if window is None:
            return None
        llamacpp = api == "openai" and self.overflow_style == "llamacpp"
        if prompt > window:
            return Fail("llamacpp_context" if llamacpp else "context_overflow", {"limit": window, "prompt": prompt})
        if self.output_window_errors and not llamacpp and max_tokens and prompt + max_tokens > window:
            return Fail("context_output", {"limit": window, "prompt": prompt, "completion": max_tokens})
        return None

    async def _pause(self, seconds: float) -> None:
        if seconds > 0:
            try:
                await asyncio.wait_for(self._closing.wait(), timeout=seconds)
            except TimeoutError:
                pass

    async def _until(self, gate: asyncio.Event) -> None:
        """Wait until ``gate`` is set, or the server stops."""
        closing = asyncio.ensure_future(self._closing.wait())
        opened = asyncio.ensure_future(gate.wait())
        await asyncio.wait({closing, opened}, return_when=asyncio.FIRST_COMPLETED)
        for waiter in (closing, opened):
            waiter.cancel()

    async def _window_endpoint(self, request: web.Request) -> web.StreamResponse:
        style, tokens = self.reports_window or ("", 0)
        bodies = {
            ("llamacpp", "/props"): {"default_generation_settings": {"n_ctx": tokens}, "total_slots": 1},
            ("vllm", "/v1/models"): {"object": "list", "data": [
                {"id": "fake-model", "object": "model", "owned_by": "vllm", "max_model_len": tokens}]},
            ("ollama", "/api/ps"): {"models": [{"name": "fake-model:latest", "model": "fake-model:latest",
                                                "context_length": tokens}]},
            ("lmstudio", "/api/v0/models"): {"object": "list", "data": [
                {"id": "fake-model", "state": "loaded", "max_context_length": 131_072,
                 "loaded_context_length": tokens}]},
        }
        body = bodies.get((style, request.path))
        if body is None:
            return web.json_response({"error": {"message": "File Not Found", "code": 404}}, status=404)
        return web.json_response(body)

    async def _handle_openai(self, request: web.Request) -> web.StreamResponse:
        return await self._handle("openai", request)

    async def _handle_anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._handle("anthropic", request)

    async def _handle(self, api: str, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = self.count_prompt(api, body)
        self.requests.append(RecordedRequest(api, request.path, body, dict(request.headers), prompt))
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        spec = self._window_error(api, prompt, max_tokens) or self._next_spec(body)
        delay, self._next_delay = self._next_delay + getattr(spec, "delay", 0.0), 0.0
        await self._pause(delay)
        gate = getattr(spec, "gate", None)
        if gate is not None:
            await self._until(gate)
        if isinstance(spec, str):
            spec = Reply(spec)
        if isinstance(spec, Fail):
            return await self._fail(api, spec, request, body, prompt)
        if isinstance(spec, ErrorReply):
            return web.Response(status=spec.status, text=spec.body, headers=spec.headers,
                                content_type=spec.content_type)
        if isinstance(spec, Drop):
            spec = Reply(spec.text, drop_after_chunks=spec.after_chunks)
            if not body.get("stream"):
                return await self._drop(request)
        return await self._answer(api, request, body, spec, prompt)

    async def _fail(self, api: str, spec: Fail, request: web.Request, body: dict[str, Any],
                    prompt: int) -> web.StreamResponse:
        if spec.kind == "invalid_json":
            return web.Response(status=200, text='{"id": "broken", "choices": [', content_type="application/json")
        if spec.kind == "empty":
            return await self._answer(api, request, body, Reply(""), prompt)
        if spec.kind == "stream_error":
            return await self._answer(api, request, body, Reply(stream_error="overloaded"), prompt)
        if spec.kind == "no_end":
            return await self._answer(api, request, body, Reply(omit_end=True), prompt)
        error = error_reply(api, spec.kind, spec.params)
        return web.Response(status=error.status, text=error.body, headers=error.headers,
                            content_type=error.content_type)

    async def _drop(self, request: web.Request) -> web.StreamResponse:
        if request.transport is not None:
            request.transport.close()
        raise asyncio.CancelledError

    def _usage(self, reply: Reply, prompt: int) -> dict[str, int]:
        completion = get_counter().count_text(reply.text + "".join(c["arguments"] for c in reply.calls()))
        return {"prompt_tokens": prompt, "completion_tokens": completion, **dict(reply.usage or {})}

    async def _answer(self, api: str, request: web.Request, body: dict[str, Any], reply: Reply,
                      prompt: int) -> web.StreamResponse:
        model = str(body.get("model") or "fake-model")
        usage = self._usage(reply, prompt)
        seq = len(self.requests)
        if not body.get("stream"):
            payload = (openai_completion if api == "openai" else anthropic_message)(reply, model, usage, seq)
            if reply.trickle:
                return await self._trickle_json(request, payload, reply.trickle)
            return web.json_response(payload)
        if api == "openai":
            include = bool((body.get("stream_options") or {}).get("include_usage"))
            events = [(None, c) for c in openai_chunks(reply, model, usage if include else None, seq)]
            end: tuple[str | None, Any] = (None, "[DONE]")
            error = (None, {"error": {"message": "The server is overloaded", "type": "server_error", "code": 503}})
        else:
            events = list(anthropic_events(reply, model, usage, seq))
            end = events.pop()
            error = ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
        return await self._stream(request, events, end, reply, error)

    async def _stream(self, request: web.Request, events: list[tuple[str | None, Any]],
                      end: tuple[str | None, Any], reply: Reply, error: tuple[str | None, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        if reply.stream_error:
            events = [*events[:2], error]
        for sent, (name, data) in enumerate(events):
            if reply.drop_after_chunks is not None and sent >= reply.drop_after_chunks:
                return await self._drop(request)
            if sent:
                await self._pause(reply.chunk_delay)
            await response.write(_sse(name, data))
        if not reply.omit_end and not reply.stream_error:
            await response.write(_sse(*end))
        await response.write_eof()
        return response

    async def _trickle_json(self, request: web.Request, payload: Any, every: float) -> web.StreamResponse:
        body = json.dumps(payload).encode()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(body)
        await response.prepare(request)
        for start in range(0, len(body), 64):
            await response.write(body[start:start + 64])
            await self._pause(every)
        await response.write_eof()
        return response


def _sse(name: str | None, data: Any) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {text}\n\n".encode()
