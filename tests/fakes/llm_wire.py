"""What the fake LLM server says, in each API's own dialect: replies, SSE events, and error bodies.

Error texts are worded the way the real providers word them (OpenAI, Anthropic, llama.cpp, nginx), since
the client classifies by those words.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ErrorReply",
    "Reply",
    "anthropic_events",
    "anthropic_message",
    "error_reply",
    "openai_chunks",
    "openai_completion",
]

_TO_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


@dataclass
class Reply:
    """A successful answer. ``usage`` keys: prompt_tokens, completion_tokens, cache_read_tokens,
    cache_write_tokens (any missing prompt/completion figure is counted from the request and reply)."""

    text: str = "ok"
    tool_calls: Sequence[Mapping[str, Any]] | None = None
    usage: Mapping[str, int] | None = None
    finish_reason: str | None = None
    delay: float = 0.0
    drop_after_chunks: int | None = None
    omit_end: bool = False
    stream_error: str | None = None
    # Seconds between streamed events (a slow model whose answer grows visibly).
    chunk_delay: float = 0.0
    # How many pieces the text streams in.
    text_pieces: int = 3
    # Seconds between 64-byte pieces of a JSON (not streamed) body: a server that never stalls long enough
    # for a read timeout but never finishes either.
    trickle: float = 0.0
    # Held back until the test sets it (a model still writing, for as long as the test needs).
    gate: asyncio.Event | None = None

    def calls(self) -> list[dict[str, Any]]:
        """Tool calls with ids and arguments as JSON strings."""
        out = []
        for i, call in enumerate(self.tool_calls or ()):
            args = call.get("arguments", {})
            out.append({
                "id": call.get("id") or f"call_fake_{i}",
                "name": call["name"],
                "arguments": args if isinstance(args, str) else json.dumps(args),
            })
        return out

    def finish(self) -> str:
        """OpenAI-style finish reason."""
        return self.finish_reason or ("tool_calls" if self.tool_calls else "stop")


@dataclass
class ErrorReply:
    """A failed answer: status, body text and headers, sent as is."""

    status: int
    body: str
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    delay: float = 0.0


def _openai_error(status: int, message: str, type_: str, code: str | None = None,
                  headers: dict[str, str] | None = None) -> ErrorReply:
    body = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return ErrorReply(status, json.dumps(body), headers or {})


def _anthropic_error(status: int, type_: str, message: str, headers: dict[str, str] | None = None) -> ErrorReply:
    body = {"type": "error", "error": {"type": type_, "message": message}}
    return ErrorReply(status, json.dumps(body), headers or {"request-id": "req_fake"})


def _retry_headers(params: Mapping[str, Any]) -> dict[str, str]:
    headers = {}
    if params.get("retry_after") is not None:
        headers["retry-after"] = str(params["retry_after"])
    if params.get("retry_after_ms") is not None:
        headers["retry-after-ms"] = str(params["retry_after_ms"])
    return headers


def _openai_failure(kind: str, p: Mapping[str, Any]) -> ErrorReply | None:
    limit, prompt = p.get("limit", 8192), p.get("prompt", 9000)
    key = p.get("key") or "sk-abc...xyz"
    table = {
        "context_overflow": lambda: _openai_error(
            400, f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
            f"{prompt} tokens. Please reduce the length of the messages.", "invalid_request_error",
            "context_length_exceeded"),
        "context_output": lambda: _openai_error(
            400, f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt + p.get('completion', 4096)} tokens ({prompt} in the messages, {p.get('completion', 4096)} "
            "in the completion). Please reduce the length of the messages or completion.",
            "invalid_request_error", "context_length_exceeded"),
        "llamacpp_context": lambda: ErrorReply(400, json.dumps({"error": {
            "code": 400, "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error", "n_prompt_tokens": prompt, "n_ctx": limit}})),
        "payload_too_large": lambda: ErrorReply(
            413, "<html><head><title>413 Request Entity Too Large</title></head><body><center><h1>413 Request "
            "Entity Too Large</h1></center><hr><center>nginx</center></body></html>", content_type="text/html"),
        "long_context_tier": lambda: _openai_error(
            429, "Extra usage is required for long context requests.", "rate_limit_error"),
        "image_too_large": lambda: _openai_error(
            400, "messages.1.content.1.image.source.base64: image exceeds 5 MB maximum: 7340032 bytes > "
            "5242880 bytes", "invalid_request_error"),
        "rate_limit": lambda: _openai_error(
            429, "Rate limit reached for gpt-4o in organization org-fake on tokens per min (TPM): Limit 30000, "
            "Used 29500, Requested 1200. Please try again in 1.4s.", "tokens", "rate_limit_exceeded",
            _retry_headers(p)),
        "auth": lambda: _openai_error(
            401, f"Incorrect API key provided: {key}. You can find your API key at "
            "https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key"),
        "forbidden": lambda: _openai_error(
            403, "Project does not have access to model gpt-4o", "invalid_request_error", "model_not_allowed"),
        "quota": lambda: _openai_error(
            429, "You exceeded your current quota, please check your plan and billing details.",
            "insufficient_quota", "insufficient_quota"),
        "model_not_found": lambda: _openai_error(
            404, f"The model `{p.get('model', 'gpt-9')}` does not exist or you do not have access to it.",
            "invalid_request_error", "model_not_found"),
        "server_error": lambda: _openai_error(
            500, "The server had an error while processing your request. Sorry about that!", "server_error"),
        "overloaded": lambda: _openai_error(
            503, "The engine is currently overloaded, please try again later", "server_error",
            headers=_retry_headers(p)),
        "bad_gateway": lambda: ErrorReply(502, "<html><body><h1>502 Bad Gateway</h1></body></html>",
                                          content_type="text/html"),
        "invalid_request": lambda: _openai_error(
            400, "Invalid value for 'temperature': must be between 0 and 2.", "invalid_request_error"),
    }
    make = table.get(kind)
    return make() if make else None


def _anthropic_failure(kind: str, p: Mapping[str, Any]) -> ErrorReply | None:
    limit, prompt = p.get("limit", 200_000), p.get("prompt", 210_000)
    table = {
        "context_overflow": lambda: _anthropic_error(
            400, "invalid_request_error", f"prompt is too long: {prompt} tokens > {limit} maximum"),
        "context_output": lambda: _anthropic_error(
            400, "invalid_request_error", f"input length and `max_tokens` exceed context limit: {prompt} + "
            f"{p.get('completion', 8192)} > {limit}, decrease input length or `max_tokens` and try again"),
        "payload_too_large": lambda: _anthropic_error(
            413, "request_too_large", "Request exceeds the maximum allowed number of bytes."),
        "long_context_tier": lambda: _anthropic_error(
            429, "rate_limit_error", "Extra usage is required for long context requests."),
        "image_too_large": lambda: _anthropic_error(
            400, "invalid_request_error",
            "messages.0.content.1.image.source.base64.data: image exceeds 5 MB maximum: 7340032 bytes > 5242880 bytes"),
        "rate_limit": lambda: _anthropic_error(
            429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit "
            "(https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage.",
            _retry_headers(p)),
        "auth": lambda: _anthropic_error(
            401, "authentication_error", f"invalid x-api-key {p['key']}" if p.get("key") else "invalid x-api-key"),
        "forbidden": lambda: _anthropic_error(
            403, "permission_error", "Your API key does not have permission to use the specified resource."),
        "quota": lambda: _anthropic_error(
            400, "invalid_request_error", "Your credit balance is too low to access the Anthropic API. "
            "Please go to Plans & Billing to upgrade or purchase credits."),
        "model_not_found": lambda: _anthropic_error(
            404, "not_found_error", f"model: {p.get('model', 'claude-9')}"),
        "server_error": lambda: _anthropic_error(500, "api_error", "Internal server error"),
        "overloaded": lambda: _anthropic_error(529, "overloaded_error", "Overloaded", _retry_headers(p)),
        "bad_gateway": lambda: ErrorReply(502, "<html><body><h1>502 Bad Gateway</h1></body></html>",
                                          content_type="text/html"),
        "invalid_request": lambda: _anthropic_error(
            400, "invalid_request_error", "messages: roles must alternate between \"user\" and \"assistant\""),
    }
    make = table.get(kind)
    return make() if make else None


def error_reply(api: str, kind: str, params: Mapping[str, Any]) -> ErrorReply:
    """The error a real provider sends for ``kind`` on ``api`` ("openai" or "anthropic")."""
    reply = (_openai_failure if api == "openai" else _anthropic_failure)(kind, params)
    if reply is None:
        raise ValueError(f"fake LLM server has no {api} failure kind {kind!r}")
    return reply


def _openai_usage(usage: Mapping[str, int]) -> dict[str, Any]:
    prompt, completion = usage["prompt_tokens"], usage["completion_tokens"]
    details = {"cached_tokens": usage.get("cache_read_tokens", 0)}
    if usage.get("cache_write_tokens"):
        details["cache_write_tokens"] = usage["cache_write_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": details}


def _anthropic_usage(usage: Mapping[str, int]) -> dict[str, int]:
    read, write = usage.get("cache_read_tokens", 0), usage.get("cache_write_tokens", 0)
    return {"input_tokens": max(0, usage["prompt_tokens"] - read - write), "output_tokens": usage["completion_tokens"],
            "cache_read_input_tokens": read, "cache_creation_input_tokens": write}


def openai_completion(reply: Reply, model: str, usage: Mapping[str, int], seq: int) -> dict[str, Any]:
    """A non-streaming Chat Completions body."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in reply.calls()]
    return {"id": f"chatcmpl-fake-{seq}", "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish()}],
            "usage": _openai_usage(usage)}


