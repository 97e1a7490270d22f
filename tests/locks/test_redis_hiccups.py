"""A Redis hiccup costs a session seconds, not a minute.

A request that times out on the client may still be run by the server: a SIGSTOPped Redis runs what waits in
its sockets when it resumes. Such a draw must leave no arrival ticket the session waits for, a release that
timed out must not hold up the session's next message, and a polling lease whose holder lost touch with Redis
must not be waited out by that very holder. The staleness that skips a dead worker's ticket is a minute here,
as in production: none of these may wait for it. Faults hit a private redis-server only.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.intake.arrivals import RedisArrivalOrder, Turn
from gateway.intake.lease import RedisLease
from gateway.intake.locks import fail_fast_client
from tests.locks.conftest import PrivateRedis

STALE_S = 60.0  # production's: waiting for it is the regression
RECOVERED_WITHIN_S = 2.0


@pytest.fixture
async def order(private_redis: PrivateRedis) -> AsyncIterator[RedisArrivalOrder]:
    client = fail_fast_client(private_redis.url)  # gives up on a request after 1 s
    tickets = RedisArrivalOrder(client, stale_after_s=STALE_S, prefix=f"hiccup:{uuid.uuid4().hex}:",
                                redo_interval=0.05)
    try:
        yield tickets
    finally:
        await tickets.aclose()
        await client.aclose()


async def _until_ready(order: RedisArrivalOrder, turn: Turn, within: float = 10.0) -> float:
    started = time.monotonic()
    while not await order.ready("s", turn):
        assert time.monotonic() - started < within, f"ticket {turn.ticket} still waiting after {within} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def test_a_draw_redis_ran_after_the_client_gave_up_holds_nobody_up(private_redis: PrivateRedis,
                                                                         order: RedisArrivalOrder) -> None:
    first = await order.arrive("s")
    private_redis.pause()
    orphan = await order.arrive("s")  # times out: this message goes on without a ticket (fail-open) ...
    private_redis.resume()  # ... and Redis now runs its draw: a ticket no message holds
    assert orphan.ticket is None
    later = await order.arrive("s")
    assert (first.ticket, later.ticket) == (1, 3)  # the timed-out draw did take ticket 2
    assert await order.ready("s", first)
    await order.served("s", first)
    assert await _until_ready(order, later) < RECOVERED_WITHIN_S
    assert order.unconfirmed == 0


async def test_a_release_that_timed_out_holds_nobody_up(private_redis: PrivateRedis,
                                                        order: RedisArrivalOrder) -> None:
    first, later = await order.arrive("s"), await order.arrive("s")
    assert await order.ready("s", first)
    private_redis.pause()
    await order.served("s", first)  # times out on the client
    private_redis.resume()
    assert await _until_ready(order, later) < RECOVERED_WITHIN_S


async def test_a_release_that_never_reached_redis_is_made_once_it_is_back(persistent_redis: PrivateRedis) -> None:
    client = fail_fast_client(persistent_redis.url)
    order = RedisArrivalOrder(client, stale_after_s=STALE_S, prefix="lost:", redo_interval=0.05)
    try:
        first, later = await order.arrive("s"), await order.arrive("s")
        assert await order.ready("s", first)
        persistent_redis.kill()
        await order.served("s", first)  # refused: Redis never saw it
        assert order.unconfirmed == 1
        persistent_redis.start()  # its append-only file brings both tickets back, ticket 1 still held
        assert await _until_ready(order, later) < RECOVERED_WITHIN_S
        assert order.unconfirmed == 0
    finally:
        await order.aclose()
        await client.aclose()


async def test_a_draw_cancelled_before_redis_ran_it_takes_no_ticket(redis_url: str) -> None:
    # The other order of the same fault: the worker's cancel reaches Redis before the draw that timed out.
    client = fail_fast_client(redis_url)
    order = RedisArrivalOrder(client, stale_after_s=STALE_S, prefix=f"concord-test:{uuid.uuid4().hex}:")
    try:
        first = await order.arrive("s")
        token = uuid.uuid4().hex
        keys = [order._tickets("s"), order._cancel_mark(token)]
        assert await order._cancel_script(keys=keys, args=[token, 60]) == 0  # nothing drawn by it yet
        assert (await order._draw_script(keys=keys, args=[token, 60]))[0] == 0  # the late draw: no ticket
        await order.served("s", first)
        later = await order.arrive("s")
        assert later.ticket == 2 and await order.ready("s", later)
    finally:
        await client.aclose()


async def test_tickets_from_before_redis_lost_its_data_wait_for_nothing(private_redis: PrivateRedis,
                                                                        order: RedisArrivalOrder) -> None:
    first, before = await order.arrive("s"), await order.arrive("s")
    private_redis.kill()
    private_redis.start()  # no persistence: every ticket is gone, and a new epoch starts with the next draw
    after = await order.arrive("s")
    if after.ticket is None:  # the pooled connection died with the server: that one message goes without
        after = await order.arrive("s")
    assert after.ticket is not None and await order.ready("s", after)
    assert await order.ready("s", before)  # its ticket 2 belongs to the old epoch: nothing to wait for
    await order.served("s", before)
    await order.served("s", first)  # an old release does not move the new epoch's counter
    assert not await order.ready("s", await order.arrive("s"))  # the new epoch's next ticket waits for `after`


class _Polling:
    """A lease holder that notes when it starts and stops polling."""

    def __init__(self, url: str, name: str, ttl: float) -> None:
        self.client = fail_fast_client(url)
        self.lease = RedisLease(self.client, name, ttl_s=ttl, holder="worker-1")
        self.events: list[tuple[str, float]] = []
        self.task: asyncio.Task[None] | None = None
        self._first = asyncio.Event()
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        async def gain() -> None:
            self.events.append(("gain", time.monotonic()))
            self._first.set()

        async def loss() -> None:
            self.events.append(("loss", time.monotonic()))

        self.task = asyncio.create_task(self.lease.hold(gain, loss, self._stopping))
        await self._first.wait()

    def off_after(self, back: float) -> float:
        """How long polling stayed off after ``back`` (0 when it never stopped or was on again by then)."""
        if not self.events or self.events[-1][0] == "loss":
            return float("inf")
        losses = [t for kind, t in self.events if kind == "loss"]
        return max(0.0, self.events[-1][1] - back) if losses else 0.0

    async def aclose(self) -> None:
        assert self.task is not None
        self._stopping.set()
        await self.task
        await self.client.aclose()


@pytest.mark.parametrize("hang_s", [3.0, 7.0])
async def test_the_polling_lease_is_not_waited_out_by_its_own_holder(private_redis: PrivateRedis,
                                                                     hang_s: float) -> None:
    # ttl 6 s: extended every 2 s. A 3 s hang times a renewal out while the key lives on in Redis (the holder
    # used to stop polling and wait out its own key); a 7 s one outlives the key.
    polling = _Polling(private_redis.url, f"lease-{uuid.uuid4().hex}", ttl=6.0)
    try:
        await polling.start()
        private_redis.pause()
        await asyncio.sleep(hang_s)
        private_redis.resume()
        back = time.monotonic()
        await asyncio.sleep(3.0)
        assert polling.off_after(back) <= 1.5, polling.events
        if hang_s < 4.0:  # the key it last extended still existed throughout: polling never stopped
            assert [kind for kind, _ in polling.events] == ["gain"]
    finally:
        await polling.aclose()


async def test_a_redis_that_lost_its_data_does_not_hand_the_lease_to_a_second_poller(
        private_redis: PrivateRedis) -> None:
    name = f"lease-{uuid.uuid4().hex}"
    holder, other = _Polling(private_redis.url, name, ttl=6.0), _Polling(private_redis.url, name, ttl=6.0)
    try:
        await holder.start()
        other_task = asyncio.create_task(other.start())
        await asyncio.sleep(1.0)
        private_redis.kill()
        private_redis.start()  # empty: the lease key is gone while its holder is alive and polling
        await asyncio.sleep(5.0)
        assert [kind for kind, _ in holder.events] == ["gain"]  # it took its key back and polled throughout
        assert other.events == []  # the other worker never polled beside it
        other_task.cancel()
        await asyncio.gather(other_task, return_exceptions=True)
    finally:
        await holder.aclose()
        if other.task is not None:
            await other.aclose()
        else:
            await other.client.aclose()
