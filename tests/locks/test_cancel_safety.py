"""Locks and /stop announcements whose Redis loops are busy when their block ends.

redis-py's asyncio client swallows a cancellation that lands while a command is in flight often enough (about
one in ten here) that a renewal task cancelled at the end of a turn could keep renewing forever, and the turn
waiting for it would never end. Loops are therefore told to stop, not cancelled (`gateway.intake.background`): with
a renewal every millisecond or so — a Redis call in flight at almost every block's end — every block ends."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.intake.background import beside, pause
from gateway.intake.busy import RunningTurn
from gateway.intake.locks import RedisLocks, fail_fast_client
from gateway.intake.stops import RedisStops


async def test_a_lock_renewed_every_few_milliseconds_always_lets_its_block_end(redis_url: str) -> None:
    locks = RedisLocks.from_url(redis_url, prefix=f"concord-test:{uuid.uuid4().hex}:", turn_ttl=0.015,
                                compression_ttl=0.015)
    try:
        for n in range(600):
            started = asyncio.get_running_loop().time()
            async with asyncio.timeout(2), locks.session_turn(f"s{n % 3}"):
                await asyncio.sleep(0.0005 * (n % 23))
            assert asyncio.get_running_loop().time() - started < 1.5, f"block {n} ended only when cut off"
    finally:
        await locks.aclose()


async def test_a_turn_announced_for_stop_requests_always_ends(redis_url: str) -> None:
    client = fail_fast_client(redis_url)
    stops = RedisStops(client, prefix=f"concord-test:{uuid.uuid4().hex}:stop:")
    try:
        for n in range(150):
            started = asyncio.get_running_loop().time()
            async with asyncio.timeout(2), stops.watching(f"s{n}", RunningTurn("u", "U")):
                await asyncio.sleep(0.0002 * (n % 5))
            assert asyncio.get_running_loop().time() - started < 1.5, f"block {n} ended only when cut off"
    finally:
        await client.aclose()


async def test_a_loop_beside_a_block_stops_between_its_calls() -> None:
    calls: list[str] = []

    async def loop(stopping: asyncio.Event) -> None:
        while True:
            calls.append("call")
            await asyncio.sleep(0.05)  # a call in flight when the block ends: it is finished, not cut
            calls.append("done")
            if await pause(stopping, 10):
                return

    async with asyncio.timeout(2):
        async with beside(loop, "test"):
            await asyncio.sleep(0.01)
    assert calls == ["call", "done"]
    calls.clear()
    with pytest.raises(RuntimeError):
        async with asyncio.timeout(2), beside(loop, "test"):
            raise RuntimeError("the block failed")
    assert calls == ["call", "done"]
