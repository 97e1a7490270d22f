"""A lease only one worker holds at a time, taken over when its holder dies (issue 18).

Telegram's long polling allows one poller per bot (a second ``getUpdates`` gets 409 Conflict), so with several
workers exactly one polls: the holder of the ``telegram-polling`` lease. `RedisLease` is a Redis lock with an
expiry of ``ttl`` seconds, renewed every ``ttl / 3`` while held; a holder that dies stops renewing, the key
expires and the next worker to try (every ``ttl / 3``) takes over, so the gap is at most about ``ttl``
seconds plus one retry interval. A holder that cannot renew (Redis down, or the key was lost) gives the lease
up at once rather than risk two pollers, and tries again. Without Redis, `SoleLease` is held from the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = ["Lease", "RedisLease", "SoleLease"]

log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[None]]


class Lease(ABC):
    """Runs ``on_gain`` when this worker takes the lease and ``on_loss`` when it loses it."""

    @abstractmethod
    async def hold(self, on_gain: Hook, on_loss: Hook) -> None:
        """Take, keep and retake the lease until cancelled; release it on the way out."""


class SoleLease(Lease):
    """One worker only: the lease is ours from the start."""

    async def hold(self, on_gain: Hook, on_loss: Hook) -> None:
        await on_gain()
        await asyncio.Event().wait()


class RedisLease(Lease):
    """The lease as a Redis lock under the key ``name``; ``holder`` names this worker in the key's value."""

    def __init__(self, client: Redis, name: str, *, ttl_s: float, holder: str,
                 on_error: Callable[[str], None] | None = None) -> None:
        self._client = client
        self._name = name
        self._ttl = ttl_s
        self._holder = holder
        self._on_error = on_error
        self.held = False

    async def hold(self, on_gain: Hook, on_loss: Hook) -> None:
        lock = self._client.lock(self._name, timeout=self._ttl, blocking=False,
                                 thread_local=False)
        interval = self._ttl / 3
        try:
            while True:
                if not self.held:
                    self.held = await self._try(lock.acquire(token=self._holder.encode()), "lease_acquire")
                    if self.held:
                        log.info("lease %s taken by %s", self._name, self._holder)
                        await on_gain()
                elif not await self._try(lock.reacquire(), "lease_renew"):
                    self.held = False
                    log.warning("lease %s lost by %s; stopping until it is taken again", self._name, self._holder)
                    await on_loss()
                await asyncio.sleep(interval)
        finally:
            if self.held:
                self.held = False
                with contextlib.suppress(RedisError):
                    await lock.release()  # the next worker takes over at once instead of after the expiry

    async def _try(self, call: Awaitable[object], operation: str) -> bool:
        try:
            return bool(await call)
        except RedisError as exc:
            if self._on_error is not None:
                self._on_error(operation)
            log.debug("lease %s: %s failed (%s)", self._name, operation, type(exc).__name__)
            return False
