"""Classification of wordings the fake does not produce: other servers, routers and header forms."""

from __future__ import annotations

import email.utils
import json

import httpx
import pytest

from agent.llm.classify import (
    classify_http_error,
    classify_transport_error,
    parse_error_body,
    parse_retry_after,
    status_for_error_type,
)
from agent.llm.errors import (
    AuthError,
    BadResponse,
    ContextOverflow,
    LLMTimeout,
    NetworkError,
    RateLimited,
    ServerError,
)


def _openai(message: str, code: str | None = None) -> str:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": code}})


def test_vllm_output_wording_is_output_variant() -> None:
    body = _openai("'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context "
                   "length is 4096 tokens and your request has 3500 input tokens (1000 > 4096 - 3500).")
    error = classify_http_error(400, body)
    assert isinstance(error, ContextOverflow)
    assert (error.limit, error.prompt_tokens, error.output_tokens_variant, error.available_output_tokens) == (
        4096, 3500, True, 596)


def test_openai_requested_split_where_messages_alone_overflow_is_plain_overflow() -> None:
    body = _openai("This model's maximum context length is 8192 tokens. However, you requested 12000 tokens "
                   "(9000 in the messages, 3000 in the completion).", "context_length_exceeded")
    error = classify_http_error(400, body)
    assert isinstance(error, ContextOverflow)
    assert (error.limit, error.prompt_tokens, error.output_tokens_variant) == (8192, 9000, False)


def test_openrouter_about_wording_subtracts_output() -> None:
    body = _openai("This endpoint's maximum context length is 200000 tokens. However, you requested about "
                   "205000 tokens (150000 of text input, 5000 of tool input, 50000 in the output).")
    error = classify_http_error(400, body)
    assert isinstance(error, ContextOverflow)
    assert (error.prompt_tokens, error.output_tokens_variant, error.available_output_tokens) == (
        155000, True, 45000)


def test_llamacpp_older_wording_gives_sizes() -> None:
    body = json.dumps({"error": {"code": 400, "type": "invalid_request_error",
                                 "message": "request (5000 tokens) exceeds the available context size (4096 tokens), "
                                            "try increasing it"}})
    error = classify_http_error(400, body)
    assert isinstance(error, ContextOverflow)
    assert (error.limit, error.prompt_tokens) == (4096, 5000)


def test_overflow_without_numbers_still_overflow() -> None:
    error = classify_http_error(400, _openai("context window exceeded", "context_length_exceeded"))
    assert isinstance(error, ContextOverflow)
    assert error.limit is None


def test_ollama_plain_string_error_and_html_bodies() -> None:
    assert parse_error_body(json.dumps({"error": "model 'x' not found"})).message == "model 'x' not found"
    body = parse_error_body("<html><body><h1>502 Bad Gateway</h1></body></html>")
    assert body.message == "502 Bad Gateway"
    assert isinstance(classify_http_error(502, "<html><h1>502 Bad Gateway</h1></html>"), ServerError)


def test_402_and_billing_are_auth_errors() -> None:
    assert isinstance(classify_http_error(402, _openai("Insufficient credits")), AuthError)


def test_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "12"}) == 12.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = email.utils.formatdate(1_000_030.0, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=1_000_000.0) == pytest.approx(30.0)
    assert parse_retry_after({}, "Please try again in 350ms.") == pytest.approx(0.35)
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_rate_limit_carries_header_retry_after() -> None:
    error = classify_http_error(429, _openai("slow down"), {"retry-after": "4"})
    assert isinstance(error, RateLimited)
    assert error.retry_after == 4.0


def test_error_types_map_to_statuses() -> None:
    assert status_for_error_type("overloaded_error") == 529
    assert status_for_error_type("authentication_error") == 401
    assert status_for_error_type("something_new") == 500


def test_transport_errors() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    assert isinstance(classify_transport_error(httpx.ReadTimeout("slow", request=request)), LLMTimeout)
    assert isinstance(classify_transport_error(httpx.ConnectTimeout("slow", request=request)), LLMTimeout)
    assert isinstance(classify_transport_error(httpx.ConnectError("refused", request=request)), NetworkError)
    assert isinstance(classify_transport_error(httpx.RemoteProtocolError("closed", request=request)), NetworkError)
    assert isinstance(classify_transport_error(httpx.DecodingError("gzip", request=request)), BadResponse)


def test_messages_are_scrubbed_and_bounded() -> None:
    key = "my-literal-secret-value"
    error = classify_http_error(401, _openai(f"bad key {key} " + "x" * 2000), secrets=(key,))
    assert key not in str(error)
    assert len(error.message) <= 500
