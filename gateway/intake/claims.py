"""Expiring claims shared by every worker: "has this been done?" and "I do it".

One primitive serves two guarantees:

* inbound de-duplication — an inbound id (Telegram update, Discord message) is marked handled with an
  expiry once its answer is in the delivery ledger; a second delivery of it, to this worker or another,
  finds the mark and is dropped;
* scheduled jobs once per schedule — each run of the sweep or idle expiry claims its slot
  (``job:<name>:<slot>``); the one worker whose claim succeeds runs it, the others skip.

`RedisClaims` is Redis ``SET NX EX`` (atomic: of several workers claiming one key, exactly one wins); without
Redis, `InProcessClaims` keeps the same semantics inside one process with a bounded, expiring map. A Redis
that fails answers as if nothing were claimed (fail-open: a duplicate answer is better than a lost one),
with one throttled warning.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = ["Claims", "InProcessClaims", "RedisClaims"]

log = logging.getLogger(__name__)

WARN_EVERY_S = 30.0


class Claims(ABC):
    """Keys that, once claimed, stay claimed for their expiry."""

    @abstractmethod
    async def claim(self, key: str, ttl_s: float) -> bool:
        """Claim ``key`` for ``ttl_s`` seconds; True for the one caller that claimed it first."""

    @abstractmethod
    async def claimed(self, key: str) -> bool:
        """Whether ``key`` is claimed now."""

    async def ping(self) -> bool:
        """True when the backend answers (readiness)."""
        return True

    async def aclose(self) -> None:  # noqa: B027 — nothing to release for the in-process backend
        """Release connections. Idempotent."""


class InProcessClaims(Claims):
    """Claims inside one process: at most ``capacity`` keys, the oldest forgotten first."""

    def __init__(self, capacity: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = capacity
        self._clock = clock
        self._until: OrderedDict[str, float] = OrderedDict()

    async def claim(self, key: str, ttl_s: float) -> bool:
        if await self.claimed(key):
            return False
        self._until[key] = self._clock() + ttl_s
        self._until.move_to_end(key)
        while len(self._until) > self._capacity:
            self._until.popitem(last=False)
        return True

    async def claimed(self, key: str) -> bool:
        until = self._until.get(key)
        if until is None:
            return False
        if until <= self._clock():
            del self._until[key]
            return False
        return True


class RedisClaims(Claims):
    """Claims as Redis keys ``<prefix><key>`` with an expiry; ``on_error(operation)`` hears every failure."""

    def __init__(self, client: Redis, *, prefix: str = "concord:claim:",
                 on_error: Callable[[str], None] | None = None) -> None:
        self._client = client
        self._prefix = prefix
        self._on_error = on_error
        self._warned_at = float("-inf")
        self._failures = 0
        self._closed = False

    async def claim(self, key: str, ttl_s: float) -> bool:
        try:
            return bool(await self._client.set(self._prefix + key, b"1", nx=True, px=max(1, int(ttl_s * 1000))))
        except RedisError as exc:
            self._failed("claim", exc)
            return True

    async def claimed(self, key: str) -> bool:
        try:
            return bool(await self._client.exists(self._prefix + key))
        except RedisError as exc:
            self._failed("check", exc)
            return False

    async def ping(self) -> bool:
        return bool(await self._client.ping())

    def _failed(self, operation: str, exc: RedisError) -> None:
        if self._on_error is not None:
            self._on_error(f"claim_{operation}")
        self._failures += 1
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            log.warning("redis unavailable for de-duplication and job claims (%s); proceeding without them "
                        "(%d failure(s) since the last warning)", type(exc).__name__, self._failures)
            self._warned_at, self._failures = now, 0

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent."""
        if not self._closed:
            self._closed = True
            await self._client.aclose()
