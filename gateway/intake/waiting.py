"""Addressed messages on their way into a session's queue: ``collect`` mode's bursts (one batch per sender
while it waits, ``gateway.busy_mode``) and the queue depth cap (``limits.session_queue_depth``).

Both maps hold only sessions with messages waiting; entries leave when their last message does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

from adapters.base import Adapter, Inbound
from gateway.intake.busy import Batch
from gateway.intake.keys import SessionKey

__all__ = ["QUEUE_FULL", "Waiting"]

QUEUE_FULL = "⏳ {waiting} messages are already waiting here; send this again once they are answered."


class Waiting:
    """Hands addressed messages to ``enqueue`` (which returns once one is handled), at most ``depth()`` waiting
    per session."""

    def __init__(self, enqueue: Callable[[SessionKey, Inbound | Batch, Adapter], Awaitable[None]],
                 depth: Callable[[], int]) -> None:
        self._enqueue = enqueue
        self._depth = depth
        # Addressed messages waiting per session (``limits.session_queue_depth``); entries leave at zero.
        self._waiting: Counter[SessionKey] = Counter()
        self._batches: dict[tuple[SessionKey, str], Batch] = {}

    async def collect(self, key: SessionKey, inbound: Inbound, adapter: Adapter, admin: bool) -> None:
        """``collect``: join the sender's batch still waiting in this session, or start one."""
        slot = (key, inbound.user_id)
        batch = self._batches.get(slot)
        if batch is not None and not batch.started:
            batch.add(inbound)
            await batch.finished.wait()
            return
        batch = self._batches[slot] = Batch(inbound)
        try:
            await self.submit(key, batch, adapter, admin)
        finally:
            batch.finished.set()
            if self._batches.get(slot) is batch:
                del self._batches[slot]

    async def submit(self, key: SessionKey, item: Inbound | Batch, adapter: Adapter, admin: bool) -> None:
        """Queue an addressed message, unless ``limits.session_queue_depth`` are waiting already (admins and the
        console are exempt): then the sender is told, and nothing is queued."""
        if admin or key.platform == "console":
            await self._enqueue(key, item, adapter)
            return
        if self._waiting[key] >= self._depth():
            inbound = item.first if isinstance(item, Batch) else item
            if isinstance(item, Batch):
                item.started = True  # refused: a message sent meanwhile starts a batch of its own
            await adapter.send(inbound, QUEUE_FULL.format(waiting=self._waiting[key]))
            return
        self._waiting[key] += 1
        try:
            await self._enqueue(key, item, adapter)
        finally:
            self._waiting[key] -= 1
            if self._waiting[key] <= 0:
                del self._waiting[key]
