"""Telegram updates stay unconfirmed until the gateway has taken them.

Telegram forgets every update below the ``offset`` of the next getUpdates call, and PTB asks for that call
as soon as it has queued a batch — before any handler has seen it. An update in that gap dies with the
process. `UpdateHandOff` closes the gap: the getUpdates transport waits, before asking past a batch, until
each of its updates has been handed to the gateway (stored, or held in memory while storage is down). A
handler that never returns must not stop the bot, so the wait is bounded and then logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

__all__ = ["UpdateHandOff"]

log = logging.getLogger(__name__)


class UpdateHandOff:
    """Update ids fetched but not yet handed on; `wait` returns once there are none (or after ``max_wait_s``)."""

    def __init__(self, max_wait_s: float = 60.0) -> None:
        self.max_wait_s = max_wait_s
        self._open: set[int] = set()
        self._settled = asyncio.Event()
        self._settled.set()

    @property
    def open(self) -> int:
        """Updates fetched and not handed on yet."""
        return len(self._open)

    def fetched(self, update_ids: Iterable[int]) -> None:
        """A getUpdates answer brought these updates."""
        self._open.update(update_ids)
        if self._open:
            self._settled.clear()

    def handed_on(self, update_id: int) -> None:
        """The gateway has taken (or deliberately skipped) this update."""
        self._open.discard(update_id)
        if not self._open:
            self._settled.set()

    async def wait(self) -> None:
        """Return once every fetched update was handed on, so confirming them loses nothing."""
        if self._settled.is_set():
            return
        try:
            await asyncio.wait_for(self._settled.wait(), self.max_wait_s)
        except TimeoutError:
            log.warning("telegram: %d update(s) not handed on after %.0f s; confirming them anyway so polling "
                        "goes on", len(self._open), self.max_wait_s)
            self._open.clear()
            self._settled.set()
