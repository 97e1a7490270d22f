"""Behaviour both lock backends share: the turn lock serializes a session, the compression and job locks never
wait."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.intake.locks import InProcessLocks, LockBackend, RedisLocks


async def test_turn_lock_serializes_one_session(backend: LockBackend) -> None:
    trace: list[str] = []

    async def turn(name: str) -> None:
        async with backend.session_turn("s1"):
            trace.append(f"{name}+")
            await asyncio.sleep(0.05)
            trace.append(f"{name}-")

    await asyncio.gather(turn("a"), turn("b"), turn("c"))
    assert [t[-1] for t in trace] == ["+", "-"] * 3
    assert all(trace[i][0] == trace[i + 1][0] for i in range(0, 6, 2))


async def test_different_sessions_run_concurrently(backend: LockBackend) -> None:
    inside = asyncio.Event()
    both = asyncio.Event()

    async def first() -> None:
        async with backend.session_turn("s1"):
            inside.set()
            await asyncio.wait_for(both.wait(), 2)

    async def second() -> None:
        await inside.wait()
        async with backend.session_turn("s2"):
            both.set()

    await asyncio.gather(first(), second())


async def test_compression_lock_skips_on_contention(backend: LockBackend) -> None:
    async with backend.try_compression_lock("s1") as first:
        started = time.monotonic()
        async with backend.try_compression_lock("s1") as second:
            assert (first, second) == (True, False)
        assert time.monotonic() - started < 0.5  # contention never waits
        async with backend.try_compression_lock("s2") as other:
            assert other is True
        async with backend.session_turn("s1"):  # a separate key from the turn lock
            pass
    async with backend.try_compression_lock("s1") as again:
        assert again is True


async def test_a_job_lock_is_one_holder_at_a_time_and_apart_from_the_session_locks(backend: LockBackend) -> None:
    async with backend.try_job_lock("hygiene-sweep") as first:
        async with backend.try_job_lock("hygiene-sweep") as second, backend.try_job_lock("idle-expiry") as other:
            assert (first, second, other) == (True, False, True)
        async with backend.try_compression_lock("hygiene-sweep") as compression:
            assert compression is True
    async with backend.try_job_lock("hygiene-sweep") as again:
        assert again is True


async def test_locks_are_released_when_the_body_raises(backend: LockBackend) -> None:
    with pytest.raises(RuntimeError):
        async with backend.try_compression_lock("s1") as acquired:
            assert acquired
            raise RuntimeError("summary failed")
    with pytest.raises(RuntimeError):
        async with backend.session_turn("s1"):
            raise RuntimeError("turn failed")
    async with backend.try_compression_lock("s1") as acquired:
        assert acquired
    async with asyncio.timeout(1):
        async with backend.session_turn("s1"):
            pass


async def test_inprocess_map_holds_only_sessions_in_use() -> None:
    locks = InProcessLocks()
    release = asyncio.Event()

    async def holder() -> None:
        async with locks.session_turn("s1"):
            await release.wait()

    task = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(asyncio.wait_for(locks.session_turn("s1").__aenter__(), 0.05))
    with pytest.raises(TimeoutError):
        await waiter  # a cancelled waiter must not leak its entry
    for i in range(100):
        async with locks.session_turn(f"other{i}"):
            pass
    assert locks.held_keys() == 1
    release.set()
    await task
    assert locks.held_keys() == 0


async def test_redis_lock_is_renewed_while_the_holder_works(redis_url: str) -> None:
    locks = RedisLocks.from_url(redis_url, prefix="concord-test:renew:", compression_ttl=0.6)
    try:
        async with locks.try_compression_lock("s1") as acquired:
            assert acquired
            await asyncio.sleep(1.5)  # 2.5 x the expiry
            async with locks.try_compression_lock("s1") as second:
                assert second is False
    finally:
        await locks.aclose()
