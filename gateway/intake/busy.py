"""What happens while a session is busy: the running turn (so ``/stop`` and ``interrupt`` can cancel it) and
the messages ``collect`` mode gathers into one turn (``gateway.busy_mode``).

Both maps hold only sessions with work in flight, so they are bounded by concurrent work. They are
per-process; each running turn is also announced through a `gateway.intake.stops.StopRelay`, so a ``/stop`` that
another worker received reaches it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from adapters.base import Inbound
from gateway.intake.keys import SessionKey

if TYPE_CHECKING:
    from gateway.intake.stops import StopRelay

__all__ = ["Batch", "RunningTurn", "RunningTurns", "StopCause", "StopOutcome"]

StopCause = Literal["stop", "interrupt"]


class StopOutcome(enum.Enum):
    """What a /stop did: stopped the running turn, was refused (another sender's answer), found nothing
    running, or could not reach the worker running it."""

    STOPPED = "stopped"
    NOT_YOURS = "not_yours"
    NOTHING = "nothing"
    UNREACHABLE = "unreachable"


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

    def request_stop(self, user_id: str, admin: bool, cause: StopCause = "stop") -> StopOutcome:
        """/stop (or, with ``cause`` "interrupt", a newer message) from ``user_id``: only the sender of the
        running answer or an admin may stop it."""
        if self.stopped is not None:
            return StopOutcome.NOTHING
        if self.user_id != user_id and not admin:
            return StopOutcome.NOT_YOURS
        self.stop(cause)
        return StopOutcome.STOPPED


class RunningTurns:
    """The running turn of each busy session; each is announced through ``relay`` while it runs."""

    def __init__(self, relay: StopRelay | None = None) -> None:
        self._turns: dict[SessionKey, RunningTurn] = {}
        self._relay = relay
        self._forwarding: set[asyncio.Task[Any]] = set()

    def get(self, key: SessionKey) -> RunningTurn | None:
        """The running turn of ``key``, if any."""
        return self._turns.get(key)

    def interrupt(self, key: SessionKey, user_id: str) -> None:
        """``interrupt`` busy mode: a newer message from ``user_id``, the sender of ``key``'s running answer,
        stops it — here at once, or through the relay on the worker running it (a load balancer may have sent
        the two messages to two workers). The request travels in the background: the new message takes its
        place in the session's order meanwhile."""
        running = self._turns.get(key)
        if running is not None:
            running.request_stop(user_id, False, "interrupt")
        elif self._relay is not None:
            task = asyncio.create_task(self._relay.forward(str(key), user_id, False, "interrupt"),
                                       name=f"interrupt:{key}")
            self._forwarding.add(task)  # held until done: the loop keeps only weak references to tasks
            task.add_done_callback(self._forwarding.discard)

    @contextlib.asynccontextmanager
    async def track(self, key: SessionKey, inbound: Inbound) -> AsyncIterator[RunningTurn]:
        """Register the turn answering ``inbound`` for the block."""
        turn = RunningTurn(inbound.user_id, inbound.user_name)
        self._turns[key] = turn
        try:
            if self._relay is None:
                yield turn
            else:
                async with self._relay.watching(str(key), turn):
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
