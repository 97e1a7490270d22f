"""Telegram updates stay unconfirmed until the gateway has them safe.

Telegram forgets every update below the ``offset`` of the next getUpdates call, and PTB asks for that call
as soon as it has queued a batch — before any handler has seen it. An update in that gap dies with the
process. `UpdateHandOff` closes the gap: the getUpdates transport waits, before asking past a batch, until
the batch is settled — each update read into a message (or skipped), the batch's messages kept in the
gateway's inbox in one write, and handed on. A handler that never returns, or an inbox that cannot be written
(the database is down), must not stop the bot, so the wait is bounded (``max_wait_s`` from the fetch) and
then logged in one line: those updates are confirmed with their messages held in memory only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from adapters.base import Inbound

__all__ = ["Batch", "UpdateHandOff"]

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """One getUpdates answer: its update ids in order, and the message each became (None: nothing to hand on)."""

    ids: tuple[int, ...]
    messages: dict[int, Inbound | None] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every update of the batch has been read."""
        return len(self.messages) == len(self.ids)

    @property
    def inbounds(self) -> list[Inbound]:
        """The batch's messages, in update order."""
        return [m for i in self.ids if (m := self.messages.get(i)) is not None]


class UpdateHandOff:
    """Fetched batches not settled yet; `wait` returns once there are none (or ``max_wait_s`` after the fetch)."""

    def __init__(self, max_wait_s: float = 60.0) -> None:
        self.max_wait_s = max_wait_s
        self._batches: dict[int, Batch] = {}  # update id → its batch, until settled
        self._since: float | None = None  # when the oldest unsettled batch was fetched
        self._settled = asyncio.Event()
        self._settled.set()

    @property
    def open(self) -> int:
        """Updates fetched and not settled yet."""
        return len(self._batches)

    def fetched(self, update_ids: Iterable[int]) -> None:
        """A getUpdates answer brought these updates."""
        batch = Batch(tuple(update_ids))
        if not batch.ids:
            return
        self._batches.update(dict.fromkeys(batch.ids, batch))
        if self._since is None:
            self._since = time.monotonic()
        self._settled.clear()

    def read(self, update_id: int, inbound: Inbound | None) -> Batch | None:
        """Note what an update became; its batch once this completes it, to be kept and handed on. An update
        whose batch was given up on (`wait` timed out) comes back as a batch of its own."""
        batch = self._batches.get(update_id) or Batch((update_id,))
        batch.messages[update_id] = inbound
        return batch if batch.complete else None

    def remaining(self) -> float:
        """Seconds left before `wait` confirms the oldest unsettled batch anyway."""
        if self._since is None:
            return self.max_wait_s
        return max(0.0, self._since + self.max_wait_s - time.monotonic())

    def settled(self, batch: Batch) -> None:
        """``batch`` is kept (or given up on) and handed on: Telegram may forget it."""
        for update_id in batch.ids:
            if self._batches.get(update_id) is batch:
                del self._batches[update_id]
        if not self._batches:
            self._since = None
            self._settled.set()

    async def wait(self) -> None:
        """Return once every fetched batch is settled, so confirming them loses nothing."""
        if self._settled.is_set():
            return
        try:
            await asyncio.wait_for(self._settled.wait(), self.remaining())
        except TimeoutError:
            log.warning("telegram: %d update(s) not settled after %.0f s; confirming them anyway so polling "
                        "goes on (their messages, if any, are held in memory only)", len(self._batches),
                        self.max_wait_s)
            self._batches.clear()
            self._since = None
            self._settled.set()
