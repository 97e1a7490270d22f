"""Groups that remember (``gateway.group_history: observe``): every visible group line is stored in its session.

A line nobody addressed to the bot is appended to the session as a user message tagged with its speaker, so
it survives restarts, counts toward the hygiene thresholds between turns, and can be searched. Lines are
batched per session: the first line of a batch starts a timer of ``flush_seconds``; the batch is then written
in one transaction under the session's turn lock (so it never interleaves with a turn), and a busy channel
costs one transaction and one lock per batch, not per line. An addressed message flushes its session's batch
first (the router holds the lock then), so the transcript keeps the order people spoke in.

A failed write keeps the batch and retries it; a session's pending lines are capped (``max_pending``, the
oldest dropped with a warning) so a long storage outage cannot exhaust memory. Shutdown flushes everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from gateway.keys import SessionKey
from gateway.session import LiveSession, SessionManager

__all__ = ["GroupObserver"]

log = logging.getLogger(__name__)


class GroupObserver:
    """Pending observed lines per session, and the tasks that write them."""

    def __init__(self, sessions: SessionManager, *, flush_seconds: float = 1.0, max_pending: int = 20_000) -> None:
        self.sessions = sessions
        self.flush_seconds = flush_seconds
        self.max_pending = max_pending
        self._pending: dict[SessionKey, list[dict[str, Any]]] = {}
        self._speaker: dict[SessionKey, str] = {}
        self._writers: dict[SessionKey, asyncio.Task[None]] = {}
        self._now = asyncio.Event()  # set at shutdown: every writer flushes at once
        self.batches_written = 0

    def pending(self, key: SessionKey) -> int:
        """Lines of ``key`` not written yet."""
        return len(self._pending.get(key, ()))

    def add(self, key: SessionKey, line: str, user_id: str) -> None:
        """Keep ``line`` for ``key``'s next batch (written within ``flush_seconds``)."""
        lines = self._pending.setdefault(key, [])
        lines.append({"role": "user", "content": line})
        if len(lines) > self.max_pending:
            del lines[: len(lines) - self.max_pending]
            log.warning("session %s: over %d observed lines waiting for storage; dropping the oldest",
                        key, self.max_pending)
        self._speaker[key] = user_id
        if key not in self._writers:
            self._writers[key] = asyncio.create_task(self._write_soon(key), name=f"observe:{key}")

    async def flush_locked(self, key: SessionKey, live: LiveSession | None = None) -> int:
        """Write ``key``'s pending lines now; the caller holds the session's turn lock. Returns how many."""
        lines = self._pending.pop(key, None)
        if not lines:
            return 0
        try:
            if live is None:
                live = await self.sessions.open(key, self._speaker.get(key))
            counter = self.sessions.rt.counter
            counts = [counter.count_message(m) for m in lines]
            live.watermark = await self.sessions.rt.store.messages.append(live.id, lines, counts)
        except BaseException:
            self._pending[key] = lines + self._pending.get(key, [])  # kept for the next try
            raise
        live.messages, live.token_counts = [*live.messages, *lines], [*live.token_counts, *counts]
        live.stored(len(lines))
        self.batches_written += 1
        return len(lines)

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
                        log.error("shutdown: %d observed lines of session %s were not stored (%s)",
                                  self.pending(key), key, type(exc).__name__)
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
