"""Per-session locks (R-S5, R-G4) behind one interface: in-process for the embedded default, Redis for many workers.

Two locks per session, on separate keys:

* the **turn lock** (``session_turn``) serializes every message of a session across workers; it waits;
* the **compression lock** (``try_compression_lock``) never waits: contention yields False and the caller
  leaves the messages unchanged while the holder finishes (fail-safe).

A broken lock backend must never wedge a session: both locks then log a warning and let the caller proceed
unlocked (fail-open), which risks one overlapping turn or compaction — the store's watermark check still
refuses a stale compaction — but never a frozen conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.asyncio.lock import Lock
from redis.backoff import NoBackoff
from redis.exceptions import LockNotOwnedError, RedisError
from redis.retry import Retry

__all__ = ["InProcessLocks", "LockBackend", "RedisLocks", "fail_fast_client"]

log = logging.getLogger(__name__)


class LockBackend(ABC):
    """Per-session turn and compression locks."""

    @abstractmethod
    def session_turn(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the session's turn lock for the block, waiting for the current holder (fail-open)."""

    @abstractmethod
    def try_compression_lock(self, session_id: str) -> AbstractAsyncContextManager[bool]:
        """Yield True if the compression lock was taken, False if someone else holds it (fail-open: True)."""

    async def aclose(self) -> None:  # noqa: B027 — nothing to release for backends without connections
        """Release connections. Idempotent."""


@dataclass(slots=True)
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class InProcessLocks(LockBackend):
    """Locks for a single gateway process.

    The per-session map only holds sessions someone is using or waiting on; an entry is evicted when its
    last user leaves, so the map is bounded by concurrent work, not by how many sessions ever existed.
    """

    def __init__(self) -> None:
        self._turns: dict[str, _Slot] = {}
        self._compressing: set[str] = set()

    @asynccontextmanager
    async def session_turn(self, session_id: str) -> AsyncIterator[None]:
        slot = self._turns.setdefault(session_id, _Slot())
        slot.users += 1
        try:
            async with slot.lock:
                yield
        finally:
            slot.users -= 1
            if slot.users == 0:
                del self._turns[session_id]

    @asynccontextmanager
    async def try_compression_lock(self, session_id: str) -> AsyncIterator[bool]:
        if session_id in self._compressing:
            yield False
            return
        self._compressing.add(session_id)
        try:
            yield True
        finally:
            self._compressing.discard(session_id)

    def held_keys(self) -> int:
        """How many sessions currently have a turn-lock entry (for tests and metrics)."""
        return len(self._turns)


def fail_fast_client(url: str, *, connect_timeout: float = 0.5, socket_timeout: float = 1.0) -> Redis:
    """A Redis client that gives up at once on a dead server instead of retrying for seconds."""
    return Redis.from_url(url, retry=Retry(NoBackoff(), 0), socket_connect_timeout=connect_timeout,
                          socket_timeout=socket_timeout)


class RedisLocks(LockBackend):
    """Redis locks with an expiry, renewed in the background while held, so a dead holder frees the lock
    after at most ``ttl`` seconds but a live one keeps it as long as it works."""

    def __init__(self, client: Redis, *, prefix: str = "concord:lock:", turn_ttl: float = 30.0,
                 compression_ttl: float = 60.0, poll_interval: float = 0.05,
                 on_error: Callable[[str], None] | None = None) -> None:
        self._client = client
        self._prefix = prefix
        self._turn_ttl = turn_ttl
        self._compression_ttl = compression_ttl
        self._poll = poll_interval
        # Hears each failed Redis call by operation (acquire, renew, release): the metrics' lock errors.
        self._on_error = on_error or (lambda operation: None)
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "concord:lock:", turn_ttl: float = 30.0,
                 compression_ttl: float = 60.0, on_error: Callable[[str], None] | None = None) -> RedisLocks:
        """Locks over a fail-fast client for ``url`` (``redis://host:port/db``)."""
        return cls(fail_fast_client(url), prefix=prefix, turn_ttl=turn_ttl, compression_ttl=compression_ttl,
                   on_error=on_error)

    def _lock(self, kind: str, session_id: str, ttl: float, blocking: bool) -> Lock:
        return self._client.lock(f"{self._prefix}{kind}:{session_id}", timeout=ttl, sleep=self._poll,
                                 blocking=blocking, blocking_timeout=None, thread_local=False)

    @asynccontextmanager
    async def session_turn(self, session_id: str) -> AsyncIterator[None]:
        lock = self._lock("turn", session_id, self._turn_ttl, blocking=True)
        if not await self._acquire(lock, session_id, "turn lock; proceeding WITHOUT serialization"):
            yield
            return
        async with self._held(lock, session_id, self._turn_ttl):
            yield

    @asynccontextmanager
    async def try_compression_lock(self, session_id: str) -> AsyncIterator[bool]:
        lock = self._lock("compress", session_id, self._compression_ttl, blocking=False)
        acquired = await self._acquire(lock, session_id, "compression lock; compressing without it")
        if acquired is None:
            yield True
            return
        if not acquired:
            yield False
            return
        async with self._held(lock, session_id, self._compression_ttl):
            yield True

    async def _acquire(self, lock: Lock, session_id: str, fallback: str) -> bool | None:
        """True/False as Redis answered; None when Redis is broken (the caller proceeds: fail-open)."""
        try:
            return bool(await lock.acquire())
        except RedisError as exc:
            self._on_error("acquire")
            log.warning("lock backend unavailable for session %s (%s): %s", session_id, type(exc).__name__,
                        fallback)
            return None

    @asynccontextmanager
    async def _held(self, lock: Lock, session_id: str, ttl: float) -> AsyncIterator[None]:
        renewer = asyncio.create_task(self._renew(lock, session_id, ttl))
        try:
            yield
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            await self._release(lock, session_id)

    async def _renew(self, lock: Lock, session_id: str, ttl: float) -> None:
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                await lock.reacquire()
            except LockNotOwnedError:
                self._on_error("lost")
                log.error("lock %s for session %s expired or was lost while held; work may overlap",
                          lock.name, session_id)
                return
            except RedisError as exc:
                self._on_error("renew")
                log.warning("could not renew lock %s for session %s (%s); retrying", lock.name, session_id,
                            type(exc).__name__)

    async def _release(self, lock: Lock, session_id: str) -> None:
        try:
            await lock.release()
        except LockNotOwnedError:
            self._on_error("lost")
            log.warning("lock %s for session %s was lost before release (expired or Redis restarted)",
                        lock.name, session_id)
        except RedisError as exc:
            self._on_error("release")
            log.warning("could not release lock %s for session %s (%s); it expires by itself",
                        lock.name, session_id, type(exc).__name__)

    async def aclose(self) -> None:
        """Close the Redis connection pool. Idempotent."""
        if not self._closed:
            self._closed = True
            await self._client.aclose()
