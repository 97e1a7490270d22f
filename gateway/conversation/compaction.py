"""Compressing a stored session and persisting the result (R-S2…R-S4), for hygiene, /compress and the agent.

`persist_compaction` is the one place a compressed list reaches the store: in place (``replace_active``
with the watermark the list was computed from) or by rotation to a child session. Then the session is
re-bound: the system prompt rebuilt (byte-identical: no compaction changes it, R-K2), and
``last_prompt_tokens = −1`` (waiting for real usage). The agent loop calls it through its ``switch_session``
hook and notifies the engine and memory itself; `compress_session` (hygiene, /compress, sweeps) does those
notifications here, so both paths end the same way.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.compaction_steps import after_compaction, before_compaction, compress_with_progress
from agent.compression.engine import CompressionResult, ContextEngine
from agent.events import (
    AgentEvent,
    EventSink,
    NoticeSink,
    aborted_notice,
    emit_event,
    emit_notice,
)
from agent.tokens import TokenCounter
from agent.turn import Compaction
from gateway.conversation.engine_state import compaction_info, export_engine_state, restore_engine_state
from gateway.conversation.hygiene import HygieneCheck, check_hygiene, session_tokens
from gateway.conversation.session import LiveSession, SessionManager
from gateway.ops.metrics import EVENT_COMPRESS_ABORTED
from gateway.runtime import Runtime
from gateway.store import SessionEnded, SessionRecord, StaleWatermark

__all__ = ["HygieneOutcome", "compress_session", "engine_inputs", "follow_stored", "framed", "hygiene_check",
           "persist_compaction", "run_hygiene", "store_compaction", "stored_counts", "stored_records", "system_message"]

log = logging.getLogger(__name__)

SKIP_LOCKED = "compression lock held by another worker"
SKIP_DISABLED = "compression disabled (compression.enabled: false)"
SKIP_BLOCKED = "engine blocked (recent compressions were ineffective)"
LOST_RACE = "compacted elsewhere meanwhile"


def _without_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return messages[1:] if messages and messages[0].get("role") == "system" else messages


async def engine_inputs(rt: Runtime, live: LiveSession) -> dict[str, Any]:
    """What ``live.engine`` is handed beside the framed active set (`framed`) by whatever plans or makes a
    compaction of it — a check, the announcement's, the compaction: the store's token counts and prepared records
    (`stored_preparations`), each where the engine takes it, so that after a restart none of them tokenizes the
    session or finds what was found when its messages were stored."""
    counts = stored_counts(rt.counter, live.engine, live.system_prompt, live.held_counts)
    return {**counts, **await stored_preparations(rt, live.engine, live.id, live.watermark, len(live.messages))}


def framed(live: LiveSession) -> list[dict[str, Any]]:
    """What the engine compresses: the session's system prompt, then its active messages."""
    return [system_message(live.system_prompt), *live.messages]


def system_message(system_prompt: str) -> dict[str, Any]:
    """The system prompt as the first message of what the engine compresses."""
    return {"role": "system", "content": system_prompt}


def stored_counts(counter: TokenCounter, engine: ContextEngine, system_prompt: str,
                  counts: Sequence[int] | None) -> dict[str, Any]:
    """``engine.compress``'s ``token_counts`` argument for a framed active set: the system prompt's count, then the
    store's ``counts`` of the messages, where the engine takes them and the caller holds them; else nothing."""
    if counts is None or not getattr(engine, "accepts_token_counts", False):
        return {}
    return {"token_counts": [counter.count_message(system_message(system_prompt)), *counts]}


async def stored_preparations(rt: Runtime, engine: ContextEngine, session_id: str, watermark: int,
                              stored: int) -> dict[str, Any]:
    """``engine.compress``'s ``prepared`` argument for a framed active set — the system prompt, then the
    session's ``stored`` active messages up to ``watermark``: what the engine prepared for each once it was
    stored, as the store kept it (so a compaction after a restart finds nothing again), where the engine
    takes it; else nothing. Read only now: a turn that does not compact does not need it."""
    if not getattr(engine, "accepts_prepared", False):
        return {}
    records = await stored_records(rt, session_id, watermark, stored)
    return {"prepared": [None, *records]} if records else {}


