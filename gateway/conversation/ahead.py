"""Compaction ahead of need: the summary call runs after an answer was sent, while nobody waits.

After each delivered answer the router asks `AheadCompactions.consider`: a session past its soft mark
(`agent.compression.pacing`) is compacted in a task of its own. That task holds the session's compression lock
— never its turn lock, so the session's next messages are handled meanwhile — and works on what the store
holds: it reads the active set with its watermark, summarizes with an engine of its own (restored from the
stored state), and writes the result in one transaction (`store_compaction`), which carries the rows appended
after the watermark over after the new set, in order. A compaction stored elsewhere meanwhile (a turn's own, an
erasure) wins: ours is dropped, the next answer tries again. Nothing is written before that transaction, so a
compaction that fails, is cancelled at shutdown or dies with its process loses nothing.

A message arriving while a compaction of its session runs — here, or on another worker (the lock says so) — is
answered from the context as it stands when its request fits the window (`before_turn`: the turn's own
threshold compactions hold off); otherwise it waits for that compaction and runs on its result. The threshold,
hygiene, the guard before every request and overflow recovery are unchanged underneath, and ``/compress`` still
compacts at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from agent.compaction_steps import before_compaction
from agent.compression.engine import CompressionResult
from agent.compression.pacing import SOFT_MARK_MIN_SHARE, ahead_due, min_turns_between, turn_tokens
from agent.compression.threshold import output_reserve, request_room
from agent.events import EVENT_COMPRESS, AgentEvent, EventSink, emit_event
from agent.lru import LruCache
from agent.memory import MemoryProvider
from agent.turn import Compaction
from gateway.config import Settings, summary_deadline_seconds
from gateway.conversation.compaction import (
    LOST_RACE,
    store_compaction,
    stored_counts,
    stored_preparations,
    system_message,
)
from gateway.conversation.engine_state import restore_engine_state
from gateway.conversation.hygiene import session_tokens
from gateway.conversation.session import LiveSession, SessionManager
from gateway.intake.keys import SessionKey
from gateway.intake.locks import LockBackend
from gateway.ops.faults import crash_point
from gateway.ops.metrics import EVENT_COMPRESS_ABORTED
from gateway.store import CompactionInfo, SessionEnded, StaleWatermark

__all__ = ["AHEAD_REASON", "AheadCompactions", "compaction_ended", "compaction_wait_s", "conversation_pace",
           "turns_since_compaction"]

log = logging.getLogger(__name__)

AHEAD_REASON = "ahead of need"
# How often a message waiting for another worker's compaction asks whether it ended.
_WAIT_POLL_S = 0.1
# Beyond the summary's own deadline, what a waiting message allows the compaction for storing its result.
_WAIT_MARGIN_S = 10.0
_RETRY_ENTRIES = 10_000


def turns_since_compaction(messages: Sequence[Mapping[str, Any]], last: CompactionInfo | None) -> int | None:
    """User messages appended after the last compaction (None: no compaction, or one stored before the store
    recorded where its active set ended)."""
    if last is None or last.active_after is None:
        return None
    return sum(1 for m in messages[last.active_after:] if m.get("role") == "user")


def conversation_pace(messages: Sequence[Mapping[str, Any]], counts: Sequence[int],
                      last: CompactionInfo | None) -> tuple[int | None, int]:
    """(turns since the last compaction, or None as `turns_since_compaction` says; the tokens a turn added, on
    average, over those turns — or over the whole stored set when there are none to measure)."""
    turns = turns_since_compaction(messages, last)
    start = last.active_after if last is not None and last.active_after is not None and turns else 0
    measured = turns if start else sum(1 for m in messages if m.get("role") == "user")
    return turns, turn_tokens(counts[start:], measured)



def compaction_wait_s(settings: Settings) -> float:
    """How long a message (or /compress) waits at most for a compaction of its session that is running: the
    summary's deadline and a margin."""
    return summary_deadline_seconds(settings) + _WAIT_MARGIN_S


async def compaction_ended(locks: LockBackend, session_id: str, bound_s: float) -> bool:
    """Wait while a compaction of ``session_id`` runs in any worker (asking the lock backend), at most
    ``bound_s``; whether it ended."""
    deadline = time.monotonic() + bound_s
    while await locks.compression_running(session_id):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_WAIT_POLL_S)
    return True

@dataclass(frozen=True)
class _Job:
    """What a compaction ahead of need takes from the live session when it is started."""

    session_id: str
    key: SessionKey
    system_prompt: str
    schemas: list[dict[str, Any]]
    memory: MemoryProvider
    context_length: int
    threshold_tokens: int


