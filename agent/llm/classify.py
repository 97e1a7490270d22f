"""Translate provider failures (HTTP status + body, transport exceptions) into the `agent.llm.errors` tree.

Providers word the same failure differently, so classification reads the status code AND the error text:
OpenAI / vLLM / OpenRouter wrap errors as ``{"error": {"message", "type", "code"}}``, Anthropic as
``{"type": "error", "error": {"type", "message"}}``, llama.cpp adds ``n_ctx`` / ``n_prompt_tokens``, Ollama
sends ``{"error": "text"}`` and proxies send HTML. Every text is scrubbed of secrets before it is stored.
"""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

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
    scrub_secrets,
)

__all__ = [
    "ErrorBody",
    "classify_http_error",
    "classify_transport_error",
    "parse_error_body",
    "parse_retry_after",
    "status_for_error_type",
]

_MAX_MESSAGE_CHARS = 500

# Anthropic's error "type" → the status it is sent with; used for errors that arrive inside a 200 SSE stream.
_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}

_MAX_CONTEXT = re.compile(r"maximum context length is (\d+) tokens")
_REQUESTED_SPLIT = re.compile(r"requested (\d+) tokens \((\d+) in the messages, (\d+) in the completion\)")
_REQUESTED_ABOUT = re.compile(r"requested about (\d+) tokens \(.*?(\d+) in the output\)")
_REQUEST_HAS_INPUT = re.compile(r"your request has (\d+) input tokens")
_MESSAGES_RESULTED = re.compile(r"messages resulted in (\d+) tokens")
_ANTHROPIC_TOO_LONG = re.compile(r"prompt is too long: (\d+) tokens > (\d+) maximum")
_ANTHROPIC_OUTPUT = re.compile(r"input length and `?max_tokens`? exceed context limit: (\d+) \+ (\d+) > (\d+)")
_LLAMACPP_SIZES = re.compile(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)")
_GEMINI_COUNT = re.compile(r"input token count \((\d+)\) exceeds the maximum number of tokens allowed \((\d+)\)")
_OVERFLOW_HINTS = (
    "context_length_exceeded",
    "exceed_context_size_error",
    "maximum context length",
    "context length exceeded",
    "exceeds the available context size",
    "prompt is too long",
    "context window",
    "too many tokens",
    "reduce the length of the messages",
)
_IMAGE_HINTS = ("image exceeds", "image dimensions exceed", "image too large", "image is too large")
_QUOTA_HINTS = ("insufficient_quota", "exceeded your current quota", "billing", "credit balance", "insufficient credits")
_MODEL_HINTS = ("model_not_found", "does not exist", "unknown model", "no such model", "model not found")
_LONG_CONTEXT_HINT = "extra usage is required for long context"
_TRY_AGAIN = re.compile(r"try again in (\d+(?:\.\d+)?)\s*(ms|s)\b")


@dataclass(frozen=True, slots=True)
class ErrorBody:
    """What an error body said, whatever its dialect."""

    message: str
    type: str = ""
    code: str = ""
    details: Mapping[str, Any] | None = None

    @property
    def haystack(self) -> str:
        """Lower-cased message, type and code together, for phrase matching."""
        return f"{self.message} {self.type} {self.code}".lower()


