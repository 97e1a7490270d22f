"""The polling lease: one holder among workers, taken over when the holder leaves or dies."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from gateway.intake.lease import RedisLease
from gateway.intake.locks import fail_fast_client


class Holder:
    def __init__(self, redis_url: str, name: str, worker: str, ttl: float) -> None:
        self.client = fail_fast_client(redis_url)
        self.lease = RedisLease(self.client, name, ttl_s=ttl, holder=worker)
        self.events: list[str] = []
        self.task: asyncio.Task[None] | None = None
        self.stopping = asyncio.Event()

    def start(self) -> None:
        async def gain() -> None:
            self.events.append("gain")

        async def loss() -> None:
            self.events.append("loss")

        self.task = asyncio.create_task(self.lease.hold(gain, loss, self.stopping))

    async def stop(self) -> None:
        assert self.task is not None
        self.stopping.set()
        await self.task

    def die(self) -> None:
        """Like SIGKILL: no release, the renewals just stop."""
        assert self.task is not None
        self.lease.held = False  # so the cancelled task does not release the key on its way out
        self.task.cancel()


async def _wait(predicate: Callable[[], bool], within: float) -> float:
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not predicate():
        assert loop.time() - started < within, "timed out"
        await asyncio.sleep(0.02)
    return loop.time() - started


async def test_one_worker_polls_and_another_takes_over(redis_url: str) -> None:
    name = f"test-{uuid.uuid4().hex}"
    a, b = Holder(redis_url, name, "a", 0.6), Holder(redis_url, name, "b", 0.6)
    try:
        a.start()
        await _wait(lambda: a.events == ["gain"], 2)
        b.start()
        await asyncio.sleep(1.0)
        assert b.events == []  # a keeps renewing: b waits
        await a.stop()  # a graceful stop releases: b takes over within one retry interval
        assert await _wait(lambda: b.events == ["gain"], 1.0) < 0.5
        b.die()
        c = Holder(redis_url, name, "c", 0.6)
        c.start()
        # b never released: c waits for the expiry (≤ ttl) plus one retry interval (ttl / 3).
        waited = await _wait(lambda: c.events == ["gain"], 2.0)
        assert waited <= 0.6 + 0.2 + 0.3
        await c.stop()
    finally:
        for h in (a, b):
            await h.client.aclose()


async def test_a_holder_that_cannot_renew_gives_the_lease_up(redis_url: str) -> None:
    name = f"test-{uuid.uuid4().hex}"
    a = Holder(redis_url, name, "a", 0.6)
    a.start()
    try:
        await _wait(lambda: a.events == ["gain"], 2)
        other = fail_fast_client(redis_url)
        await other.delete(name)  # the key is lost (Redis restarted without persistence)
        await other.set(name, b"someone-else")
        await _wait(lambda: a.events == ["gain", "loss"], 2)
        await other.aclose()
    finally:
        await a.stop()
        await a.client.aclose()