async def stored_records(rt: Runtime, session_id: str, watermark: int, stored: int) -> list[str | None]:
    """What the engine prepared for each of the session's ``stored`` active messages up to ``watermark``, as the
    store kept it; [] when the rows read are not those messages."""
    records = await rt.store.messages.prepared_of_active(session_id, watermark)
    # Another worker's append after ``watermark`` is not read; a replacement since would make the lengths differ.
    return records if len(records) == stored else []


async def store_compaction(rt: Runtime, session_id: str, watermark: int, result: CompressionResult, reason: str,
                           engine: ContextEngine) -> SessionRecord | None:
    """Write ``result``, computed from the active set read at ``watermark``, as the session's new active set with
    ``engine``'s state (waiting for real usage): in place (None), or by rotation (the child, returned). Rows
    appended after ``watermark`` are carried over after it. Raises `StaleWatermark` when another replacement
    committed since that read, `SessionEnded` when the session was ended meanwhile."""
    messages = _without_system(list(result.messages))
    # The engine's own counts of its output, when it gives them (the system prompt is not stored).
    known = result.token_counts[len(result.messages) - len(messages):] \
        if len(result.token_counts) == len(result.messages) else ()
    counts = list(known) or [rt.counter.count_message(m) for m in messages]
    info = compaction_info(result, reason, rt.clock())
    state = dataclasses.replace(export_engine_state(engine, info), last_prompt_tokens=-1)
    if rt.settings.compression.in_place:
        await rt.store.compactions.replace_active(session_id, messages, counts, watermark, reason=reason,
                                                  engine_state=state)
        return None
    return await rt.store.compactions.rotate(session_id, messages, counts, watermark, reason="compression",
                                             engine_state=state)


async def persist_compaction(sessions: SessionManager, live: LiveSession, result: CompressionResult,
                             reason: str) -> bool:
    """Store ``result`` as the session's new active set; False if it was not stored, and why is logged.

    It is not stored when another process replaced the active set since ``live`` was read (``concord sweep``
    from system cron, a second gateway without a shared Redis lock, a compaction ahead of need): that version
    stands, because ours was computed from rows that are no longer active, and writing it would archive,
    unsummarized, every message appended meanwhile. Then, as after a success, ``live`` is re-bound to what is
    stored now, and the caller continues from there (a turn appends its own messages after the winner's set).
    """
    rt = sessions.rt
    try:
        record = await store_compaction(rt, live.id, live.watermark, result, reason, live.engine)
    except (StaleWatermark, SessionEnded) as lost:
        log.warning("session %s was compacted elsewhere meanwhile (%s); keeping that version and continuing "
                    "from what is stored", live.id, type(lost).__name__)
        await follow_stored(sessions, live)
        return False
    # Committed: from here on only reads, retried through an outage, so a caller never mistakes a stored
    # compaction for a lost one (and stores its messages twice).
    await rt.storage.run(lambda: _rebind_after(sessions, live, record), f"reloading session {live.id}")
    log.info("session %s compacted (%s): %d → %d messages, %d → %d tokens", live.id, reason,
             result.messages_before, result.messages_after, result.tokens_before, result.tokens_after)
    return True


async def _rebind_after(sessions: SessionManager, live: LiveSession, child: SessionRecord | None) -> None:
    if child is None:
        await sessions.refresh_record(live)
        child = live.record
    # The conversation goes on: same memory snapshot, so the system prompt stays byte-identical (the cache's
    # stable prefix); the memory provider hears of it through on_session_switch (R-S4).
    await sessions.rebind(live, child, fresh_memory=False)


async def follow_stored(sessions: SessionManager, live: LiveSession) -> None:
    """Re-bind ``live`` to what the store holds for its chat now: its session, or the chat's open one if it
    was ended meanwhile (rotated or expired by another process)."""
    store = sessions.rt.store
    record = await store.sessions.require(live.id)
    if record.ended_at is not None:
        record = await store.sessions.get_or_create_active(live.key.platform, live.key.chat_key)
    restore_engine_state(live.engine, record.engine)
    # Another process wrote what is stored — an erasure, or a new session, may be among it: memory is read again.
    await sessions.rebind(live, record, fresh_memory=True)


