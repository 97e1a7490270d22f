"""Every failure kind, produced by the fake over real sockets, lands on the right class with its details."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest

from agent.llm import (
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
    OpenAICompatProvider,
    PayloadTooLarge,
    RateLimited,
    ServerError,
)
from tests.fakes.llm_server import FakeLLMServer
from tests.llm.conftest import MakeProvider

USER = [{"role": "user", "content": "hello"}]

# (kind, params, expected class, attributes to check) — identical kinds for both APIs.
COMMON: list[tuple[str, dict[str, Any], type[LLMError], dict[str, Any]]] = [
    ("payload_too_large", {}, PayloadTooLarge, {"status": 413}),
    ("long_context_tier", {}, LongContextTier, {"status": 429}),
    ("image_too_large", {}, ImageTooLarge, {"status": 400}),
    ("rate_limit", {"retry_after": 3}, RateLimited, {"retry_after": 3.0, "retryable": True}),
    ("rate_limit", {"retry_after_ms": 1500}, RateLimited, {"retry_after": 1.5}),
    ("auth", {}, AuthError, {"status": 401, "retryable": False}),
    ("forbidden", {}, AuthError, {"status": 403}),
    ("quota", {}, AuthError, {}),
    ("model_not_found", {}, ModelNotFound, {"status": 404}),
    ("server_error", {}, ServerError, {"status": 500, "retryable": True}),
    ("bad_gateway", {}, ServerError, {"status": 502}),
    ("invalid_request", {}, InvalidRequest, {"status": 400}),
    ("invalid_json", {}, BadResponse, {}),
    ("empty", {}, BadResponse, {}),
]

OPENAI_ONLY: list[tuple[str, dict[str, Any], type[LLMError], dict[str, Any]]] = [
    ("context_overflow", {"limit": 8192, "prompt": 9000}, ContextOverflow,
     {"limit": 8192, "prompt_tokens": 9000, "output_tokens_variant": False}),
    ("context_output", {"limit": 8192, "prompt": 6000, "completion": 4096}, ContextOverflow,
     {"limit": 8192, "prompt_tokens": 6000, "output_tokens_variant": True, "available_output_tokens": 2192}),
    ("llamacpp_context", {"limit": 4096, "prompt": 5000}, ContextOverflow,
     {"limit": 4096, "prompt_tokens": 5000, "output_tokens_variant": False}),
    ("rate_limit", {}, RateLimited, {"retry_after": 1.4}),
    ("overloaded", {}, RateLimited, {"status": 503}),
]

ANTHROPIC_ONLY: list[tuple[str, dict[str, Any], type[LLMError], dict[str, Any]]] = [
    ("context_overflow", {"limit": 200_000, "prompt": 210_000}, ContextOverflow,
     {"limit": 200_000, "prompt_tokens": 210_000, "output_tokens_variant": False}),
    ("context_output", {"limit": 200_000, "prompt": 190_000, "completion": 20_000}, ContextOverflow,
     {"limit": 200_000, "prompt_tokens": 190_000, "output_tokens_variant": True, "available_output_tokens": 10_000}),
    ("rate_limit", {}, RateLimited, {"retry_after": None}),
    ("overloaded", {"retry_after": 2}, RateLimited, {"status": 529, "retry_after": 2.0}),
]

CASES = [("openai", *c) for c in COMMON + OPENAI_ONLY] + [("anthropic", *c) for c in COMMON + ANTHROPIC_ONLY]


@pytest.mark.parametrize(("api", "kind", "params", "expected", "attrs"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
async def test_failure_kind_is_classified(fake_llm: FakeLLMServer, make_provider: MakeProvider, api: str,
                                          kind: str, params: dict[str, Any], expected: type[LLMError],
                                          attrs: dict[str, Any]) -> None:
    fake_llm.fail(kind, **params)
    with pytest.raises(LLMError) as caught:
        await make_provider(api).complete(USER)
    assert type(caught.value) is expected, caught.value
    assert caught.value.provider == ("openai" if api == "openai" else "anthropic")
    for name, value in attrs.items():
        assert getattr(caught.value, name) == value, name
    assert len(fake_llm.requests) == 1


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
async def test_connection_dropped_is_network_error(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                   api: str, stream: bool) -> None:
    fake_llm.drop_mid_stream(after_chunks=2)
    with pytest.raises(NetworkError, match="closed early"):
        await make_provider(api).complete(USER, stream=stream)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_stream_without_end_marker_is_network_error(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                          api: str) -> None:
    fake_llm.fail("no_end")
    with pytest.raises(NetworkError, match="stream ended before"):
        await make_provider(api).complete(USER, stream=True)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_error_event_inside_stream_is_classified(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                       api: str) -> None:
    fake_llm.fail("stream_error")
    with pytest.raises(RateLimited, match=r"(?i)overloaded") as caught:
        await make_provider(api).complete(USER, stream=True)
    assert caught.value.status in (503, 529)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True])
async def test_empty_or_invalid_reply_is_bad_response(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                      api: str, stream: bool) -> None:
    fake_llm.fail("empty")
    with pytest.raises(BadResponse, match="empty content"):
        await make_provider(api).complete(USER, stream=stream)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_slow_reply_past_timeout_is_llm_timeout(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                      api: str) -> None:
    fake_llm.delay(5)
    with pytest.raises(LLMTimeout, match="timed out"):
        await make_provider(api, timeout=0.3).complete(USER)


async def test_connection_refused_is_network_error(http_client: httpx.AsyncClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = OpenAICompatProvider(f"http://127.0.0.1:{port}/v1", None, "m", client=http_client, max_retries=0)
    with pytest.raises(NetworkError, match="ConnectError"):
        await provider.complete(USER)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_unknown_model_from_fake_is_model_not_found(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                          api: str) -> None:
    fake_llm.fail("model_not_found", model="no-such-model")
    with pytest.raises(ModelNotFound, match="no-such-model"):
        await make_provider(api, model="no-such-model").complete(USER)


async def test_missing_key_for_a_keyed_provider_fails_without_a_request(fake_llm: FakeLLMServer,
                                                                        make_provider: MakeProvider) -> None:
    with pytest.raises(AuthError, match="no API key"):
        await make_provider("anthropic", api_key=None).complete(USER)
    assert fake_llm.requests == []
