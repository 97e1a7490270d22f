"""The steps around every compaction, shared by the agent loop and the gateway (hygiene, /compress, sweep).

Before: let memory rescue facts (R-S6) and announce a summary call. After: tell the engine and memory that
the conversation continues on the compacted list (R-S4), emit ``session:compress``, and warn when a session
has been compressed many times (R-G7). Keeping them in one place keeps every trigger path alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent.compression.engine import CompressionResult, ContextEngine
from agent.events import (
    EVENT_COMPRESS,
    AgentEvent,
    EventSink,
    NoticeSink,
    compacting_notice,
    compressed_many_times_notice,
    emit_event,
    emit_notice,
    still_compacting_notice,
)
from agent.memory import MemoryProvider
from agent.turn import PROGRESS_EVERY_S, Compaction

__all__ = ["after_compaction", "before_compaction", "compress_with_progress"]

log = logging.getLogger(__name__)

_MANY_COMPRESSIONS = 2


async def before_compaction(
    engine: ContextEngine,
    memory: MemoryProvider | None,
    framed: Sequence[Mapping[str, Any]],
    *,
    force: bool,
    notices: NoticeSink | None,
    announce: bool = True,
    token_counts: Sequence[int] | None = None,
    prepared: Sequence[str | None] | None = None,
) -> bool:
    """Let memory see the messages about to be compacted; announce it when a summary call will be made.

    ``framed`` is the list the engine will compress (system prompt first); ``token_counts``, its counts for
    an engine that `accepts_token_counts`; ``prepared``, its stored records for one that `accepts_prepared`
    (the check plans the compaction, pruning included, before it runs). Returns whether it announced.
    """
    if memory is not None:
        try:
            await memory.on_pre_compress(list(framed[1:] if framed and framed[0].get("role") == "system" else framed))
        except Exception:  # rescuing facts is best effort; it must not block the compression
            log.warning("memory on_pre_compress failed", exc_info=True)
    # Only when a summary call will really be made (not for a static fallback during a cooldown).
    given = {name: value for name, value in (("token_counts", token_counts), ("prepared", prepared))
             if value is not None}
    if announce and engine.will_summarize(framed, force=force, **given):
        await emit_notice(notices, compacting_notice())
        return True
    return False


async def compress_with_progress(
    engine: ContextEngine,
    framed: Sequence[Mapping[str, Any]],
    *,
    notices: NoticeSink | None,
    every_s: float = PROGRESS_EVERY_S,
    **options: Any,
) -> CompressionResult:
    """``engine.compress(framed, **options)``, posting a progress line every ``every_s`` seconds it runs."""
    started = time.monotonic()

    async def progress() -> None:
        while True:
            await asyncio.sleep(every_s)
            await emit_notice(notices, still_compacting_notice(time.monotonic() - started))

    ticker = asyncio.create_task(progress()) if notices is not None else None
    try:
        return await engine.compress(framed, **options)
    finally:
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker


async def after_compaction(
    engine: ContextEngine,
    memory: MemoryProvider | None,
    compaction: Compaction,
    messages: Sequence[Mapping[str, Any]],
    *,
    notices: NoticeSink | None,
    events: EventSink | None,
) -> None:
    """The conversation now continues as ``messages`` under ``compaction.session_id``: tell everyone (R-S4)."""
    engine.on_session_start(compaction.session_id, messages)
    if memory is not None:
        try:
            await memory.on_session_switch(compaction.old_session_id, compaction.session_id)
        except Exception:
            log.warning("memory on_session_switch failed", exc_info=True)
    await emit_event(events, AgentEvent(EVENT_COMPRESS, compaction.session_id,
                                        {"compaction": compaction, "result": compaction.result}))
    if engine.compression_count >= _MANY_COMPRESSIONS:
        await emit_notice(notices, compressed_many_times_notice(engine.compression_count))
