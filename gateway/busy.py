"""What happens while a session is busy: the running turn (so ``/stop`` and ``interrupt`` can cancel it) and
the messages ``collect`` mode gathers into one turn (``gateway.busy_mode``).

Both maps hold only sessions with work in flight, so they are bounded by concurrent work. They are
per-process: a ``/stop`` reaches the turn only on the worker running it, which is the worker that holds the
platform connection (Discord gateway, Telegram polling) in every deployment but load-balanced webhooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from adapters.base import Inbound
from gateway.keys import SessionKey

__all__ = ["Batch", "RunningTurn", "RunningTurns", "StopCause"]

StopCause = Literal["stop", "interrupt"]


@dataclass
class RunningTurn:
    """A turn in progress: who asked, the task running its agent loop once it started, and why it was stopped."""

    user_id: str
    user_name: str
    task: asyncio.Task[Any] | None = None
    stopped: StopCause | None = None

    def attach(self, task: asyncio.Task[Any]) -> None:
        """The agent loop started in ``task``; a stop asked for before (during hygiene) applies now."""
        self.task = task
        if self.stopped is not None:
            task.cancel()

    def stop(self, cause: StopCause) -> None:
        """Cancel the turn: the loop closes its HTTP stream and ends with what it had (idempotent)."""
        if self.stopped is None:
            self.stopped = cause
        if self.task is not None and not self.task.done():
            self.task.cancel()


class RunningTurns:
    """The running turn of each busy session."""

    def __init__(self) -> None:
        self._turns: dict[SessionKey, RunningTurn] = {}

    def get(self, key: SessionKey) -> RunningTurn | None:
        """The running turn of ``key``, if any."""
        return self._turns.get(key)

    @contextlib.contextmanager
    def track(self, key: SessionKey, inbound: Inbound) -> Iterator[RunningTurn]:
        """Register the turn answering ``inbound`` for the block."""
        turn = RunningTurn(inbound.user_id, inbound.user_name)
        self._turns[key] = turn
        try:
            yield turn
        finally:
            if self._turns.get(key) is turn:
                del self._turns[key]


@dataclass
class Batch:
    """Messages of one sender gathered into one turn (``collect``): later ones join until it starts."""

    first: Inbound
    more: list[Inbound] = field(default_factory=list)
    last_added: float = field(default_factory=time.monotonic)
    started: bool = False
    # Set once the batch was handled; the senders of joined messages wait on it.
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, inbound: Inbound) -> None:
        """Join ``inbound`` (only before the batch started)."""
        self.more.append(inbound)
        self.last_added = time.monotonic()

    async def take(self, window_s: float) -> Inbound:
        """Wait until no message joined for ``window_s`` (a burst still being typed), then close the batch and
        return it as one message: the texts one per line, every attachment, answering the last message."""
        # A debounce: each joined message moves the deadline, so sleeping to it is the whole wait.
        while (quiet := time.monotonic() - self.last_added) < window_s:  # noqa: ASYNC110
            await asyncio.sleep(window_s - quiet)
        self.started = True
        if not self.more:
            return self.first
        parts = [self.first, *self.more]
        return dataclasses.replace(
            self.first, text="\n".join(p.text for p in parts if p.text),
            attachments=tuple(a for p in parts for a in p.attachments), message_id=parts[-1].message_id,
            mentions_bot=any(p.mentions_bot for p in parts), reply_to_bot=any(p.reply_to_bot for p in parts))
