"""Telegram updates stay unconfirmed until the gateway has them safe.

Telegram forgets every update below the ``offset`` of the next getUpdates call, and PTB asks for that call
as soon as it has queued a batch — before any handler has seen it. An update in that gap dies with the
process. `UpdateHandOff` closes the gap: the getUpdates transport waits, before asking past a batch, until
the batch is settled — each update read into a message (or skipped), the batch's messages kept in the
gateway's inbox in one write, and handed on.

While the inbox cannot be written (the database is down) the write is retried and polling waits: Telegram
keeps the updates (for 24 hours), and nothing is confirmed that is kept nowhere. A batch that polling stops
waiting for — this worker lost the polling lease or shuts down, or its updates were not all read within
``read_timeout_s`` — is *held back*: never confirmed. Every getUpdates asks from the first held-back update
on (`confine`), so Telegram sends those again, to this worker or to the one that polls next.
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
    """Fetched batches not settled yet, and the updates Telegram must keep: `wait` returns once no batch is
    still being read or kept; `confine` lowers an offset that would confirm a held-back update."""

    def __init__(self, read_timeout_s: float = 60.0) -> None:
        self.read_timeout_s = read_timeout_s
        self._batches: dict[int, Batch] = {}  # update id → its batch, until settled or held back
        self._since: float | None = None  # when the oldest unsettled batch was fetched
        self._held_back: set[int] = set()  # fetched, not kept: never to be confirmed
        self._settled = asyncio.Event()
        self._settled.set()

    @property
    def open(self) -> int:
        """Updates fetched and not settled yet."""
        return len(self._batches)

    @property
    def held_back(self) -> int:
        """Updates fetched that Telegram is to send again (none were kept)."""
        return len(self._held_back)

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
        whose batch was held back comes back as a batch of its own."""
        batch = self._batches.get(update_id) or Batch((update_id,))
        batch.messages[update_id] = inbound
        return batch if batch.complete else None

    def settled(self, batch: Batch) -> None:
        """``batch`` is kept and handed on: Telegram may forget it."""
        self._held_back.difference_update(batch.ids)
        self._forget(batch)

    def hold_back(self, batch: Batch) -> None:
        """``batch`` could not be kept and polling stopped waiting for it: Telegram must send it again."""
        self._held_back.update(batch.ids)
        self._forget(batch)

    def _forget(self, batch: Batch) -> None:
        for update_id in batch.ids:
            if self._batches.get(update_id) is batch:
                del self._batches[update_id]
        if not self._batches:
            self._since = None
            self._settled.set()

    async def wait(self, *, stopping: bool = False) -> None:
        """Return once every fetched batch is settled or held back. A batch whose updates are not all read
        within ``read_timeout_s`` of the fetch — at once when polling is ``stopping`` — is held back (a handler
        that never returns must not stop polling); one being kept is waited for as long as that takes."""
        while not self._settled.is_set():
            unread = list({id(b): b for b in self._batches.values() if not b.complete}.values())
            if not unread or self._since is None:
                await self._settled.wait()
                return
            left = 0.0 if stopping else self._since + self.read_timeout_s - time.monotonic()
            try:
                await asyncio.wait_for(self._settled.wait(), max(0.0, left))
            except TimeoutError:
                ids = sorted(i for b in unread for i in b.ids)
                log.warning("telegram: %d update(s) not read %s; not confirmed, so Telegram sends them again",
                            len(ids), "as polling stops" if stopping else f"after {self.read_timeout_s:.0f} s")
                for batch in unread:
                    self.hold_back(batch)
                self._since = time.monotonic() if self._batches else None

    def confine(self, offset: int) -> int:
        """The getUpdates ``offset`` to ask with instead of ``offset``: never past a held-back update."""
        if not self._held_back or offset <= 0:
            return offset
        return min(offset, min(self._held_back))

    def resent(self) -> None:
        """A getUpdates asked from the first held-back update has been answered: the held-back updates still at
        Telegram are in that answer (fetched again, each settled or held back anew); the others were confirmed
        by whoever polled meanwhile."""
        self._held_back.clear()
