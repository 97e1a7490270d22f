"""One agent turn on a live session, and persisting what it produced.

The loop never touches the store. Compactions inside the turn are persisted as they happen (through the
loop's ``switch_session`` hook, so a rotation gives the rest of the turn its new session id); at the end the
turn's messages the store does not hold yet are appended. Appending never overwrites: whatever another process
stored meanwhile (its own turn, a sweep's compaction) stays, and this turn's messages follow it in order. Only
a turn that re-encoded images, and compacted nothing, replaces the active set as a whole — if that set is still
the one it read; otherwise it appends too.

A storage outage at the end of the turn is ridden out (`StorageGuard.run`): the answer is sent once the turn's
messages are stored, never before, and never lost.

A turn's answer is stored with the turn (`TurnAnswer`): written to the delivery ledger, pending — and the
inbound message marked handled — in the very transaction that appends the turn's messages.
A worker that dies before that transaction leaves nothing (a retry runs the turn afresh); one that dies after
it leaves the turn stored, the message marked handled and the answer pending: a retry finds the mark and does
not run the turn again, and the ledger's recovery sends the answer, once. A retry of that transaction after a
connection lost inside its COMMIT finds the mark too (`AlreadyStored`): the COMMIT went through, and the answer
it stored is the one sent.

A compaction inside the turn stores the turn's messages first (the request among them), as a progress step of
the inbound message (`Progress`) in the same transaction. A worker that dies after that leaves the request
stored: the retry resumes the turn from the stored session instead of storing the request a second time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.base import Outbound
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
from gateway.conversation.compaction import follow_stored, persist_compaction, stored_records
from gateway.conversation.engine_state import export_engine_state, restore_engine_state
from gateway.conversation.session import LiveSession, SessionManager
from gateway.delivery.delivery import MarkedAnswer
from gateway.intake.durability import is_storage_outage
from gateway.ops.faults import crash_point
from gateway.ops.metrics import EVENT_COMPRESS_ABORTED
from gateway.store import AlreadyStored, EngineState, Handled, Progress, SessionEnded, StaleWatermark

__all__ = ["TurnAnswer", "agent_turn", "persist_turn"]

log = logging.getLogger(__name__)

REWRITE_REASON = "history rewritten by the agent"


@dataclass(kw_only=True)
class TurnAnswer(MarkedAnswer):
    """How a turn's end is stored (see the module docstring): `MarkedAnswer` with ``compose``, which makes the
    answer to send from the result (None: nothing to send), and ``progress``, how many of the turn's messages
    its earlier attempts stored ahead of its end (a compaction's steps). `agent_turn` fills in ``out`` and,
    once the turn is stored, ``delivery_id``."""

    compose: Callable[[TurnResult], Outbound | None]
    progress: int = 0

    def step(self, stored: int) -> Progress:
        """The progress step that stores ``stored`` more of the turn's messages ahead of its end."""
        return Progress(self.handled.key, self.handled.platform, self.handled.session_key, self.progress,
                        self.progress + stored)


async def agent_turn(
    sessions: SessionManager,
    live: LiveSession,
    message: str | dict[str, Any] | None,
    *,
    notices: NoticeSink | None = None,
    events: EventSink | None = None,
    stream: TurnStream | None = None,
    on_start: Callable[[asyncio.Task[TurnResult]], None] | None = None,
    answer: TurnAnswer | None = None,
    hold_compaction: bool = False,
) -> TurnResult:
    """Run the agent on ``message`` and persist the outcome; the caller holds the session's turn lock. None
    resumes a turn whose request an earlier attempt stored (``live`` holds it).

    With ``stream`` the model's answer is streamed to it as it arrives (and tool rounds show a status).
    ``on_start`` receives the task running the agent loop: cancelling it (``/stop``) ends the turn cleanly,
    and what it produced is still persisted, which a cancellation must never interrupt. ``answer`` is stored
    with the turn, in the same transaction. ``hold_compaction``: a compaction of the session runs elsewhere
    and the request fits as it stands (`AgentLoop.hold_compaction`)."""
    loop = live.loop
    guard = sessions.rt.storage
    saved = 0  # how many of the turn's appended messages a compaction persisted during the turn holds

    async def switch(compaction: Compaction) -> str:
        nonlocal saved
        # The turn's messages are stored before the compaction (so it never holds the only copy of one): held
        # through an outage, since what follows depends on whether they were.
        kept, in_order = await guard.run(lambda: _store_unstored(sessions, live, list(compaction.replaced), answer),
                                         f"the turn's messages in session {live.id} are held until they are stored")
        if not in_order:
            # Another process wrote between the rows this compaction was computed from: storing it would
            # archive that write unseen. The turn goes on with its compacted list; the next one compacts.
            log.info("session %s changed during the turn; its compaction is not stored", live.id)
            if kept:
                saved = compaction.appended
            return live.id
        try:
            stored = await persist_compaction(sessions, live, compaction.result, f"agent: {compaction.trigger}")
        except Exception as exc:
            if not is_storage_outage(exc):
                raise
            # The compacted list only shapes what the model sees for the rest of this turn; the turn's own
            # messages are stored already, so nothing depends on storing it now.
            guard.failed(exc, f"the turn's compaction of session {live.id} is skipped")
            if kept:  # still in view
                saved = compaction.appended
            return live.id
        # Stored whole before the compaction, the turn's messages count as saved while they are in view: also
        # after another process's compaction won, unless that one took them out of view (a rotation).
        if stored or (kept and all(message in live.messages for message in kept)):
            saved = compaction.appended
        live.engine.number_messages(live.first_seq)  # numbers of the stored set as it is now
        return live.id

    async def records() -> Sequence[str | None]:
        # What the engine prepared for each stored message, for a compaction in the turn to adopt. Records only
        # spare work: an outage reading them costs that work, not the turn.
        try:
            return await stored_records(sessions.rt, live.id, live.watermark, len(live.messages))
        except Exception as exc:
            if not is_storage_outage(exc):
                raise
            log.warning("the prepared records of session %s could not be read (%s); its compaction finds them anew",
                        live.id, type(exc).__name__)
            return ()

    async def notice(sent: Notice) -> None:
        # The loop reports a compression that gave up only as this notice (once per turn), so it is turned
        # into the event the metrics count here; which trigger it was is not known.
        if sent.kind is NoticeKind.COMPRESSION_ABORTED:
            await emit_event(events, AgentEvent(EVENT_COMPRESS_ABORTED, loop.session_id, {"reason": "agent"}))
        await emit_notice(notices, sent)

    loop.notices, loop.events, loop.switch_session, loop.stream = notice, events, switch, stream
    loop.hold_compaction, loop.stored_records = hold_compaction, records
    live.engine.number_messages(live.first_seq)
    try:
        running = asyncio.create_task(loop.run_turn(live.messages, message, token_counts=live.held_counts))
        if on_start is not None:
            on_start(running)
        result = await running
    finally:
        loop.notices = loop.events = loop.switch_session = loop.stream = loop.stored_records = None
        loop.hold_compaction = False
    if answer is not None:
        answer.out = answer.compose(result)

    async def store() -> None:
        if answer is None:
            await persist_turn(sessions, live, result, saved=saved)
        elif not await answer.write(live.id, lambda handled: persist_turn(sessions, live, result, saved=saved,
                                                                          handled=handled)):
            # Stored already (a COMMIT that went through unseen, or another handling): not stored twice.
            log.warning("the turn of message %s in session %s was stored already; not stored again",
                        answer.handled.key, live.id)
            await guard.run(lambda: _reread(sessions, live), f"reloading session {live.id}")

    await guard.run(store, f"the turn of session {live.id} is held until it is stored")
    return result


async def _store_unstored(sessions: SessionManager, live: LiveSession, replaced: list[dict[str, Any]],
                          answer: TurnAnswer | None) -> tuple[list[dict[str, Any]], bool]:
    """Append what this turn added before a compaction (the new message, tool results), so the compaction
    archives it with the rest: a message it clips or summarizes stays stored whole and searchable. With
    ``answer`` the append is a progress step of the inbound message, so a retry neither stores it twice
    (`AlreadyStored`: it committed unseen) nor asks the request again (the retry resumes the turn).

    Returns the rows stored (none when nothing is new or the turn rewrote history: its end appends as usual)
    and whether the compaction may be stored: False when another process wrote in between (``live`` is
    re-read then).
    """
    stored = live.messages
    if len(replaced) <= len(stored) or replaced[: len(stored)] != stored:
        return [], True
    new = replaced[len(stored):]
    rt = sessions.rt
    step = answer.step(len(new)) if answer is not None else None
    try:
        last = await rt.store.messages.append(live.id, new, [rt.counter.count_message(m) for m in new],
                                              progress=step)
    except SessionEnded:
        return [], True
    except AlreadyStored as already:
        assert answer is not None and step is not None
        await rt.storage.run(lambda: _reread(sessions, live), f"reloading session {live.id}")
        if already.handling.handled or already.handling.progress != step.to:
            log.warning("message %s was handled elsewhere meanwhile; this turn's messages are not stored ahead "
                        "of its end", answer.handled.key)
            return [], False
        answer.progress = step.to  # stored by this attempt, whose COMMIT's answer was lost
        return new, False
    if answer is not None and step is not None:
        answer.progress = step.to
        crash_point("request-stored")
    if last == live.watermark + len(new):
        live.messages, live.watermark = stored + new, last
        live.stored(len(new))
        return new, True
    await rt.storage.run(lambda: _reread(sessions, live), f"reloading session {live.id}")
    return new, False


async def persist_turn(sessions: SessionManager, live: LiveSession, result: TurnResult, *, saved: int = 0,
                       handled: Handled | None = None) -> None:
    """Store what the turn added and save the engine state, with ``handled`` (the inbound message marked
    handled, its answer written to the delivery ledger) in the same transaction.

    ``saved`` is how many of ``result.appended`` the store already holds (inside a compaction persisted during
    the turn). Never raises `StaleWatermark`. Safe to repeat after a storage error: each write is one
    transaction, and the reads after a committed write are retried on their own, so a repeat never writes
    twice (short of a connection lost inside COMMIT itself, when the driver cannot know either).
    """
    state = export_engine_state(live.engine, live.last_compaction)
    if result.images_reencoded and not result.compacted and await _replace_rewritten(sessions, live, result, state,
                                                                                     handled):
        return
    new = result.appended[saved:]
    if new:
        if not await _append(sessions, live, new, state, handled):
            return
    else:
        await sessions.rt.store.sessions.save_engine_state(live.id, state, handled=handled)
    live.record = dataclasses.replace(live.record, engine=state)
    live.synced_state = state


async def _replace_rewritten(sessions: SessionManager, live: LiveSession, result: TurnResult,
                             state: EngineState, handled: Handled | None) -> bool:
    """Make the turn's re-encoded list the active set if that set is still the one the turn read."""
    rt = sessions.rt
    counts = [rt.counter.count_message(m) for m in result.messages]
    try:
        await rt.store.compactions.replace_active(live.id, result.messages, counts, live.watermark,
                                                  reason=REWRITE_REASON, engine_state=state, handled=handled)
    except (StaleWatermark, SessionEnded):
        # Replacing now would archive what another process stored meanwhile; the re-encoding is only an
        # optimisation (the next turn re-encodes again), the turn's messages are what must not be lost.
        log.info("session %s changed during a turn that re-encoded images; appending its messages instead",
                 live.id)
        return False
    log.info("session %s: the turn re-encoded images; replacing the active set", live.id)
    await rt.storage.run(lambda: _reread(sessions, live), f"reloading session {live.id}")
    live.record = dataclasses.replace(live.record, engine=state)
    live.synced_state = state
    return True


async def _append(sessions: SessionManager, live: LiveSession, new: list[dict[str, Any]],
                  state: EngineState, handled: Handled | None) -> bool:
    """Append ``new`` to the session — or, if it was ended meanwhile, to the chat's open session; False when
    another process wrote meanwhile (its engine state stands and ``live`` has been re-read)."""
    rt = sessions.rt
    counts = [rt.counter.count_message(m) for m in new]
    try:
        last = await rt.store.messages.append(live.id, new, counts, engine_state=state,
                                              state_watermark=live.watermark, handled=handled,
                                              prepared=live.take_prepared())
    except SessionEnded:
        ended = live.id
        await follow_stored(sessions, live)
        log.warning("session %s was ended during a turn; its messages go to the chat's open session %s",
                    ended, live.id)
        last = await rt.store.messages.append(live.id, new, counts, handled=handled)
    if last == live.watermark + len(new):
        live.messages, live.token_counts, live.watermark = live.messages + new, live.token_counts + counts, last
        live.stored(len(new))
    else:
        # Another process wrote meanwhile: take its rows, in stored order, and the engine state it saved.
        await rt.storage.run(lambda: _reread(sessions, live), f"reloading session {live.id}")
        restore_engine_state(live.engine, live.record.engine)
        return False
    return True


async def _reread(sessions: SessionManager, live: LiveSession) -> None:
    """After a committed write: the active set and the row as stored (reads only, so safe to retry alone)."""
    await sessions.reload(live)
    await sessions.refresh_record(live)
