"""Per-session FIFO queues (R-G4 inside one process): one message of a session at a time, in arrival order.

A message arriving while its session is busy waits its turn — never dropped, never handled twice. Each busy
session has one worker task; when its queue empties the worker exits and the entry is removed, so the map is
bounded by the number of sessions busy right now. Across processes the turn lock does the same job; this
queue keeps one process from taking the lock in a random order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["QueueClosed", "SessionQueues"]

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class QueueClosed(RuntimeError):
    """The gateway is shutting down and accepts no new messages."""


@dataclass
class _Lane(Generic[T]):
    items: deque[tuple[T, asyncio.Future[None]]] = field(default_factory=deque)
    worker: asyncio.Task[None] | None = None


class SessionQueues(Generic[K, T]):
    """Runs ``process(key, item)`` for each submitted item, serially per key, concurrently across keys."""

    def __init__(self, process: Callable[[K, T], Awaitable[None]]) -> None:
        self._process = process
        self._lanes: dict[K, _Lane[T]] = {}
        self._closed = False

    @property
    def busy(self) -> int:
        """How many sessions have work queued or running."""
        return len(self._lanes)

    @property
    def depth(self) -> int:
        """Items queued or running, over every session."""
        return sum(len(lane.items) for lane in self._lanes.values())

    def pending(self, key: K) -> int:
        """Items of ``key`` waiting behind the one being processed."""
        lane = self._lanes.get(key)
        return len(lane.items) if lane else 0

    async def submit(self, key: K, item: T) -> None:
        """Queue ``item`` behind ``key``'s earlier items and wait until it has been processed.

        An exception from ``process`` is re-raised here, to this item's submitter only.
        """
        if self._closed:
            raise QueueClosed("the gateway is shutting down")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        lane.items.append((item, done))
        if lane.worker is None:
            lane.worker = asyncio.create_task(self._work(key, lane), name=f"session-queue:{key}")
        await asyncio.shield(done)

    async def _work(self, key: K, lane: _Lane[T]) -> None:
        try:
            while lane.items:
                item, done = lane.items[0]
                try:
                    await self._process(key, item)
                except asyncio.CancelledError:
                    done.cancel()
                    raise
                except Exception as exc:
                    if not done.done():
                        done.set_exception(exc)
                else:
                    if not done.done():
                        done.set_result(None)
                finally:
                    lane.items.popleft()
                if _cancel_requested():
                    # The item swallowed our cancellation (the agent loop ends a cancelled turn cleanly); the
                    # messages behind it must not run after the shutdown grace period.
                    raise asyncio.CancelledError
        finally:
            for _, done in lane.items:
                done.cancel()
            self._lanes.pop(key, None)

    async def aclose(self, grace_seconds: float) -> None:
        """Refuse new items, let queued ones finish for up to ``grace_seconds``, then cancel the rest."""
        self._closed = True
        workers = [lane.worker for lane in self._lanes.values() if lane.worker is not None]
        if not workers:
            return
        _, late = await asyncio.wait(workers, timeout=grace_seconds)
        for task in late:
            task.cancel()
        if late:
            log.warning("shutdown: cancelled %d session(s) still busy after %.0f s", len(late), grace_seconds)
            await asyncio.gather(*late, return_exceptions=True)


def _cancel_requested() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
