"""Redis failures never wedge a session: a dead, restarted or hung Redis makes the locks fail OPEN, loudly;
a dead lock HOLDER frees its lock when the expiry runs out. Faults hit a private redis-server only."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid

import pytest

from gateway.intake.locks import RedisLocks
from tests.locks.conftest import PrivateRedis
from tests.store.crashkit import fork_child, kill_and_reap

LOGGER = "gateway.intake.locks"


def _messages(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.name == LOGGER)


async def test_redis_killed_mid_lock_fails_open_and_recovers(private_redis: PrivateRedis,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    locks = RedisLocks.from_url(private_redis.url, turn_ttl=0.6, compression_ttl=0.6)
    try:
        async with locks.session_turn("s1"):
            private_redis.kill()
            await asyncio.sleep(0.4)  # a renewal attempt hits the dead server
        assert "could not renew" in _messages(caplog)
        assert "could not release" in _messages(caplog)

        started = time.monotonic()
        async with locks.session_turn("s1"):  # no wedge: proceeds unserialized
            pass
        async with locks.try_compression_lock("s1") as acquired:
            assert acquired is True  # fail-open
        assert time.monotonic() - started < 1.0
        assert "WITHOUT serialization" in _messages(caplog)
        assert "compressing without it" in _messages(caplog)

        private_redis.start()  # same port, empty: the pool reconnects by itself
        async with locks.try_compression_lock("s1") as first:
            async with locks.try_compression_lock("s1") as second:
                assert (first, second) == (True, False)
    finally:
        await locks.aclose()


async def test_lock_lost_to_a_restart_is_reported(private_redis: PrivateRedis,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    locks = RedisLocks.from_url(private_redis.url, compression_ttl=0.6)
    try:
        async with locks.try_compression_lock("s1") as acquired:
            assert acquired
            private_redis.kill()
            private_redis.start()  # no persistence: the lock is silently gone
            await asyncio.sleep(0.5)
        text = _messages(caplog)
        assert "expired or was lost while held" in text
        assert "lost before release" in text
    finally:
        await locks.aclose()


async def test_hung_redis_costs_a_timeout_not_a_wedge(private_redis: PrivateRedis,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    locks = RedisLocks.from_url(private_redis.url)
    try:
        async with locks.try_compression_lock("warm") as acquired:  # open the connection first
            assert acquired
        private_redis.pause()
        started = time.monotonic()
        async with locks.try_compression_lock("s1") as acquired:
            assert acquired is True
        assert time.monotonic() - started < 3.0
        assert "TimeoutError" in _messages(caplog)
    finally:
        private_redis.resume()
        await locks.aclose()


async def _hold_forever(url: str, prefix: str, out: int) -> None:
    locks = RedisLocks.from_url(url, prefix=prefix, compression_ttl=1.0)
    async with locks.try_compression_lock("s1") as acquired:
        os.write(out, b"1" if acquired else b"0")
        await asyncio.sleep(3600)


async def test_a_dead_holder_frees_the_lock_when_it_expires(redis_url: str) -> None:
    prefix = f"concord-test:{uuid.uuid4().hex}:"
    pid, fd = fork_child(lambda out: _hold_forever(redis_url, prefix, out))
    locks = RedisLocks.from_url(redis_url, prefix=prefix)
    alive = True
    try:
        assert os.read(fd, 1) == b"1"
        await asyncio.sleep(1.2)  # past the expiry: the live holder keeps renewing
        async with locks.try_compression_lock("s1") as acquired:
            assert acquired is False
        kill_and_reap(pid)
        alive = False
        killed = time.monotonic()
        while True:
            async with locks.try_compression_lock("s1") as acquired:
                if acquired:
                    break
            assert time.monotonic() - killed < 2.0, "the dead holder's lock never expired"
            await asyncio.sleep(0.05)
    finally:
        if alive:
            kill_and_reap(pid)
        os.close(fd)
        await locks.aclose()