def parse_error_body(text: str) -> ErrorBody:
    """Read an error body in any known dialect; non-JSON bodies (HTML from proxies) become the message."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return ErrorBody(message=_squash(text))
    if not isinstance(data, Mapping):
        return ErrorBody(message=_squash(text))
    error = data.get("error", data)
    if isinstance(error, str):
        return ErrorBody(message=error, type=str(data.get("type") or ""))
    if not isinstance(error, Mapping):
        return ErrorBody(message=_squash(text))
    message = error.get("message") or data.get("message") or data.get("detail") or ""
    if not isinstance(message, str):
        message = json.dumps(message, ensure_ascii=False)
    code = error.get("code")
    return ErrorBody(
        message=message,
        type=str(error.get("type") or ""),
        code="" if code is None else str(code),
        details=error,
    )


def _squash(text: str) -> str:
    text = text or ""
    # A tag ends at a ">", so none starts after the last one: each "<" there read on to the end of the text, 1.2 s
    # for 32,000 of them.
    end = text.rfind(">") + 1
    return " ".join((re.sub(r"<[^>]+>", " ", text[:end]) + text[end:]).split())


def status_for_error_type(error_type: str, default: int = 500) -> int:
    """The HTTP status a provider error type is normally sent with (for errors inside an SSE stream)."""
    return _TYPE_STATUS.get(error_type, default)


def parse_retry_after(headers: Mapping[str, str], message: str = "", *, now: float | None = None) -> float | None:
    """Seconds to wait per ``retry-after-ms``, ``retry-after`` (seconds or HTTP date) or "try again in Ns"."""
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is not None:
        try:
            return max(0.0, float(raw))
        except ValueError:
            pass
        try:
            parsed = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            parsed = None
        if parsed is not None:
            return max(0.0, parsed.timestamp() - (time.time() if now is None else now))
    match = _TRY_AGAIN.search(message.lower())
    if match:
        value = float(match.group(1))
        return value / 1000.0 if match.group(2) == "ms" else value
    return None


def _overflow(body: ErrorBody, status: int, provider: str | None, text: str) -> ContextOverflow | None:
    lowered = body.message.lower()
    if m := _ANTHROPIC_OUTPUT.search(lowered):
        prompt, _, limit = (int(g) for g in m.groups())
        return ContextOverflow(text, limit=limit, prompt_tokens=prompt, output_tokens_variant=True,
                               available_output_tokens=max(0, limit - prompt), status=status, provider=provider)
    if m := _ANTHROPIC_TOO_LONG.search(lowered):
        return ContextOverflow(text, limit=int(m.group(2)), prompt_tokens=int(m.group(1)),
                               status=status, provider=provider)
    details = body.details or {}
    if isinstance(details.get("n_ctx"), int):
        prompt = details.get("n_prompt_tokens")
        return ContextOverflow(text, limit=details["n_ctx"], prompt_tokens=prompt if isinstance(prompt, int) else None,
                               status=status, provider=provider)
    if m := _LLAMACPP_SIZES.search(lowered) or _GEMINI_COUNT.search(lowered):
        return ContextOverflow(text, limit=int(m.group(2)), prompt_tokens=int(m.group(1)),
                               status=status, provider=provider)
    if m := _MAX_CONTEXT.search(lowered):
        return _openai_overflow(lowered, int(m.group(1)), text, status, provider)
    if any(hint in body.haystack for hint in _OVERFLOW_HINTS):
        return ContextOverflow(text, status=status, provider=provider)
    return None


def _openai_overflow(lowered: str, limit: int, text: str, status: int, provider: str | None) -> ContextOverflow:
    """OpenAI-style wording: the output variant applies when the messages alone fit in the window."""
    prompt: int | None = None
    if m := _REQUESTED_SPLIT.search(lowered):
        prompt = int(m.group(2))
    elif m := _REQUESTED_ABOUT.search(lowered):
        prompt = int(m.group(1)) - int(m.group(2))
    elif m := _REQUEST_HAS_INPUT.search(lowered) or _MESSAGES_RESULTED.search(lowered):
        prompt = int(m.group(1))
    if prompt is not None and prompt < limit:
        return ContextOverflow(text, limit=limit, prompt_tokens=prompt, output_tokens_variant=True,
                               available_output_tokens=limit - prompt, status=status, provider=provider)
    return ContextOverflow(text, limit=limit, prompt_tokens=prompt, status=status, provider=provider)


def classify_http_error(
    status: int,
    body_text: str,
    headers: Mapping[str, str] | None = None,
    *,
    provider: str | None = None,
    secrets: tuple[str, ...] = (),
) -> LLMError:
    """Map an HTTP error reply to the most specific LLMError; ``secrets`` are redacted from the message."""
    body = parse_error_body(body_text)
    haystack = body.haystack
    text = scrub_secrets(f"HTTP {status}: {body.message or body.type or 'no error message'}", secrets)
    text = text[:_MAX_MESSAGE_CHARS]
    if (overflow := _overflow(body, status, provider, text)) is not None:
        return overflow
    if status == 413:
        return PayloadTooLarge(text, status=status, provider=provider)
    if any(hint in haystack for hint in _IMAGE_HINTS):
        return ImageTooLarge(text, status=status, provider=provider)
    if _LONG_CONTEXT_HINT in haystack:
        return LongContextTier(text, status=status, provider=provider)
    if status in (401, 402, 403) or any(hint in haystack for hint in _QUOTA_HINTS):
        return AuthError(text, status=status, provider=provider)
    if status == 404 or any(hint in haystack for hint in _MODEL_HINTS):
        return ModelNotFound(text, status=status, provider=provider)
    if status == 429 or status == 529 or "overloaded" in haystack:
        return RateLimited(text, retry_after=parse_retry_after(headers or {}, body.message), status=status,
                           provider=provider)
    if status == 408:
        return LLMTimeout(text, status=status, provider=provider)
    if status >= 500:
        return ServerError(text, status=status, provider=provider)
    if 400 <= status < 500:
        return InvalidRequest(text, status=status, provider=provider)
    return BadResponse(text, status=status, provider=provider)


def classify_transport_error(
    exc: BaseException, *, provider: str | None = None, secrets: tuple[str, ...] = ()
) -> LLMError:
    """Map an httpx exception raised while sending or reading a request to the error tree."""
    detail = scrub_secrets(f"{type(exc).__name__}: {exc}", secrets)[:_MAX_MESSAGE_CHARS]
    if isinstance(exc, httpx.TimeoutException):
        return LLMTimeout(f"request timed out ({detail})", provider=provider)
    if isinstance(exc, httpx.TransportError):
        return NetworkError(f"connection failed or closed early ({detail})", provider=provider)
    return BadResponse(f"unusable reply ({detail})", provider=provider)
