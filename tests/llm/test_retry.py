"""Retries: bounded, exponential, Retry-After honoured but capped, never for auth or overflow."""

from __future__ import annotations

import pytest

from agent.llm import (
    AuthError,
    ContextOverflow,
    LLMTimeout,
    LongContextTier,
    RateLimited,
    RetryPolicy,
    ServerError,
)
from tests.fakes.llm_server import FakeLLMServer
from tests.llm.conftest import MakeProvider

USER = [{"role": "user", "content": "hello"}]


class Sleeps:
    """Records the waits instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def policy(sleeps: Sleeps, **kw: float) -> RetryPolicy:
    return RetryPolicy(sleep=sleeps, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_server_errors_retried_with_backoff_then_succeed(fake_llm: FakeLLMServer, make_provider: MakeProvider,
                                                               api: str) -> None:
    sleeps = Sleeps()
    fake_llm.fail("server_error", times=2)
    fake_llm.reply("finally")
    reply = await make_provider(api, retry=policy(sleeps, max_retries=2, base_delay=0.5)).complete(USER)
    assert reply.text == "finally"
    assert sleeps.waits == [0.5, 1.0]
    assert len(fake_llm.requests) == 3


async def test_retries_are_bounded(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    sleeps = Sleeps()
    fake_llm.fail("bad_gateway", times=5)
    with pytest.raises(ServerError):
        await make_provider("openai", retry=policy(sleeps, max_retries=3, base_delay=1, max_delay=3)).complete(USER)
    assert len(fake_llm.requests) == 4
    assert sleeps.waits == [1, 2, 3]


async def test_retry_after_is_honoured(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    sleeps = Sleeps()
    fake_llm.fail("rate_limit", retry_after=7)
    fake_llm.reply("ok")
    await make_provider("anthropic", retry=policy(sleeps)).complete(USER)
    assert sleeps.waits == [7.0]


async def test_long_retry_after_is_capped(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    sleeps = Sleeps()
    fake_llm.fail("overloaded", retry_after=3600)
    fake_llm.reply("ok")
    await make_provider("openai", retry=policy(sleeps, max_retry_after=30)).complete(USER)
    assert sleeps.waits == [30]


async def test_timeouts_are_retried(fake_llm: FakeLLMServer, make_provider: MakeProvider) -> None:
    sleeps = Sleeps()
    fake_llm.reply("late", delay=3)
    fake_llm.reply("on time")
    reply = await make_provider("openai", timeout=0.3, retry=policy(sleeps, max_retries=1)).complete(USER)
    assert reply.text == "on time"
    assert len(sleeps.waits) == 1


@pytest.mark.parametrize(("kind", "expected"), [("auth", AuthError), ("quota", AuthError),
                                                ("context_overflow", ContextOverflow),
                                                ("long_context_tier", LongContextTier)])
async def test_never_retried(fake_llm: FakeLLMServer, make_provider: MakeProvider, kind: str,
                             expected: type[Exception]) -> None:
    sleeps = Sleeps()
    fake_llm.fail(kind, times=3)
    with pytest.raises(expected):
        await make_provider("anthropic", retry=policy(sleeps, max_retries=3)).complete(USER)
    assert len(fake_llm.requests) == 1
    assert sleeps.waits == []


def test_delay_schedule_and_validation() -> None:
    p = RetryPolicy(base_delay=2, max_delay=10, max_retry_after=5)
    assert [p.delay_for(i, LLMTimeout("t")) for i in range(4)] == [2, 4, 8, 10]
    assert p.delay_for(0, RateLimited("r", retry_after=9)) == 5
    assert p.delay_for(1, RateLimited("r")) == 4
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)