class AheadCompactions:
    """The compactions ahead of need this process runs, at most one per session (and one per session across
    workers: the compression lock)."""

    def __init__(self, sessions: SessionManager, events: EventSink | None = None) -> None:
        self.sessions = sessions
        self._events = events
        self._running: dict[str, asyncio.Task[None]] = {}
        # Session id → the watermark a failed compaction ahead of need waits for before the next try (the
        # threshold's own compaction, in the turn, stays the safety net meanwhile); bounded like every cache.
        self._retry_at: LruCache[str, int] = LruCache(_RETRY_ENTRIES)

    def running(self, session_id: str) -> bool:
        """Whether this process runs a compaction ahead of need of ``session_id`` now."""
        return session_id in self._running

    def consider(self, live: LiveSession) -> bool:
        """After an answer in ``live`` was delivered: start compacting it in the background when one is due;
        whether one started. Its summary calls are charged to whoever the caller's context names."""
        compression = self.sessions.rt.settings.compression
        engine = live.engine
        if not (compression.enabled and compression.ahead_of_need) or live.id in self._running \
                or live.watermark < (self._retry_at.get(live.id) or 0) or engine.threshold_tokens <= 0:
            return False
        held = live.held_counts
        if held is None:
            return False
        if not ahead_due(self._request_tokens(live), engine.threshold_tokens,
                         *conversation_pace(live.messages, held, live.last_compaction)):
            return False
        job = _Job(live.id, live.key, live.system_prompt, live.loop.schemas(), live.memory, engine.context_length,
                   engine.threshold_tokens)
        task = asyncio.create_task(self._run(job, live.watermark), name=f"ahead-compaction:{live.id}")
        self._running[live.id] = task
        task.add_done_callback(lambda _: self._running.pop(job.session_id, None))
        return True

    def _request_tokens(self, live: LiveSession) -> int:
        """The next request's size as stored: the larger of the server's last figure (which the answer since
        does not include) and an exact count of the stored messages, system prompt and tool schemas."""
        held = live.held_counts
        counted, _ = session_tokens(0, live.messages, self.sessions.rt.counter, system=live.system_prompt,
                                    tools=live.loop.schemas(), message_tokens=None if held is None else sum(held))
        return max(live.engine.last_prompt_tokens, counted)

    async def before_turn(self, key: SessionKey, live: LiveSession, user_id: str, incoming_tokens: int, *,
                          waiting: Callable[[], AbstractAsyncContextManager[None]] | None = None,
                          ) -> tuple[LiveSession, bool]:
        """Before a turn in ``live`` adding ``incoming_tokens``: the session to run it on, and whether its own
        threshold compactions hold off because a compaction of the session is running (`AgentLoop.hold_compaction`).

        None running: ``(live, False)``. One running, and the request fits the window as it stands:
        ``(live, True)`` — answered now. Otherwise the turn waits for that compaction (at most its summary's
        deadline and a margin), inside ``waiting`` (the chat's typing indicator), and runs on what is stored
        then."""
        rt = self.sessions.rt
        if not rt.settings.compression.enabled:
            return live, False
        here, tokens = self._running.get(live.id), self._request_tokens(live)
        # Only a session past its soft mark can be compacted ahead of need (its size only grows until that
        # compaction is stored): below it, no lock backend round trip on a message's path.
        if here is None and (tokens < live.engine.threshold_tokens * SOFT_MARK_MIN_SHARE
                             or not await rt.locks.compression_running(live.id)):
            return live, False
        if self._fits(live, tokens + incoming_tokens):
            return live, True
        log.info("a message in session %s waits for the compaction of the session that is running: its request "
                 "would not fit the window as it stands", live.id)
        started = time.monotonic()
        async with waiting() if waiting is not None else contextlib.nullcontext():
            await self._wait(live.id, here, compaction_wait_s(rt.settings))
        log.info("session %s: the message waited %.1f s for the compaction", live.id, time.monotonic() - started)
        return await self.sessions.open(key, user_id), False

    @staticmethod
    def _fits(live: LiveSession, tokens: int) -> bool:
        """Whether a request of ``tokens`` leaves the answer its reserve in ``live``'s window."""
        window = live.engine.context_length
        return request_room(window, tokens) >= (output_reserve(live.loop.max_tokens, window) or 0)

    async def _wait(self, session_id: str, here: asyncio.Task[None] | None, bound_s: float) -> None:
        if here is not None:
            await asyncio.wait({here}, timeout=bound_s)
        elif not await compaction_ended(self.sessions.rt.locks, session_id, bound_s):
            log.warning("session %s: the compaction running elsewhere did not end within %.0f s; the message goes "
                        "on without it", session_id, bound_s)

    async def aclose(self) -> None:
        """Cancel the compactions still running (nothing of theirs is stored) and wait until they ended."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        if tasks:
            # Bounded: a cancellation swallowed by a Redis call in flight (`gateway.intake.background`) must not hang
            # the shutdown; the lock's expiry frees what such a task held.
            await asyncio.wait(tasks, timeout=5.0)

    async def _run(self, job: _Job, seen_at: int) -> None:
        rt = self.sessions.rt
        try:
            async with rt.locks.try_compression_lock(job.session_id) as ours:
                if not ours:
                    log.info("session %s is being compacted elsewhere; no compaction ahead of need here",
                             job.session_id)
                    return
                result = await self._compact(job)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("compaction ahead of need of session %s failed (%s: %s); nothing was stored, the "
                        "threshold's compaction stays the safety net", job.session_id, type(exc).__name__, exc)
        else:
            if result is None or result.compressed or result.reason == LOST_RACE:
                self._retry_at.put(job.session_id, 0)
                return
        # Failed, or did nothing: tried again once the conversation grew by a few turns, not after every answer.
        self._retry_at.put(job.session_id, seen_at + 2 * min_turns_between(job.threshold_tokens))

    async def _compact(self, job: _Job) -> CompressionResult | None:
        """Compact the session as stored now, if it is still due; the result (None: not due any more)."""
        rt = self.sessions.rt
        record = await rt.store.sessions.get(job.session_id)
        if record is None or not record.active:
            return None
        active = await rt.store.messages.load_active(job.session_id)
        engine = rt.new_engine()
        if job.key.is_group:
            engine.summary_template = "group"
        restore_engine_state(engine, record.engine)
        lower = getattr(engine, "lower_context_length", None)
        if callable(lower) and job.context_length < engine.context_length:
            lower(job.context_length)  # the window the session's own engine follows now
        counter = rt.counter
        tokens = counter.count_request(active.messages, system=job.system_prompt, tools=job.schemas,
                                       message_tokens=sum(active.token_counts))
        # Decided again on what is stored: another worker may have compacted it since the answer was sent.
        if not ahead_due(tokens, engine.threshold_tokens,
                         *conversation_pace(active.messages, active.token_counts, record.engine.last_compaction)):
            return None
        framed = [system_message(job.system_prompt), *active.messages]
        counts = stored_counts(counter, engine, job.system_prompt, active.token_counts)
        # Cut as the threshold's compaction would, so that the next one is as far away (`agent.compression.plan`).
        ahead = {"ahead_of_need": True} if getattr(engine, "accepts_ahead_of_need", False) else {}
        engine.set_request_overhead(counter.count_tools(job.schemas))
        engine.on_session_start(job.session_id, framed)
        engine.number_messages(active.watermark - len(active.messages) + 1)
        await before_compaction(engine, job.memory, framed, force=False, notices=None, announce=False, **counts)
        prepared = await stored_preparations(rt, engine, job.session_id, active.watermark, len(active.messages))
        result = await engine.compress(framed, current_tokens=tokens, **counts, **ahead, **prepared)
        if not result.compressed:
            log.info("compaction ahead of need of session %s did nothing: %s", job.session_id, result.reason)
            if result.aborted:
                await emit_event(self._events, AgentEvent(EVENT_COMPRESS_ABORTED, job.session_id,
                                                          {"reason": AHEAD_REASON}))
            return result
        crash_point("ahead-summarized")
        try:
            child = await store_compaction(rt, job.session_id, active.watermark, result, AHEAD_REASON, engine)
        except (StaleWatermark, SessionEnded) as lost:
            log.info("session %s was compacted or ended elsewhere meanwhile (%s); that version stands",
                     job.session_id, type(lost).__name__)
            return CompressionResult(result.messages, False, result.messages_before, result.messages_after,
                                     result.tokens_before, result.tokens_after, reason=LOST_RACE)
        new_id = child.id if child is not None else job.session_id
        log.info("session %s compacted ahead of need: %d → %d messages, %d → %d tokens", job.session_id,
                 result.messages_before, result.messages_after, result.tokens_before, result.tokens_after)
        compaction = Compaction(AHEAD_REASON, result, job.system_prompt, job.session_id, new_id)
        await emit_event(self._events, AgentEvent(EVENT_COMPRESS, new_id, {"compaction": compaction,
                                                                           "result": result}))
        return result
