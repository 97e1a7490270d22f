"""A compaction inside a turn and what follows it (R-S4): `TurnCompaction`, a mixin of `AgentLoop`.

The system prompt goes in front as the system message, so the engine protects it and can add its one-time
"earlier turns were compacted" note; the (possibly noted) prompt is then taken back out and kept. The engine is
handed the counts the loop already holds, memory and the session hear of the compaction, and the gateway may
continue the conversation under a new session id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from agent.compaction_steps import after_compaction, before_compaction, compress_with_progress
from agent.compression.engine import CompressionResult, ContextEngine
from agent.events import EventSink, NoticeSink, aborted_notice, emit_notice
from agent.memory import MemoryProvider
from agent.metering import RequestMeter
from agent.tokens import TokenCounter
from agent.turn import Compaction, LoopConfig
from agent.turn_state import Turn

__all__ = ["SessionSwitch", "StoredRecords", "TurnCompaction"]

# Called after each compaction with what happened; returns the session id the conversation continues under
# (a new one when the gateway rotates sessions, the same one for in-place compaction).
SessionSwitch = Callable[[Compaction], Awaitable[str]]
# Reads what the engine prepared for each message of the conversation as stored now (`ContextEngine.on_messages_
# stored`'s records, kept by the caller), oldest first; () when it keeps none.
StoredRecords = Callable[[], Awaitable[Sequence[str | None]]]


class TurnCompaction:
    """Compressing the turn's messages; `AgentLoop`'s methods (it sets these fields; ``schemas`` is
    `WindowFitting`'s)."""

    engine: ContextEngine
    system_prompt: str
    session_id: str
    memory: MemoryProvider | None
    notices: NoticeSink | None
    events: EventSink | None
    switch_session: SessionSwitch | None
    stored_records: StoredRecords | None
    counter: TokenCounter
    config: LoopConfig
    _skip_noticed: bool
    _meter: RequestMeter

    # --- compression and what follows it (R-S4) --------------------------------------------------------

    async def _compress(self, turn: Turn, trigger: str, tokens: int, *, force: bool = False) -> CompressionResult:
        framed = [{"role": "system", "content": self.system_prompt}, *turn.messages]
        self.engine.set_request_overhead(self.counter.count_tools(self.schemas()))
        inputs: dict[str, Any] = {}
        if getattr(self.engine, "accepts_token_counts", False):
            self._meter.ledger.sync(turn.messages)
            inputs["token_counts"] = [self.counter.count_message(framed[0]), *self._meter.ledger.counts]
        if self.stored_records is not None and getattr(self.engine, "accepts_prepared", False):
            # Read only now: a turn that does not compact does not need them. The engine takes a record only for
            # the message it was made for, whichever place it is handed in; one per message is all it asks.
            records = list(await self.stored_records())[: len(turn.messages)]
            inputs["prepared"] = [None, *records, *[None] * (len(turn.messages) - len(records))]
        if await before_compaction(self.engine, self.memory, framed, force=force, notices=self.notices,
                                   announce=not turn.told_compacting, **inputs):
            turn.told_compacting = True
        result = await compress_with_progress(self.engine, framed, notices=self.notices,
                                              every_s=self.config.progress_every_s, current_tokens=tokens,
                                              force=force, **inputs)
        # Every later check of the turn is still over the threshold and aborts again: warn once per turn.
        if result.aborted and not turn.told_aborted:
            turn.told_aborted = True
            await emit_notice(self.notices, aborted_notice(result.reason))
        if result.compressed:
            await self._after_compaction(turn, trigger, result)
        return result

    async def _after_compaction(self, turn: Turn, trigger: str, result: CompressionResult) -> None:
        replaced = turn.messages
        new = list(result.messages)
        if new and new[0].get("role") == "system":
            self.system_prompt = str(new.pop(0).get("content") or "")
        turn.messages = [dict(m) for m in new]
        if len(result.token_counts) == len(result.messages):  # the engine counted its output: keep those
            self._meter.ledger.seed(turn.messages, result.token_counts[len(result.messages) - len(new):])
        self._meter.forget_anchor()
        self._skip_noticed = False
        old_id = self.session_id
        compaction = Compaction(trigger, result, self.system_prompt, old_id, old_id, len(turn.appended),
                                tuple(replaced))
        # Recorded before any await, so a cancelled turn still reports the list it replaced.
        turn.compactions.append(compaction)
        if self.switch_session is not None:
            self.session_id = await self.switch_session(compaction)
            compaction = replace(compaction, session_id=self.session_id)
            turn.compactions[-1] = compaction
        await after_compaction(self.engine, self.memory, compaction, result.messages, notices=self.notices,
                               events=self.events)
