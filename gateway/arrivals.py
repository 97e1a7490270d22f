"""Arrival order of a session's messages across workers (issue 18).

Inside one worker the per-session FIFO (`gateway.queues`) keeps arrival order. Behind a load balancer two
messages of one chat can reach two workers, and the turn lock alone would let whichever asks first go first.
So each message draws a ticket when it arrives (``INCR`` of the session's counter in Redis: the order in which
workers received them), and the turn lock's holder handles a message only when its ticket is the one being
served; otherwise it lets the lock go and asks again shortly. Handling a message (or dropping it as a
duplicate) serves the next ticket.

A ticket whose worker died before handling it would stop the session forever, so a ticket served for longer
than ``stale_after_s`` with nobody handling it is skipped (that message is then lost to this worker — the
platform's redelivery brings it back, with a new ticket). A message the inbox takes over from a stopped worker
`rejoin`s instead: it takes the ticket being served — the one stuck since its worker died, most likely its
own — so it is handled before the messages that arrived after it, and they stop waiting for the skip. Redis
failing means no ticket: the message is handled in the order the lock gives (fail-open), as without this
module.

Inside one worker a session's tickets are drawn one at a time: concurrent draws go out over different pooled
connections and can be answered in any order, and a message queued in the FIFO ahead of one holding an
earlier ticket would wait for that ticket (``stale_after_s``) and then skip it — a minute's stall, then the two
answered out of order. The caller queues a message before its next await after ``arrive`` returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = ["ArrivalOrder", "InProcessOrder", "RedisArrivalOrder", "Turn"]

log = logging.getLogger(__name__)

KEY_TTL_S = 86_400


@dataclass
class Turn:
    """Where a waiting ticket stands: the ticket served when it first looked, and since when."""

    ticket: int | None
    seen_serving: int | None = None
    seen_at: float = 0.0


class ArrivalOrder(ABC):
    """Tickets per session key."""

    @abstractmethod
    async def arrive(self, key: str) -> Turn:
        """Draw the next ticket of ``key`` (``Turn(None)``: no cross-worker order, handle when the lock allows)."""

    @abstractmethod
    async def rejoin(self, key: str) -> Turn:
        """A ticket for a message taken over from a stopped worker: the one being served (handled next)."""

    @abstractmethod
    async def ready(self, key: str, turn: Turn) -> bool:
        """With the turn lock held: whether ``turn`` may be handled now (skipping a dead worker's ticket)."""

    @abstractmethod
    async def served(self, key: str, turn: Turn) -> None:
        """With the turn lock held: ``turn`` is done; the next ticket is served."""


class InProcessOrder(ArrivalOrder):
    """One worker: the FIFO queue already keeps arrival order."""

    async def arrive(self, key: str) -> Turn:
        return Turn(None)

    async def rejoin(self, key: str) -> Turn:
        return Turn(None)

    async def ready(self, key: str, turn: Turn) -> bool:
        return True

    async def served(self, key: str, turn: Turn) -> None:
        return None


class RedisArrivalOrder(ArrivalOrder):
    """Tickets in Redis: ``<prefix>next:<key>`` (last drawn) and ``<prefix>serving:<key>`` (next to handle)."""

    def __init__(self, client: Redis, *, stale_after_s: float, prefix: str = "concord:order:",
                 clock: Callable[[], float] = time.monotonic,
                 on_error: Callable[[str], None] | None = None) -> None:
        self._client = client
        self._stale_after = stale_after_s
        self._prefix = prefix
        self._clock = clock
        self._on_error = on_error
        # Per session key: the lock its draws in this worker take turns on, and how many want it.
        self._drawing: dict[str, tuple[asyncio.Lock, int]] = {}

    def _keys(self, key: str) -> tuple[str, str]:
        return f"{self._prefix}next:{key}", f"{self._prefix}serving:{key}"

    async def arrive(self, key: str) -> Turn:
        lock, waiting = self._drawing.get(key) or (asyncio.Lock(), 0)
        self._drawing[key] = (lock, waiting + 1)
        try:
            async with lock:  # FIFO: the draws of ``key`` in the order they were asked for
                return await self._draw(key)
        finally:
            lock, waiting = self._drawing[key]
            if waiting > 1:
                self._drawing[key] = (lock, waiting - 1)
            else:
                del self._drawing[key]

    async def _draw(self, key: str) -> Turn:
        drawn, serving = self._keys(key)
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.incr(drawn)
                pipe.expire(drawn, KEY_TTL_S)
                pipe.set(serving, 1, nx=True, ex=KEY_TTL_S)
                pipe.expire(serving, KEY_TTL_S)
                ticket, *_ = await pipe.execute()
        except RedisError as exc:
            self._failed("order_arrive", exc)
            return Turn(None)
        return Turn(int(ticket))

    async def rejoin(self, key: str) -> Turn:
        _, serving_key = self._keys(key)
        try:
            raw = await self._client.get(serving_key)
        except RedisError as exc:
            self._failed("order_rejoin", exc)
            return Turn(None)
        # Nothing served (the session's counters expired): no ticket is stuck, so a fresh one waits for nobody.
        return Turn(int(raw)) if raw is not None else await self.arrive(key)

    async def ready(self, key: str, turn: Turn) -> bool:
        if turn.ticket is None:
            return True
        _, serving_key = self._keys(key)
        try:
            raw = await self._client.get(serving_key)
        except RedisError as exc:
            self._failed("order_check", exc)
            return True
        serving = int(raw) if raw is not None else turn.ticket  # expired with the session idle: start afresh
        if serving >= turn.ticket:
            return True
        now = self._clock()
        if turn.seen_serving != serving:
            turn.seen_serving, turn.seen_at = serving, now
            return False
        if now - turn.seen_at < self._stale_after:
            return False
        log.warning("session %s: message ticket %d not handled for %.0f s (its worker died?); skipping it",
                    key, serving, now - turn.seen_at)
        try:
            await self._client.set(serving_key, serving + 1, ex=KEY_TTL_S)
        except RedisError as exc:
            self._failed("order_skip", exc)
            return True
        turn.seen_serving, turn.seen_at = serving + 1, now
        return serving + 1 >= turn.ticket

    async def served(self, key: str, turn: Turn) -> None:
        if turn.ticket is None:
            return
        _, serving_key = self._keys(key)
        try:
            # Only the turn lock's holder writes here. A ticket handled after it was skipped must not move
            # the counter back.
            current = await self._client.get(serving_key)
            if current is None or int(current) <= turn.ticket:
                await self._client.set(serving_key, turn.ticket + 1, ex=KEY_TTL_S)
        except RedisError as exc:
            self._failed("order_serve", exc)

    def _failed(self, operation: str, exc: RedisError) -> None:
        if self._on_error is not None:
            self._on_error(operation)
        log.debug("arrival order: %s failed (%s)", operation, type(exc).__name__)
