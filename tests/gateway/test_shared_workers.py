"""Two gateway workers in one test process sharing the store and a real Redis: a message delivered to both is
answered once, and a scheduled job runs once per schedule across them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from gateway.conversation.scheduler import GatewayScheduler
from gateway.intake.arrivals import RedisArrivalOrder
from gateway.intake.claims import RedisClaims
from gateway.intake.locks import fail_fast_client
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import GatewayFactory


async def test_a_message_delivered_to_two_workers_is_answered_once(gateway_factory: GatewayFactory,
                                                                  fake_llm: FakeLLMServer, redis_url: str) -> None:
    fake_llm.responder = lambda body: Reply("the one answer", delay=0.2)
    shared = {"url": redis_url, "key_prefix": f"concord-test:{uuid.uuid4().hex}:"}
    first, a = await gateway_factory(redis=shared)
    second, b = await gateway_factory(redis=shared)
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


async def test_a_sessions_messages_keep_their_arrival_order_across_workers(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, redis_url: str) -> None:
    order: list[str] = []

    def respond(body: dict[str, Any]) -> Reply:
        order.append(str(body["messages"][-1]["content"]))
        return Reply(f"re: {order[-1]}", delay=0.1)

    fake_llm.responder = respond
    shared = {"url": redis_url, "key_prefix": f"concord-test:{uuid.uuid4().hex}:"}
    first, a = await gateway_factory(redis=shared)
    second, b = await gateway_factory(redis=shared)
    chat = f"chat-{uuid.uuid4().hex}"
    tasks = []
    counter = fail_fast_client(redis_url)
    for i in range(8):  # a load balancer alternating between the workers
        gateway, adapter = (first, a) if i % 2 == 0 else (second, b)
        message = replace(adapter.inbound(f"m{i}", chat_id=chat), message_id=f"id{i}")  # ids unique in the chat
        tasks.append(asyncio.create_task(gateway.router.handle(message, adapter)))
        # The next message arrives once this one has reached its worker (drawn its ticket).
        while int(await counter.hget(f"{shared['key_prefix']}order:tickets:discord:dm:{chat}", "next") or 0) < i + 1:  # noqa: ASYNC110
            await asyncio.sleep(0.002)
    await counter.aclose()
    await asyncio.gather(*tasks)
    assert order == [f"m{i}" for i in range(8)]
    record = await first.rt.store.sessions.get_active("discord", f"dm:{chat}")
    assert record is not None
    stored = await first.rt.store.messages.load_active(record.id)
    assert [m["content"] for m in stored.messages if m["role"] == "user"] == [f"m{i}" for i in range(8)]


async def test_messages_arriving_together_at_one_worker_draw_tickets_in_their_order(redis_url: str) -> None:
    # A message is queued in its worker's FIFO the moment its draw returns, so tickets must come back in the
    # order the messages asked for them; else the FIFO's head waits for a ticket queued behind it. Each round
    # starts on a fresh client: concurrent draws then go out over connections of their own.
    async def arrive(order: RedisArrivalOrder, key: str, returned: list[int | None]) -> int | None:
        turn = await order.arrive(key)
        returned.append(turn.ticket)
        return turn.ticket

    prefix = f"concord-test:{uuid.uuid4().hex}:"
    for round_ in range(20):
        client = fail_fast_client(redis_url)
        order = RedisArrivalOrder(client, stale_after_s=5, prefix=prefix)
        returned: list[int | None] = []
        try:
            tickets = await asyncio.gather(*(arrive(order, f"s{round_}", returned) for _ in range(8)))
        finally:
            await client.aclose()
        assert tickets == returned == list(range(1, 9)), f"round {round_}"
        assert order._drawing == {}  # nothing kept per session once its draws are done


class Clocked:
    """Arrival tickets in a real Redis (5 s staleness), on a clock the test sets."""

    def __init__(self, redis_url: str) -> None:
        self.now = 0.0
        self.client = fail_fast_client(redis_url)
        self.order = RedisArrivalOrder(self.client, stale_after_s=5, prefix=f"concord-test:{uuid.uuid4().hex}:",
                                       clock=lambda: self.now)


@pytest.fixture
async def clocked(redis_url: str) -> AsyncIterator[Clocked]:
    tickets = Clocked(redis_url)
    try:
        yield tickets
    finally:
        await tickets.client.aclose()


async def test_a_ticket_whose_worker_died_is_skipped_after_the_lock_lifetime(clocked: Clocked) -> None:
    order = clocked.order
    dead, alive = await order.arrive("s"), await order.arrive("s")
    assert (dead.ticket, alive.ticket) == (1, 2)
    assert await order.ready("s", dead)
    assert not await order.ready("s", alive)  # ticket 1's worker is still expected
    clocked.now = 4.9
    assert not await order.ready("s", alive)
    clocked.now = 5.1
    assert await order.ready("s", alive)  # given up on ticket 1
    await order.served("s", alive)
    await order.served("s", dead)  # a late handler of the skipped ticket does not move the counter back
    assert await order.ready("s", await order.arrive("s"))


async def test_a_taken_over_message_rejoins_at_the_stuck_ticket(clocked: Clocked) -> None:
    order = clocked.order
    assert (await order.rejoin("s")).ticket == 1  # nothing served yet: a fresh ticket, the first
    await order.served("s", await order.rejoin("s"))
    lost, later = await order.arrive("s"), await order.arrive("s")  # ticket 2's worker dies
    assert not await order.ready("s", later)
    clocked.now = 1.0
    taken = await order.rejoin("s")  # another worker takes the lost message over: no wait for the skip
    assert taken.ticket == lost.ticket and await order.ready("s", taken)
    await order.served("s", taken)
    assert await order.ready("s", later)  # and the later message follows it at once
