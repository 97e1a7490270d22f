"""Redis writes a timeout left unconfirmed, done again once Redis answers.

A request that timed out on the client may still be executed by the server: a hung Redis (SIGSTOP, a long
``DEBUG SLEEP``, a stalled disk) runs the commands waiting in its sockets when it resumes, whether or not
anybody still reads the reply. Whatever such a request left behind — a lock nobody holds, an arrival ticket no
message holds, a ticket handled but never marked served — must not wait for its key's expiry to be put right:
each is remembered here with an idempotent Redis call that puts it right (delete the lock by its token, cancel
the ticket by its draw token, serve the ticket again), and those calls are made as soon as Redis answers.

The calls must be idempotent: they may run after the timed-out request did, before it, or instead of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from redis.exceptions import RedisError

from gateway.intake.background import pause

__all__ = ["MAX_PENDING", "Redo"]

log = logging.getLogger(__name__)

# Remembered calls through a long outage; the oldest are dropped first (each one's key expires by itself).
MAX_PENDING = 10_000


@dataclass(slots=True)
class _Pending:
    call: Callable[[], Awaitable[object]]
    expires: float
    done: Callable[[object], None] | None


class Redo:
    """Idempotent Redis calls waiting for Redis to answer, made in the order they were added.

    ``interval`` is how often an unreachable Redis is tried again; a call is forgotten at ``expires`` (the key
    it would fix has expired by then) or once it succeeded, when ``done`` hears its result.
    """

    def __init__(self, name: str, *, interval: float = 0.25, clock: Callable[[], float] = time.monotonic) -> None:
        self._name = name
        self._interval = interval
        self._clock = clock
        self._pending: dict[Hashable, _Pending] = {}
        self._task: asyncio.Task[None] | None = None
        # Stops the loop between calls: a cancel landing mid-call may be swallowed (`gateway.intake.background`).
        self._stopping = asyncio.Event()

    @property
    def pending(self) -> int:
        """Calls still waiting for Redis."""
        return len(self._pending)

    def add(self, key: Hashable, call: Callable[[], Awaitable[object]], *, ttl: float,
            done: Callable[[object], None] | None = None) -> None:
        """Make ``call`` once Redis answers, unless ``ttl`` seconds pass first; a later ``add`` with the same
        ``key`` replaces the earlier call."""
        self._pending.pop(key, None)
        self._pending[key] = _Pending(call, self._clock() + ttl, done)
        while len(self._pending) > MAX_PENDING:
            del self._pending[next(iter(self._pending))]
        if (self._task is None or self._task.done()) and not self._stopping.is_set():
            self._task = asyncio.create_task(self._run(), name=f"redo-{self._name}")

    async def _run(self) -> None:
        while self._pending and not await pause(self._stopping, self._interval):
            await self._round()

    async def _round(self) -> bool:
        """One pass over the waiting calls; False when Redis did not answer (the rest wait for the next)."""
        for key, pending in list(self._pending.items()):
            if self._pending.get(key) is not pending:
                continue  # replaced meanwhile: the newer call runs in its turn
            if self._clock() >= pending.expires:
                del self._pending[key]
                continue
            try:
                result = await pending.call()
            except RedisError:
                return False
            if self._pending.get(key) is pending:
                del self._pending[key]
            if pending.done is not None:
                pending.done(result)
        return True

    async def aclose(self) -> None:
        """Stop retrying, after one last pass for what Redis still answers. Idempotent."""
        self._stopping.set()
        if self._task is not None:
            await self._task  # returns after the call it is in (bounded by the client's socket timeout)
            self._task = None
        if self._pending:
            with contextlib.suppress(Exception):
                await self._round()
            if self._pending:
                log.info("%s: %d Redis call(s) left undone at shutdown; their keys expire by themselves",
                         self._name, len(self._pending))
        self._pending.clear()
