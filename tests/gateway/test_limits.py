"""Rate limits and daily budgets: both backends, the limiter's notices, and the router (no LLM call over a limit,
admins exempt, /usage and /stats, the per-session queue cap, two gateways sharing one Redis)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from adapters.base import Inbound
from gateway.app import Gateway
from gateway.app.runtime_parts import build_runtime
from gateway.config import LimitsSettings
from gateway.intake.waiting import QUEUE_FULL
from gateway.policy.limit_backends import Bucket, InProcessLimits, LimitBackend, RedisLimits
from gateway.policy.limits import RateLimiter, format_duration
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.llm_wire import Reply
from tests.gateway.conftest import GatewayFactory, ScriptedAdapter, make_settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["inprocess", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[LimitBackend]:
    if request.param == "inprocess":
        yield InProcessLimits()
        return
    limits = RedisLimits.from_url(request.getfixturevalue("redis_url"), prefix=f"concord-test:{uuid.uuid4().hex}:")
    try:
        yield limits
    finally:
        await limits.aclose()


def test_durations_read_like_a_person_says_them() -> None:
    assert [format_duration(s) for s in (0.2, 45, 61, 3599, 3600, 5 * 3600 + 12 * 60)] == [
        "1 s", "45 s", "2 min", "1 h", "1 h", "5 h 12 min"]


async def test_bucket_refills_at_its_rate() -> None:
    clock = Clock()
    limits = InProcessLimits(clock)
    bucket = [Bucket("user:a", 3)]
    assert [await limits.take(bucket) for _ in range(3)] == [None] * 3
    refused = await limits.take(bucket)
    assert refused is not None and refused[0] == 0 and refused[1] == pytest.approx(20.0)
    clock.now += 20
    assert await limits.take(bucket) is None
    assert await limits.take(bucket) is not None


async def test_take_is_all_or_nothing(backend: LimitBackend) -> None:
    user, chat = Bucket("user:a", 5), Bucket("chat:c", 2)
    assert await backend.take([user, chat]) is None
    assert await backend.take([user, chat]) is None
    refused = await backend.take([user, chat])
    assert refused is not None and refused[0] == 1 and 0 < refused[1] <= 30
    # The refused message took nothing from the user's bucket: three more fit in another chat.
    other = Bucket("chat:d", 10)
    assert [await backend.take([user, other]) for _ in range(3)] == [None] * 3
    assert (await backend.take([user, other]) or (None,))[0] == 0


async def test_token_counters_and_ranking(backend: LimitBackend) -> None:
    await backend.add(["user:a", "chat:c"], "2026-01-01", 100)
    await backend.add(["user:b", "chat:c"], "2026-01-01", 300)
    await backend.add(["user:a"], "2026-01-02", 7)
    assert await backend.spent(["user:a", "user:b", "chat:c", "user:z"], "2026-01-01") == [100, 300, 400, 0]
    assert await backend.top("2026-01-01", 5) == [("user:b", 300), ("user:a", 100)]
    assert await backend.top("2026-01-02", 1) == [("user:a", 7)]
    # A summary call's tokens count in the total, and apart (with its answer's share).
    await backend.add(["user:a", "chat:c"], "2026-01-01", 50, summary=True, output=8)
    assert await backend.spent(["user:a", "chat:c"], "2026-01-01") == [150, 450]
    assert await backend.summary_spent(["user:a", "chat:c", "user:b"], "2026-01-01") == [(50, 8), (50, 8), (0, 0)]
    assert await backend.top("2026-01-01", 5) == [("user:b", 300), ("user:a", 150)]


async def test_a_dead_redis_fails_open(caplog: pytest.LogCaptureFixture) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    limits = RedisLimits.from_url(f"redis://127.0.0.1:{port}/0")  # nothing listens there
    try:
        for _ in range(20):  # an outage meets every message
            assert await limits.take([Bucket("user:a", 1)]) is None
            assert await limits.spent(["user:a"], "2026-01-01") == [0]
            await limits.add(["user:a"], "2026-01-01", 5)
            assert await limits.top("2026-01-01", 3) == []
    finally:
        await limits.aclose()
    assert "rate limits unavailable" in caplog.text and "go unbudgeted" in caplog.text
    assert len(caplog.records) == 4  # one line per kind of failure, not one per message


def _inbound(user: str = "u1", chat: str = "c1") -> Inbound:
    return Inbound(platform="discord", chat_id=chat, chat_type="group", thread_id=None, user_id=user,
                   user_name="x", message_id="1", text="hi", mentions_bot=True)


async def test_limiter_notices_name_the_limit_and_the_reset() -> None:
    now = datetime(2026, 1, 1, 21, 0, tzinfo=UTC)
    limiter = RateLimiter(LimitsSettings(user_tokens_per_day=1000, chat_messages_per_minute=1), InProcessLimits(),
                          lambda: now)
    assert await limiter.admit(_inbound()) is None
    assert await limiter.admit(_inbound(user="u2")) == (
        "⏳ This chat can send the bot 1 message a minute; try again in 1 min.")
    await limiter.record(_inbound(), 1200)
    assert await limiter.admit(_inbound(chat="c2")) == (
        "⏳ You have used today's token budget (1,000 tokens). It resets at 00:00 UTC, in 3 h.")
    usage = await limiter.usage(_inbound(), exempt=False)
    assert (usage.user_tokens, usage.chat_tokens, usage.resets_in_s) == (1200, 1200, 3 * 3600)
    # A new UTC day starts from zero.
    now += timedelta(hours=3)
    assert await limiter.admit(_inbound(chat="c3")) is None


async def test_router_enforces_limits_without_calling_the_model(gateway_factory: GatewayFactory,
                                                                fake_llm: FakeLLMServer) -> None:
    fake_llm.responder = lambda body: "answer"
    _, adapter = await gateway_factory(limits={"user_messages_per_minute": 2, "user_tokens_per_day": 10_000_000})
    for _ in range(3):
        await adapter.say("question", chat_id="d1", user_id="u1")
    assert adapter.texts() == ["answer", "answer", "⏳ You can send 2 messages a minute; try again in 30 s."]
    assert len(fake_llm.requests) == 2
    # Commands still work when limited; admins are exempt.
    await adapter.say("/usage", chat_id="d1", user_id="u1")
    assert "Messages: you 2 a minute, this chat no limit." in adapter.texts()[-1]
    for _ in range(3):
        await adapter.say("question", chat_id="dboss", user_id="boss")
    assert adapter.texts()[-3:] == ["answer"] * 3


async def test_daily_budget_counts_reported_tokens_and_stats_ranks_spenders(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    fake_llm.responder = lambda body: Reply("answer", usage={"prompt_tokens": 400, "completion_tokens": 200})
    _, adapter = await gateway_factory(limits={"user_tokens_per_day": 1000})
    await adapter.say("one", chat_id="d1", user_id="u1")
    await adapter.say("two", chat_id="d1", user_id="u1")
    await adapter.say("three", chat_id="d1", user_id="u1")
    assert adapter.texts()[:2] == ["answer", "answer"]
    assert adapter.texts()[2].startswith("⏳ You have used today's token budget (1,000 tokens). It resets at 00:00 UTC")
    assert len(fake_llm.requests) == 2
    await adapter.say("/usage", chat_id="d1", user_id="u1")
    assert adapter.texts()[-1].startswith("Today (UTC): you 1,200 tokens of 1,000; this chat 1,200 tokens")
    await adapter.say("/stats", chat_id="dboss", user_id="boss")
    assert adapter.texts()[-1].endswith("Top spenders today: discord:u1 1,200")


async def test_session_queue_depth_is_capped_with_a_notice(gateway_factory: GatewayFactory,
                                                           fake_llm: FakeLLMServer) -> None:
    fake_llm.responder = lambda body: Reply("done", delay=0.5)
    _, adapter = await gateway_factory(limits={"session_queue_depth": 2})
    assert adapter._handler is not None
    handler = adapter._handler
    first = [asyncio.create_task(handler(adapter.inbound(f"q{i}", chat_id="d1"))) for i in range(2)]
    await asyncio.sleep(0.2)
    await handler(adapter.inbound("q2", chat_id="d1"))
    assert adapter.texts() == [QUEUE_FULL.format(waiting=2)]
    await asyncio.gather(*first)
    assert adapter.texts()[1:] == ["done", "done"]


async def test_two_workers_share_limits_through_redis(fake_llm: FakeLLMServer, redis_url: str,
                                                      tmp_path: object) -> None:
    """Two gateways (separate runtimes, connections and SQLite files) on one Redis: 20 concurrent senders' worth
    of messages from one user, 5 a minute allowed in all."""
    fake_llm.responder = lambda body: "answer"
    prefix = f"concord-test:{uuid.uuid4().hex}:"
    gateways, adapters = [], []
    for n in range(2):
        settings = make_settings(fake_llm, tmp_path / f"w{n}",  # type: ignore[operator]
                                 limits={"user_messages_per_minute": 5},
                                 redis={"url": redis_url, "key_prefix": prefix})
        rt = await build_runtime(settings, limits=RedisLimits.from_url(redis_url, prefix=prefix))
        adapter = ScriptedAdapter()
        gateway = Gateway(rt, [adapter])
        await gateway.start()
        gateways.append(gateway)
        adapters.append(adapter)
    try:
        sends = [adapters[i % 2].say(f"q{i}", chat_id=f"d{i}", user_id="spender") for i in range(20)]
        await asyncio.gather(*sends)
        texts = adapters[0].texts() + adapters[1].texts()
        assert texts.count("answer") == 5
        assert sum(t.startswith("⏳ You can send 5 messages a minute") for t in texts) == 15
        assert len(fake_llm.requests) == 5
    finally:
        for gateway in gateways:
            await gateway.aclose(grace_seconds=5)