async def compress_session(
    sessions: SessionManager,
    live: LiveSession,
    *,
    reason: str,
    focus: str | None = None,
    force: bool = False,
    notices: NoticeSink | None = None,
    events: EventSink | None = None,
    inputs: dict[str, Any] | None = None,
) -> CompressionResult:
    """Compress the stored session once, persist it, and notify engine, memory and listeners (R-S4).

    The caller holds the session's compression lock. ``inputs``: `engine_inputs` of ``live``, when the caller
    has just read them (/compress's check); read here otherwise.
    """
    engine, memory = live.engine, live.memory
    messages = framed(live)
    counter, held, schemas = sessions.rt.counter, live.held_counts, live.loop.schemas()
    engine.set_request_overhead(counter.count_tools(schemas))
    tokens = counter.count_request(live.messages, system=live.system_prompt, tools=schemas,
                                   message_tokens=None if held is None else sum(held))
    # The store's counts and records go to the engine, so a compression in the gateway never re-tokenizes the
    # session, and the announcement's check, which plans the compaction (pruning included), has them too.
    if inputs is None:
        inputs = await engine_inputs(sessions.rt, live)
    await before_compaction(engine, memory, messages, force=force, notices=notices, **inputs)
    engine.number_messages(live.first_seq)
    result = await compress_with_progress(engine, messages, notices=notices, current_tokens=tokens,
                                          focus_topic=focus, force=force, **inputs)
    if result.aborted:
        await emit_notice(notices, aborted_notice(result.reason))
        await emit_event(events, AgentEvent(EVENT_COMPRESS_ABORTED, live.id, {"reason": reason}))
    if not result.compressed:
        await _save_state(sessions, live)
        return result
    old_id = live.id
    if not await persist_compaction(sessions, live, result, reason):
        return dataclasses.replace(result, compressed=False, reason=LOST_RACE)
    # Also in place (same id twice), as in the agent loop: engine and memory hear of every compaction (R-S4).
    compaction = Compaction(reason, result, live.system_prompt, old_id, live.id)
    await after_compaction(engine, memory, compaction, live.messages, notices=notices, events=events)
    return result


async def _save_state(sessions: SessionManager, live: LiveSession) -> None:
    state = export_engine_state(live.engine, live.last_compaction)
    await sessions.rt.store.sessions.save_engine_state(live.id, state)
    live.synced_state = state


@dataclass(frozen=True, slots=True)
class HygieneOutcome:
    """What hygiene did for one session: the check, and the compression or why it was skipped."""

    check: HygieneCheck
    result: CompressionResult | None = None
    skipped: str = ""

    @property
    def compressed(self) -> bool:
        """Whether hygiene replaced the session's active set."""
        return self.result is not None and self.result.compressed


def hygiene_check(sessions: SessionManager, live: LiveSession) -> HygieneCheck:
    """Measure the session and apply the R-G3 rules."""
    gw = sessions.rt.settings.gateway
    held = live.held_counts
    tokens, source = session_tokens(live.engine.last_prompt_tokens, live.messages, sessions.rt.counter,
                                    system=live.system_prompt, tools=live.loop.schemas(),
                                    message_tokens=None if held is None else sum(held))
    return check_hygiene(tokens=tokens, token_source=source, message_count=len(live.messages),
                         context_length=live.engine.context_length, threshold=gw.hygiene_threshold,
                         hard_message_limit=gw.hygiene_hard_message_limit)


async def run_hygiene(
    sessions: SessionManager,
    live: LiveSession,
    *,
    notices: NoticeSink | None = None,
    events: EventSink | None = None,
    dry_run: bool = False,
) -> HygieneOutcome:
    """Compress ``live`` if R-G3 says so, unless the compression lock is held or the engine is blocked."""
    check = hygiene_check(sessions, live)
    if not check.needed:
        return HygieneOutcome(check)
    if not sessions.rt.settings.compression.enabled:
        return HygieneOutcome(check, skipped=SKIP_DISABLED)
    engine = live.engine
    if not engine.should_compress(max(check.tokens, engine.threshold_tokens)):
        log.info("hygiene skipped for %s: %s (%s)", live.id, SKIP_BLOCKED, check.reason)
        return HygieneOutcome(check, skipped=SKIP_BLOCKED)
    if dry_run:
        return HygieneOutcome(check, skipped="dry run")
    async with sessions.rt.locks.try_compression_lock(live.id) as acquired:
        if not acquired:
            log.info("hygiene skipped for %s: %s (%s)", live.id, SKIP_LOCKED, check.reason)
            return HygieneOutcome(check, skipped=SKIP_LOCKED)
        result = await compress_session(sessions, live, reason=check.reason, notices=notices, events=events)
    return HygieneOutcome(check, result=result, skipped="" if result.compressed else result.reason)