def _pieces(text: str, n: int = 3) -> list[str]:
    step = max(1, -(-len(text) // n))
    return [text[i:i + step] for i in range(0, len(text), step)]


def openai_chunks(reply: Reply, model: str, usage: Mapping[str, int] | None, seq: int) -> list[dict[str, Any]]:
    """Streaming chunks (without the final [DONE]); usage only when the client asked for it."""
    base = {"id": f"chatcmpl-fake-{seq}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    chunks += [{**base, "choices": [{"index": 0, "delta": {"content": p}}]}
               for p in _pieces(reply.text, reply.text_pieces)]
    for i, call in enumerate(reply.calls()):
        head = {"index": i, "id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": ""}}
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
        for part in _pieces(call["arguments"], 2):
            delta = {"tool_calls": [{"index": i, "function": {"arguments": part}}]}
            chunks.append({**base, "choices": [{"index": 0, "delta": delta}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish()}]})
    if usage is not None:
        chunks.append({**base, "choices": [], "usage": _openai_usage(usage)})
    return chunks


def _input(arguments: str) -> Any:
    """A tool_use input; malformed scripted arguments stay a string so the stream can send them as is."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _anthropic_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    blocks += [{"type": "tool_use", "id": c["id"].replace("call_", "toolu_"), "name": c["name"],
                "input": _input(c["arguments"])} for c in reply.calls()]
    return blocks


def anthropic_message(reply: Reply, model: str, usage: Mapping[str, int], seq: int) -> dict[str, Any]:
    """A non-streaming Messages API body."""
    return {"id": f"msg_fake_{seq}", "type": "message", "role": "assistant", "model": model,
            "content": _anthropic_blocks(reply), "stop_reason": _TO_ANTHROPIC_STOP.get(reply.finish(), "end_turn"),
            "stop_sequence": None, "usage": _anthropic_usage(usage)}


def anthropic_events(reply: Reply, model: str, usage: Mapping[str, int], seq: int) -> list[tuple[str, dict[str, Any]]]:
    """Streaming (event name, data) pairs, message_start through message_stop."""
    start_usage = {**_anthropic_usage(usage), "output_tokens": 1}
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": {
        "id": f"msg_fake_{seq}", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": start_usage}})]
    for index, block in enumerate(_anthropic_blocks(reply)):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            events.append(("ping", {"type": "ping"}))
            events += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "text_delta", "text": p}})
                       for p in _pieces(block["text"], reply.text_pieces)]
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}))
            raw = block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
            events += [("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "input_json_delta", "partial_json": p}})
                       for p in _pieces(raw, 2)]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": _TO_ANTHROPIC_STOP.get(reply.finish(), "end_turn"), "stop_sequence": None},
        "usage": {"output_tokens": usage["completion_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events
