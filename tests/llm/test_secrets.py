"""API keys never reach logs, exception texts or reprs, even when a provider echoes them back."""

from __future__ import annotations

import logging

import pytest

from agent.llm import AuthError, LLMError, RetryPolicy
from tests.fakes.llm_server import FakeLLMServer
from tests.llm.conftest import MakeProvider

USER = [{"role": "user", "content": "hello"}]
# One key that looks like a key, one that matches no pattern and is only caught as a literal.
KEYS = ["sk-proj-LiveLookingKey0123456789", "concord-plain-secret-9f8e7d"]


async def _no_sleep(_: float) -> None:
    return None


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("key", KEYS)
async def test_echoed_key_is_redacted_everywhere(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                 caplog: pytest.LogCaptureFixture, api: str, key: str) -> None:
    caplog.set_level(logging.DEBUG)
    provider = make_provider(api, api_key=key, retry=RetryPolicy(max_retries=1, sleep=_no_sleep))
    fake_llm.fail("server_error")
    fake_llm.fail("auth", key=key)
    with pytest.raises(AuthError) as caught:
        await provider.complete(USER)
    sent = fake_llm.requests[-1].headers
    assert key in (sent.get("Authorization", "") + sent.get("x-api-key", ""))
    assert len(fake_llm.requests) == 2
    texts = [str(caught.value), caught.value.message, repr(caught.value), repr(provider), caplog.text]
    for text in texts:
        assert key not in text
    assert "[REDACTED]" in str(caught.value)
    assert "retry 1/1" in caplog.text


async def test_stream_errors_are_redacted_too(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    key = KEYS[1]
    fake_llm.raw(200, f'data: {{"error": {{"message": "key {key} revoked", "code": 401}}}}\n\n',
                 content_type="text/event-stream")
    with pytest.raises(LLMError) as caught:
        await make_provider("openai", api_key=key).complete(USER, stream=True)
    assert isinstance(caught.value, AuthError)
    assert key not in str(caught.value)
