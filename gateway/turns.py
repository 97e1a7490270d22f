"""One agent turn on a live session, and persisting what it produced.

The loop never touches the store. Compactions inside the turn are persisted as they happen (through the
loop's ``switch_session`` hook, so a rotation gives the rest of the turn its new session id); at the end the
messages the store does not have yet are appended. If the turn rewrote history some other way (images
re-encoded after an "image too large" error), the active set is replaced as a whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from agent.events import (
    AgentEvent,
    EventSink,
    Notice,
    NoticeKind,
    NoticeSink,
    TurnStream,
    emit_event,
    emit_notice,
)
from agent.turn import Compaction, TurnResult
from gateway.compaction import persist_compaction
from gateway.engine_state import export_engine_state
from gateway.metrics import EVENT_COMPRESS_ABORTED
from gateway.session import LiveSession, SessionManager

__all__ = ["agent_turn", "persist_turn"]

log = logging.getLogger(__name__)

REWRITE_REASON = "history rewritten by the agent"


async def agent_turn(
    sessions: SessionManager,
    live: LiveSession,
    message: str | dict[str, Any],
    *,
    notices: NoticeSink | None = None,
    events: EventSink | None = None,
    stream: TurnStream | None = None,
    on_start: Callable[[asyncio.Task[TurnResult]], None] | None = None,
) -> TurnResult:
    """Run the agent on ``message`` and persist the outcome; the caller holds the session's turn lock.

    With ``stream`` the model's answer is streamed to it as it arrives (and tool rounds show a status).
    ``on_start`` receives the task running the agent loop: cancelling it (``/stop``) ends the turn cleanly,
    and what it produced is still persisted, which a cancellation must never interrupt."""
    loop = live.loop

    async def switch(compaction: Compaction) -> str:
        await _store_unstored(sessions, live, list(compaction.replaced))
        return await persist_compaction(sessions, live, compaction.result, f"agent: {compaction.trigger}")

    async def notice(sent: Notice) -> None:
        # The loop reports a compression that gave up only as this notice (once per turn), so it is turned
        # into the event the metrics count here; which trigger it was is not known.
        if sent.kind is NoticeKind.COMPRESSION_ABORTED:
            await emit_event(events, AgentEvent(EVENT_COMPRESS_ABORTED, loop.session_id, {"reason": "agent"}))
        await emit_notice(notices, sent)

    loop.notices, loop.events, loop.switch_session, loop.stream = notice, events, switch, stream
    try:
        running = asyncio.create_task(loop.run_turn(live.messages, message))
        if on_start is not None:
            on_start(running)
        result = await running
    finally:
        loop.notices = loop.events = loop.switch_session = loop.stream = None
    await persist_turn(sessions, live, result)
    return result


async def _store_unstored(sessions: SessionManager, live: LiveSession, replaced: list[dict[str, Any]]) -> None:
    """Append what this turn added before a compaction (the new message, tool results), so the compaction
    archives it with the rest: a message it clipped or summarized stays stored whole and searchable."""
    stored = live.messages
    if len(replaced) <= len(stored) or replaced[: len(stored)] != stored:
        return
    new = replaced[len(stored):]
    rt = sessions.rt
    live.watermark = await rt.store.messages.append(live.id, new, [rt.counter.count_message(m) for m in new])
    live.messages = stored + new


async def persist_turn(sessions: SessionManager, live: LiveSession, result: TurnResult) -> None:
    """Bring the store up to ``result.messages`` and save the engine state."""
    rt = sessions.rt
    stored = live.messages
    state = export_engine_state(live.engine, live.last_compaction)
    if result.messages[: len(stored)] == stored:
        new = result.messages[len(stored):]
        if new:
            live.watermark = await rt.store.messages.append(
                live.id, new, [rt.counter.count_message(m) for m in new], engine_state=state)
            live.messages = stored + new
        else:
            await rt.store.sessions.save_engine_state(live.id, state)
    else:
        log.info("session %s: the turn rewrote history; replacing the active set", live.id)
        counts = [rt.counter.count_message(m) for m in result.messages]
        await rt.store.compactions.replace_active(live.id, result.messages, counts, live.watermark,
                                                  reason=REWRITE_REASON, engine_state=state)
        await sessions.reload(live)
        await sessions.refresh_record(live)
    live.record = dataclasses.replace(live.record, engine=state)
    live.synced_state = state
