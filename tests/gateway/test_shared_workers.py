"""Two gateway workers in one test process sharing the store and a real Redis: a message delivered to both is
answered once, and a scheduled job runs once per schedule across them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

from gateway.claims import RedisClaims
from gateway.locks import fail_fast_client
from gateway.scheduler import GatewayScheduler
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import GatewayFactory


async def test_a_message_delivered_to_two_workers_is_answered_once(gateway_factory: GatewayFactory,
                                                                  fake_llm: FakeLLMServer, redis_url: str) -> None:
    fake_llm.responder = lambda body: Reply("the one answer", delay=0.2)
    first, a = await gateway_factory(redis={"url": redis_url})
    second, b = await gateway_factory(redis={"url": redis_url})
    chat = f"chat-{uuid.uuid4().hex}"
    message = a.inbound("hello", chat_id=chat)
    # The same update reaches both workers at once (a load balancer retrying), then once more later.
    await asyncio.gather(first.router.handle(message, a), second.router.handle(message, b))
    await second.router.handle(message, b)
    assert a.texts(chat) + b.texts(chat) == ["the one answer"]
    assert len(fake_llm.requests) == 1
    duplicates = sum(g.rt.metrics.instruments.duplicates.labels("discord")._value.get() for g in (first, second))
    assert duplicates == 2
    record = await first.rt.store.sessions.get_active("discord", f"dm:{chat}")
    assert record is not None
    stored = await first.rt.store.messages.load_active(record.id)
    assert [m["role"] for m in stored.messages] == ["user", "assistant"]


class Recording(RedisClaims):
    """Real Redis claims that note which slot keys this worker won."""

    def __init__(self, redis_url: str, prefix: str, won: list[str]) -> None:
        super().__init__(fail_fast_client(redis_url), prefix=prefix)
        self.won = won

    async def claim(self, key: str, ttl_s: float) -> bool:
        first = await super().claim(key, ttl_s)
        if first:
            self.won.append(key)
        return first


async def test_a_job_runs_once_per_schedule_across_workers(redis_url: str) -> None:
    runs: list[str] = []
    won: list[str] = []
    prefix = f"concord-test:{uuid.uuid4().hex}:"

    def job(worker: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            runs.append(worker)

        return run

    async def nothing() -> None:
        return None

    claims = [Recording(redis_url, prefix, won) for _ in range(3)]
    schedulers = [GatewayScheduler(expire_idle=job(name), sweep=nothing, idle_expiry_minutes=1, sweep_cron=None,
                                   idle_check_seconds=0.25, claims=c) for name, c in zip("abc", claims, strict=True)]
    for scheduler in schedulers:
        scheduler.start()
    started = time.monotonic()
    await asyncio.sleep(2.1)
    for scheduler in schedulers:
        await scheduler.aclose()
    elapsed = time.monotonic() - started
    for c in claims:
        await c.aclose()
    # Three workers ticked about 8 times each; the job ran once per slot.
    assert len(won) == len(set(won)) == len(runs)
    assert 5 <= len(runs) <= elapsed / 0.25 + 1
