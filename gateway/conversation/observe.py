"""Groups that remember (``gateway.group_history: observe``): every visible group line is stored in its session.

A line nobody addressed to the bot is appended to the session as a user message tagged with its speaker, so
it survives restarts, counts toward the hygiene thresholds between turns, and can be searched. Lines are
batched per session: the first line of a batch starts a timer of ``flush_seconds``; the batch is then written
in one transaction under the session's turn lock (so it never interleaves with a turn), and a busy channel
costs one transaction and one lock per batch, not per line. An addressed message flushes its session's batch
first (the router holds the lock then), so the transcript keeps the order people spoke in.

Each line is marked handled (the inbox) in its batch's own transaction, and `add` returns what resolves once
that transaction committed: until then the line stays where it came from — claimed in the inbox (Discord,
polled Telegram), or unconfirmed at its platform (a webhook answered only then) — so a worker that dies while
the line waits for its batch leaves it to be handled again, never lost. A line whose mark is stored already (an
earlier write, another worker) is not stored twice.

A failed write keeps the batch and retries it; a session's pending lines are capped (``max_pending``: the oldest
are given up with a warning, and handed back — `StorageUnavailable` — to be taken up again once storage is
back) so a long storage outage cannot exhaust memory. Shutdown flushes everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from gateway.conversation.session import LiveSession, SessionManager
from gateway.intake.keys import SessionKey
from gateway.store import Handled, StorageUnavailable

__all__ = ["GroupObserver"]

log = logging.getLogger(__name__)


@dataclass
class _Line:
    """One pending line: its handled mark, the message to store, and who waits for it to be stored."""

    mark: Handled
    message: dict[str, Any]
    stored: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def settle(self, error: BaseException | None = None) -> None:
        if self.stored.done():
            return
        if error is None:
            self.stored.set_result(None)
        else:
            self.stored.set_exception(error)
            self.stored.exception()  # handed back to its waiter, if any; never "never retrieved"


class GroupObserver:
    """Pending observed lines per session, and the tasks that write them."""

    def __init__(self, sessions: SessionManager, *, flush_seconds: float = 1.0, max_pending: int = 20_000) -> None:
        self.sessions = sessions
        self.flush_seconds = flush_seconds
        self.max_pending = max_pending
        self._pending: dict[SessionKey, list[_Line]] = {}
        self._speaker: dict[SessionKey, str] = {}
        self._writers: dict[SessionKey, asyncio.Task[None]] = {}
        self._now = asyncio.Event()  # set at shutdown: every writer flushes at once
        self.batches_written = 0

    def pending(self, key: SessionKey) -> int:
        """Lines of ``key`` not written yet."""
        return len(self._pending.get(key, ()))

    def add(self, key: SessionKey, line: dict[str, Any], user_id: str, mark: Handled) -> asyncio.Future[None]:
        """Keep ``line`` (the user message the inbound message ``mark`` names became) for ``key``'s next batch,
        written within ``flush_seconds``; what it returns resolves once the line is stored."""
        lines = self._pending.setdefault(key, [])
        pending = _Line(mark, line)
        lines.append(pending)
        if len(lines) > self.max_pending:
            dropped = lines[: len(lines) - self.max_pending]
            del lines[: len(dropped)]
            log.warning("session %s: over %d observed lines waiting for storage; the oldest %d are handed back to "
                        "be taken up again", key, self.max_pending, len(dropped))
            for old in dropped:
                old.settle(StorageUnavailable(f"observed line {old.mark.key} not stored: storage down too long"))
        self._speaker[key] = user_id
        if key not in self._writers:
            self._writers[key] = asyncio.create_task(self._write_soon(key), name=f"observe:{key}")
        return pending.stored

    async def flush_locked(self, key: SessionKey, live: LiveSession | None = None) -> int:
        """Write ``key``'s pending lines now, each with its handled mark; the caller holds the session's turn
        lock. Returns how many were stored (a line stored before, elsewhere, is not stored again)."""
        lines = self._pending.pop(key, None)
        if not lines:
            return 0
        try:
            if live is None:
                live = await self.sessions.open(key, self._speaker.get(key))
            counter = self.sessions.rt.counter
            counts = [counter.count_message(line.message) for line in lines]
            live.watermark, stored = await self.sessions.rt.store.messages.append_lines(
                live.id, [(line.mark, line.message) for line in lines], counts)
        except BaseException:
            self._pending[key] = lines + self._pending.get(key, [])  # kept for the next try
            raise
        messages, message_counts = [], []
        for line, count in zip(lines, counts, strict=True):
            if line.mark.key in stored:  # the first of the batch's copies of a line is the one stored
                stored.remove(line.mark.key)
                messages.append(line.message)
                message_counts.append(count)
            line.settle()
        live.messages, live.token_counts = [*live.messages, *messages], [*live.token_counts, *message_counts]
        live.stored(len(messages))
        self.batches_written += 1
        return len(messages)

    async def _write_soon(self, key: SessionKey) -> None:
        delay = self.flush_seconds
        try:
            while self._pending.get(key):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._now.wait(), delay)
                try:
                    async with self.sessions.rt.locks.session_turn(str(key)):
                        await self.flush_locked(key)
                    delay = self.flush_seconds
                except Exception as exc:
                    if self._now.is_set():
                        log.error("shutdown: %d observed lines of session %s were not stored (%s); they are "
                                  "handled again after the restart", self.pending(key), key, type(exc).__name__)
                        for line in self._pending.pop(key, []):
                            line.settle(StorageUnavailable(f"observed line {line.mark.key} not stored at shutdown"))
                        return
                    delay = min(delay * 2, 60.0)
                    log.warning("session %s: could not store %d observed lines (%s); retrying in %.0f s",
                                key, self.pending(key), type(exc).__name__, delay)
        finally:
            self._writers.pop(key, None)
            if key not in self._pending:
                self._speaker.pop(key, None)

    async def aclose(self) -> None:
        """Write every pending batch now (graceful shutdown); a write that fails is logged."""
        self._now.set()
        writers = list(self._writers.values())
        if writers:
            await asyncio.gather(*writers, return_exceptions=True)
