"""One user turn of the agent: preflight → LLM call → tools → post-response check → … → final answer.

This module drives the turn: the calls, streaming, tools and the result. The three compression triggers are
the loop's mixins: R-P1 preflight before every call and R-P2 post-response on real prompt tokens, with the
guard and learning the window, in `agent.window_fit`; R-P3 error recovery in `agent.overflow_recovery`; the
compaction and its hooks (memory, session switch) in `agent.turn_compaction`. The loop is
platform-agnostic: it receives the session's messages and small interfaces (provider, context engine, tool
registry, memory, notice and event sinks) and returns a `TurnResult`; it never persists anything itself.

The system prompt travels apart from the messages. For a compression it is put in front as the system
message, so the engine protects it and can add its one-time "earlier turns were compacted" note; the
(possibly noted) prompt is then taken back out and kept for the rest of the session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agent.compression.engine import ContextEngine
from agent.events import (
    EVENT_LLM_RESPONSE,
    EVENT_TOOL_RESULT,
    AgentEvent,
    EventSink,
    NoticeSink,
    TurnStream,
    emit_event,
    emit_notice,
    emit_stream,
    error_notice,
    tool_status,
)
from agent.llm.base import Completion, ModelLimits, Provider
from agent.llm.errors import LLMError
from agent.llm.failover import Rerouted
from agent.llm.window import ServedWindow
from agent.memory import MemoryProvider
from agent.metering import RequestMeter
from agent.overflow_recovery import ErrorRecovery
from agent.recovery import cut_off_note
from agent.storable import storable_text
from agent.tokens import TokenCounter, get_counter
from agent.tools.registry import ToolOutcome, ToolRegistry
from agent.turn import (
    INTERRUPTED_MARK,
    LoopConfig,
    StopReason,
    TurnResult,
    close_open_tool_calls,
    user_message,
)
from agent.turn_compaction import SessionSwitch, StoredRecords, TurnCompaction
from agent.turn_state import Stop, Turn
from agent.window_fit import WindowFitting

__all__ = ["AgentLoop"]


class AgentLoop(WindowFitting, ErrorRecovery, TurnCompaction):
    """Runs turns for one session. Keep one instance per live session: it carries the session's system
    prompt (noted once on the first compaction), its id, and the real-usage anchor between turns."""

    def __init__(
        self,
        *,
        provider: Provider,
        engine: ContextEngine,
        system_prompt: str,
        session_id: str,
        tools: ToolRegistry | None = None,
        memory: MemoryProvider | None = None,
        max_tokens: int | None = None,
        model: str | None = None,
        notices: NoticeSink | None = None,
        events: EventSink | None = None,
        switch_session: SessionSwitch | None = None,
        counter: TokenCounter | None = None,
        config: LoopConfig | None = None,
        temperature: float | None = None,
        window: ServedWindow | None = None,
    ) -> None:
        self.provider = provider
        self.engine = engine
        self.system_prompt = system_prompt
        self.session_id = session_id
        self.tools = tools if tools is not None else ToolRegistry()
        self.memory = memory
        # The configured cap of an answer; None: a share of the engine's window (`output_reserve`).
        self.max_tokens = max_tokens
        self.model = model
        self.notices = notices
        self.events = events
        self.switch_session = switch_session
        self.counter = counter or get_counter()
        self.config = config or LoopConfig()
        self.temperature = temperature
        # The model's served window, shared with every session on it: what a server states is learned there.
        self.window = window
        # Set by the owner for one turn to stream it (like ``notices``); None: plain requests.
        self.stream: TurnStream | None = None
        # Set by the owner for one turn while a compaction of the session runs elsewhere (ahead of need) and
        # the request fits the window: triggers ① and ② leave the compacting to it; the guard still compresses
        # a request that would not fit, and recovery one the server refused.
        self.hold_compaction = False
        # Set by the owner that stores the conversation (the gateway): reads what the engine prepared for each
        # stored message (`on_messages_stored`), so that a compaction in a turn after a restart finds nothing
        # again; None: nothing kept.
        self.stored_records: StoredRecords | None = None
        self._skip_noticed = False
        # Request sizes as the server counts them; each message is counted once, and a compression is handed
        # the counts instead of re-tokenizing.
        self._meter = RequestMeter(self.counter)
        # Kept across turns (anti-thrashing for overflow recovery): every call overflowing must not buy a
        # summary call and a "compacting" notice on every turn.
        self._failed_recoveries = 0
        # The model limits the budgets were last set for (`_follow_model`).
        self._limits: ModelLimits | None = None

    async def run_turn(self, messages: Sequence[Mapping[str, Any]], message: str | Mapping[str, Any] | None, *,
                       token_counts: Sequence[int] | None = None) -> TurnResult:
        """Answer ``message`` given the session's ``messages`` (system prompt excluded; never mutated). None
        resumes a turn whose request (and perhaps tool rounds) ``messages`` already end with: a retry after a
        crash that stored them.

        ``token_counts``: the exact count of each of ``messages`` when the caller holds them (the store
        does), so that nothing already counted is tokenized again.
        Cancelling the task mid-turn ends the turn with ``StopReason.CANCELLED`` and a consistent list:
        every tool call the model made has a result (a stub for the ones that did not finish).
        """
        turn = Turn([dict(m) for m in messages], self._output_reserve())
        if token_counts is not None:
            self._meter.ledger.seed(turn.messages, token_counts)
        if message is not None:
            turn.append(user_message(message))
        text, error = "", ""
        try:
            reason, text = await self._drive(turn)
        except Stop as stop:
            reason, error = StopReason.ERROR, stop.text
            if not stop.notified:
                await emit_notice(self.notices, error_notice(error))
        except asyncio.CancelledError:
            # The turn's owner asked it to stop; hand back a list that is valid to send again, keeping what
            # the model had streamed so far, marked as cut off.
            reason = StopReason.CANCELLED
            if turn.partial:
                text = turn.partial
                turn.append({"role": "assistant", "content": f"{turn.partial}\n\n{INTERRUPTED_MARK}"})
            known = {id(m) for m in turn.messages}
            closed = close_open_tool_calls(turn.messages)
            turn.appended.extend(m for m in closed if id(m) not in known)
            turn.messages = closed
        return TurnResult(
            messages=turn.messages, appended=turn.appended, system_prompt=self.system_prompt,
            session_id=self.session_id, stop_reason=reason, text=text, error_text=error,
            compactions=turn.compactions, usage=turn.usage, images_reencoded=turn.images_shrunk,
            context_length=self.engine.context_length or None,
        )

    async def _drive(self, turn: Turn) -> tuple[StopReason, str]:
        for _ in range(self.config.max_iterations):
            self._follow_model(turn)
            await self._preflight(turn)
            await self._fit(turn)
            completion = await self._call(turn)
            reply = dict(completion.message)
            reply.setdefault("content", None)
            calls = completion.tool_calls
            text = storable_text(completion.text)
            if not calls and completion.finish_reason == "length":
                # Never a silent cut: the answer says it stopped at its limit (and the model will see it did).
                text = f"{text}\n\n{cut_off_note(turn.max_tokens)}" if text else cut_off_note(turn.max_tokens)
                reply["content"] = text
            turn.append(reply)
            if not calls:
                return StopReason.FINAL, text
            await self._run_tools(turn, calls)
            await self._post_response(turn)
        return StopReason.MAX_ITERATIONS, (
            f"I stopped after {self.config.max_iterations} steps without finishing. "
            "Tell me to continue, or narrow the request.")

    # --- the LLM call and trigger ③: error recovery ------------------------------------------------------

    async def _call(self, turn: Turn) -> Completion:
        while True:
            schemas = self.schemas()
            sent = list(turn.messages)
            started = time.perf_counter()
            try:
                completion = await self.provider.complete(
                    sent, system=self.system_prompt, tools=schemas or None, max_tokens=turn.max_tokens,
                    model=self.model, temperature=self.temperature, **self._streaming(turn))
            except Rerouted:
                turn.partial = ""
                self._follow_model(turn)  # the model the call now goes to: its window, its output reserve
                await self._fit(turn)
                continue
            except LLMError as error:
                turn.partial = ""
                await self._recover(turn, error)
                continue
            self._failed_recoveries = 0
            turn.partial = ""
            self._follow_model(turn)  # another model may have answered: its usage is measured on its window
            await self._record_usage(turn, completion, sent, schemas)
            await emit_event(self.events, AgentEvent(EVENT_LLM_RESPONSE, self.session_id, {
                "usage": completion.usage, "finish_reason": completion.finish_reason, "model": completion.model,
                "seconds": time.perf_counter() - started}))
            return completion

    def _streaming(self, turn: Turn) -> dict[str, Any]:
        """The provider arguments that stream this call to ``self.stream`` (none when nobody watches)."""
        stream = self.stream
        if stream is None:
            return {}

        async def progress(text: str) -> None:
            turn.partial = text
            await emit_stream(stream, text)

        return {"stream": True, "on_text": progress}

    # --- tools -------------------------------------------------------------------------------------------

    async def _run_tools(self, turn: Turn, calls: list[dict[str, Any]]) -> None:
        """Run the calls concurrently; results are appended in call order, even when cancelled midway."""
        finished: dict[int, ToolOutcome] = {}
        names = [str((call.get("function") or {}).get("name") or "") for call in calls]
        await emit_stream(self.stream, tool_status(names), status=True)

        async def run_one(index: int, call: Mapping[str, Any]) -> None:
            finished[index] = await self.tools.execute(call)

        try:
            await asyncio.gather(*(run_one(i, call) for i, call in enumerate(calls)))
        finally:
            for index in sorted(finished):
                turn.append(finished[index].message)
        for index in sorted(finished):
            outcome = finished[index]
            await emit_event(self.events, AgentEvent(EVENT_TOOL_RESULT, self.session_id, {
                "name": outcome.name, "ok": outcome.ok, "duration_s": outcome.duration_s}))
