"""A hung or slow Redis leaves no lock that nobody owns: requests and releases that timed out on the
client are deleted by their token once Redis answers, so no chat waits out a lock's expiry after recovery.
Faults hit a private redis-server only (SIGSTOP / SIGCONT by PID, ``DEBUG SLEEP``)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid

import pytest
from redis import Redis as SyncRedis

from gateway.intake.locks import RedisLocks
from tests.locks.conftest import PrivateRedis

CHATS = 20
# Production expiry: without the cleanup an orphaned key would block its chat this long.
TTL = 60.0
AFTER_RECOVERY_LIMIT_S = 5.0


async def _busy_chats(locks: RedisLocks, stop: asyncio.Event) -> None:
    async def chat(n: int) -> None:
        while not stop.is_set():
            async with locks.session_turn(f"chat-{n}"):
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.01)

    await asyncio.gather(*(chat(n) for n in range(CHATS)))


async def _waits_after_recovery(locks: RedisLocks) -> list[float]:
    async def one(n: int) -> float:
        started = time.monotonic()
        async with locks.session_turn(f"chat-{n}"):
            return time.monotonic() - started

    return list(await asyncio.gather(*(one(n) for n in range(CHATS))))


def _lock_keys(server: PrivateRedis, prefix: str) -> list[bytes]:
    client = SyncRedis(port=server.port)
    try:
        return list(client.scan_iter(f"{prefix}*"))
    finally:
        client.close()


async def _settle(locks: RedisLocks, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not locks.orphans:
            return
        await asyncio.sleep(0.05)


async def test_a_hung_redis_leaves_no_orphaned_lock(private_redis: PrivateRedis,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gateway.intake.locks")
    prefix = f"orphans:{uuid.uuid4().hex}:"
    locks = RedisLocks.from_url(private_redis.url, prefix=prefix, turn_ttl=TTL, compression_ttl=TTL)
    stop = asyncio.Event()
    try:
        chats = asyncio.create_task(_busy_chats(locks, stop))
        await asyncio.sleep(0.5)
        private_redis.pause()
        await asyncio.sleep(3.0)  # every lock call times out: the chats go on unlocked (fail-open)
        private_redis.resume()
        stop.set()
        await chats
        waits = await _waits_after_recovery(locks)
        await _settle(locks)
        assert max(waits) <= AFTER_RECOVERY_LIMIT_S, f"chats waited {max(waits):.1f} s after Redis came back"
        assert locks.orphans == 0
        assert _lock_keys(private_redis, prefix) == []
        unavailable = [r for r in caplog.records if "lock backend unavailable" in r.getMessage()]
        assert 1 <= len(unavailable) <= 2  # one throttled line per failure class, not one per chat
    finally:
        stop.set()
        await locks.aclose()


def _slow_redis(port: int, stop: threading.Event, sleeps: list[int]) -> None:
    client = SyncRedis(port=port, socket_timeout=10)
    try:
        while not stop.is_set():
            client.execute_command("DEBUG", "SLEEP", "1.5")
            sleeps.append(1)
    finally:
        client.close()


async def test_a_slow_redis_leaves_no_orphaned_lock(private_redis: PrivateRedis) -> None:
    prefix = f"orphans:{uuid.uuid4().hex}:"
    locks = RedisLocks.from_url(private_redis.url, prefix=prefix, turn_ttl=TTL, compression_ttl=TTL)
    stop, slow = asyncio.Event(), threading.Event()
    sleeps: list[int] = []
    sleeper = threading.Thread(target=_slow_redis, args=(private_redis.port, slow, sleeps), daemon=True)
    try:
        chats = asyncio.create_task(_busy_chats(locks, stop))
        await asyncio.sleep(0.3)
        sleeper.start()
        await asyncio.sleep(4.0)  # every command waits up to 1.5 s: most exceed the client's 1 s timeout
        slow.set()
        await asyncio.to_thread(sleeper.join, 5)
        assert len(sleeps) >= 2, "Redis was not slowed (DEBUG SLEEP refused?)"
        stop.set()
        await chats
        waits = await _waits_after_recovery(locks)
        await _settle(locks)
        assert max(waits) <= AFTER_RECOVERY_LIMIT_S, f"chats waited {max(waits):.1f} s after Redis recovered"
        assert locks.orphans == 0
        assert _lock_keys(private_redis, prefix) == []
    finally:
        slow.set()
        stop.set()
        await locks.aclose()


async def test_waiting_for_a_held_turn_lock_is_logged_and_bounded(private_redis: PrivateRedis,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gateway.intake.locks")
    holder = RedisLocks.from_url(private_redis.url, prefix="bounded:", turn_ttl=5.0)
    waiter = RedisLocks(holder._client, prefix="bounded:", turn_ttl=5.0, max_wait=1.0, wait_note_s=0.3)
    try:
        async with holder.session_turn("dm:c1"):
            started = time.monotonic()
            async with waiter.session_turn("dm:c1"):
                waited = time.monotonic() - started
        assert 1.0 <= waited < 2.0
        text = "\n".join(r.getMessage() for r in caplog.records)
        assert "session dm:c1: waiting for its turn lock, held by another worker, for 0." in text
        assert "session dm:c1: gave up waiting for its turn lock after 1." in text
        assert "WITHOUT serialization" in text
    finally:
        await holder.aclose()
