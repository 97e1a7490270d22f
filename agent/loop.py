"""One user turn of the agent: preflight → LLM call → tools → post-response check → … → final answer.

The three compression triggers live here (R-P1 preflight before every call, R-P2 post-response on real
prompt tokens, R-P3 error recovery), together with tool execution and the memory hook. The loop is
platform-agnostic: it receives the session's messages and small interfaces (provider, context engine, tool
registry, memory, notice and event sinks) and returns a `TurnResult`; it never persists anything itself.

The system prompt travels apart from the messages. For a compression it is put in front as the system
message, so the engine protects it and can add its one-time "earlier turns were compacted" note; the
(possibly noted) prompt is then taken back out and kept for the rest of the session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent.compaction_steps import after_compaction, before_compaction, compress_with_progress
from agent.compression.engine import CompressionResult, ContextEngine
from agent.compression.threshold import output_reserve, request_room, tool_schema_budget
from agent.events import (
    EVENT_LLM_RESPONSE,
    EVENT_TOOL_RESULT,
    AgentEvent,
    EventSink,
    NoticeSink,
    TurnStream,
    aborted_notice,
    compression_skipped_notice,
    emit_event,
    emit_notice,
    emit_stream,
    error_notice,
    tool_status,
)
from agent.llm.base import Completion, ModelLimits, Provider, Usage
from agent.llm.errors import ContextOverflow, LLMError
from agent.llm.failover import Rerouted
from agent.llm.images import ashrink_images_in_messages
from agent.llm.window import LEARNED_OVERFLOW, LEARNED_TRUNCATION, ServedWindow
from agent.memory import MemoryProvider
from agent.metering import RequestMeter
from agent.recovery import (
    Action,
    budget_spent_text,
    cut_off_note,
    no_output_room_text,
    plan_recovery,
    still_too_large_text,
    too_small_window_text,
)
from agent.storable import storable, storable_text
from agent.tokens import TokenCounter, estimate_request_tokens_rough, get_counter
from agent.tools.registry import ToolOutcome, ToolRegistry
from agent.triggers import cheap_gate, made_progress, post_response_tokens
from agent.turn import (
    INTERRUPTED_MARK,
    Compaction,
    LoopConfig,
    StopReason,
    TurnResult,
    close_open_tool_calls,
    user_message,
)

__all__ = ["AgentLoop", "SessionSwitch"]

log = logging.getLogger(__name__)

# Called after each compaction with what happened; returns the session id the conversation continues under
# (a new one when the gateway rotates sessions, the same one for in-place compaction).
SessionSwitch = Callable[[Compaction], Awaitable[str]]

_DEFAULT_PROTECT_FIRST_N = 3
_DEFAULT_PROTECT_LAST_N = 20
# Turns in a row whose overflow recovery failed, after which a turn tries none until a call succeeds.
_FAILED_RECOVERY_LIMIT = 1
# The guard asks for a shorter answer only while one of at least this many tokens (or a quarter of the usual
# reserve, when that is less) still fits; below that the request is not sent.
_MIN_ANSWER_TOKENS = 256
# The least a message clipped to fit (its head, tail and the note saying what was cut) takes.
_MIN_MESSAGE_TOKENS = 128


class _Stop(Exception):
    """End the turn with a user-facing error text (``notified``: the user has already been shown it)."""

    def __init__(self, text: str, *, notified: bool = False) -> None:
        super().__init__(text)
        self.text = text
        self.notified = notified


@dataclass
class _Turn:
    """Mutable working state of one turn (private; `TurnResult` is the frozen view of it)."""

    messages: list[dict[str, Any]]
    max_tokens: int | None
    appended: list[dict[str, Any]] = field(default_factory=list)
    compactions: list[Compaction] = field(default_factory=list)
    usage: list[Usage] = field(default_factory=list)
    compressions_used: int = 0
    output_shrinks: int = 0
    images_shrunk: int = 0
    told_compacting: bool = False
    told_aborted: bool = False
    # The streamed text of the model call in progress ("" between calls).
    partial: str = ""

    def append(self, message: dict[str, Any]) -> None:
        # Everything a turn adds (the user's message, the model's answers, tool results) enters here.
        message = storable(message)
        self.messages.append(message)
        self.appended.append(message)


class AgentLoop:
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
        turn = _Turn([dict(m) for m in messages], self._output_reserve())
        if token_counts is not None:
            self._meter.ledger.seed(turn.messages, token_counts)
        if message is not None:
            turn.append(user_message(message))
        text, error = "", ""
        try:
            reason, text = await self._drive(turn)
        except _Stop as stop:
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

    async def _drive(self, turn: _Turn) -> tuple[StopReason, str]:
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

    def _follow_model(self, turn: _Turn) -> None:
        """Budgets follow the model the next call goes to (a provider that fails over, or a chat's /model):
        the engine takes its window, and the answer's reserve is derived from it as configured."""
        limits = self.provider.planned()
        if limits is None or limits == self._limits:
            return
        if self._limits is not None:
            self._meter.forget_anchor()  # real usage another model (another tokenizer) measured
        self._limits = limits
        _use_window(self.engine, limits.context_length, limits.max_tokens)
        self.max_tokens = limits.max_tokens
        turn.max_tokens = self._output_reserve()

    # --- trigger ①: preflight -------------------------------------------------------------------------

    def schemas(self) -> list[dict[str, Any]]:
        """The tool schemas sent with each request: within a tenth of the window (`ToolRegistry.schemas`)."""
        window = self.engine.context_length
        return self.tools.schemas(tool_schema_budget(window) if window else None, self.counter)

    async def _preflight(self, turn: _Turn) -> None:
        if not self.config.auto_compress or self.hold_compaction:
            return
        engine, schemas = self.engine, self.schemas()
        first, last = _protected_counts(engine)
        rough = estimate_request_tokens_rough(turn.messages, system=self.system_prompt, tools=schemas)
        if not cheap_gate(len(turn.messages), rough, engine.threshold_tokens, first, last):
            return
        tokens = self._anchored_tokens(turn.messages)
        if tokens is None:
            if _defers_to_real_usage(engine):
                # R-P1: the provider's real prompt_tokens proved the compacted list fits; our own count (other
                # tokenizer, schema-heavy) must not compress it again. The post-response check has real numbers.
                return
            tokens = self._request_tokens(turn.messages, schemas)
        for _ in range(self.config.preflight_passes):
            if not await self._should_compress(tokens):
                return
            before_n, before_t = len(turn.messages), tokens
            result = await self._compress(turn, "preflight", tokens)
            if not result.compressed:
                return
            tokens = self._request_tokens(turn.messages, schemas)
            if not made_progress(before_n, before_t, len(turn.messages), tokens, self.config.min_progress_ratio):
                return

    # --- the guard every request passes -------------------------------------------------------------------

    async def _fit(self, turn: _Turn) -> None:
        """Never send a request larger than the served window less its ``max_tokens`` (and a small margin):
        compress (escalating), then ask for a shorter answer (which then says it was cut), else stop without
        sending — at once when the system prompt, pins and tools alone leave no room."""
        window, schemas = self.engine.context_length, self.schemas()
        if not window or turn.max_tokens is None:
            return
        anchored = self._anchored_tokens(turn.messages)
        if anchored is None and _defers_to_real_usage(self.engine):
            return  # R-P1: the server's own count proved this list fits; ours over-counts it
        estimate = anchored if anchored is not None else 2 * estimate_request_tokens_rough(
            turn.messages, system=self.system_prompt, tools=schemas)
        if request_room(window, estimate) >= turn.max_tokens:
            return  # certainly fits (a rough count errs by well under half): no exact count needed
        least = min(turn.max_tokens, max(_MIN_ANSWER_TOKENS, turn.max_tokens // 4))
        if request_room(window, self._exact_request_tokens([], schemas) + _MIN_MESSAGE_TOKENS) < least:
            # The system prompt and the tools leave no room for a message and an answer: nothing to compress.
            raise _Stop(too_small_window_text(window))
        for _ in range(self.config.preflight_passes):
            tokens = self._request_tokens(turn.messages, schemas)
            if request_room(window, tokens) >= turn.max_tokens:
                return
            result = await self._compress(turn, "guard", tokens)
            if result.aborted:
                raise _Stop(aborted_notice(result.reason).text, notified=turn.told_aborted)
            if not result.compressed:
                break
        room = request_room(window, self._request_tokens(turn.messages, schemas))
        if room >= least:
            turn.max_tokens = min(turn.max_tokens, room)
            return
        framed = [{"role": "system", "content": self.system_prompt}, *turn.messages]
        raise _Stop(no_output_room_text(can_compress=self.engine.has_content_to_compress(framed)))

    def _anchored_tokens(self, messages: Sequence[Mapping[str, Any]]) -> int | None:
        """The server's figure for the request it measured plus what came after (`RequestMeter.anchored`)."""
        return self._meter.anchored(messages, self.system_prompt)

    def _request_tokens(self, messages: Sequence[Mapping[str, Any]], schemas: list[dict[str, Any]]) -> int:
        """The request's size, anchored on real usage when the provider already measured a prefix of it."""
        return self._meter.request(messages, self.system_prompt, schemas)

    def _exact_request_tokens(self, messages: Sequence[Mapping[str, Any]], schemas: list[dict[str, Any]]) -> int:
        return self._meter.exact(messages, self.system_prompt, schemas)

    # --- trigger ②: post-response -----------------------------------------------------------------------

    async def _post_response(self, turn: _Turn) -> None:
        if not self.config.auto_compress or self.hold_compaction:
            return
        tokens = post_response_tokens(self.engine.last_prompt_tokens)
        if tokens is None:
            # No usage reported: estimate, so a session cannot grow without bound; count exactly to decide.
            schemas = self.schemas()
            tokens = estimate_request_tokens_rough(turn.messages, system=self.system_prompt, tools=schemas)
            if tokens >= self.engine.threshold_tokens:
                tokens = self._exact_request_tokens(turn.messages, schemas)
        if await self._should_compress(tokens):
            await self._compress(turn, "post_response", tokens)

    async def _should_compress(self, tokens: int) -> bool:
        if self.engine.should_compress(tokens):
            return True
        streak = _ineffective_streak(self.engine)
        if tokens >= self.engine.threshold_tokens and streak and not self._skip_noticed:
            self._skip_noticed = True
            await emit_notice(self.notices, compression_skipped_notice(streak))
        return False

    # --- the LLM call and trigger ③: error recovery ------------------------------------------------------

    async def _call(self, turn: _Turn) -> Completion:
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

    def _streaming(self, turn: _Turn) -> dict[str, Any]:
        """The provider arguments that stream this call to ``self.stream`` (none when nobody watches)."""
        stream = self.stream
        if stream is None:
            return {}

        async def progress(text: str) -> None:
            turn.partial = text
            await emit_stream(stream, text)

        return {"stream": True, "on_text": progress}

    def _output_reserve(self) -> int | None:
        """``max_tokens`` for this turn's calls: the configured cap, else a share of the current window."""
        return output_reserve(self.max_tokens, self.engine.context_length or 0)

    async def _record_usage(self, turn: _Turn, completion: Completion, sent: list[dict[str, Any]],
                            schemas: list[dict[str, Any]]) -> None:
        usage = completion.usage
        turn.usage.append(usage)
        served = self._meter.record(usage, sent, self.system_prompt, schemas, self.engine.threshold_tokens)
        if served is not None:
            # A server that truncates silently (Ollama past num_ctx) says so only through its usage figures.
            await self._learn_window(turn, served, LEARNED_TRUNCATION)
        self.engine.update_from_response(usage)

    async def _learn_window(self, turn: _Turn, tokens: int, source: str) -> None:
        """The server serves ``tokens``: this session's engine, every session on the model (``window``, kept
        across restarts) and this turn's ``max_tokens`` follow."""
        _lower_context_length(self.engine, tokens)
        # The window of the model that answered: the chat's own or a fallback's (failover), else the main one.
        window = self._limits.window if self._limits is not None and self._limits.window is not None \
            else self.window
        if window is not None:
            await window.learn(tokens, source)
        reserve = self._output_reserve()
        if reserve is not None and (turn.max_tokens is None or reserve < turn.max_tokens):
            turn.max_tokens = reserve

    async def _recover(self, turn: _Turn, error: LLMError) -> None:
        log.info("LLM call failed (%s: %s); planning recovery", type(error).__name__, error.message)
        plan = plan_recovery(
            error, context_length=self.engine.context_length, max_tokens=turn.max_tokens,
            compressions_used=turn.compressions_used, max_compressions=self.config.max_compression_attempts,
            output_shrinks_left=self.config.max_output_shrinks - turn.output_shrinks,
            images_shrunk=turn.images_shrunk > 0)
        if plan.context_length is not None:
            if isinstance(error, ContextOverflow):
                await self._learn_window(turn, plan.context_length, LEARNED_OVERFLOW)
            else:
                _lower_context_length(self.engine, plan.context_length)
        if plan.action is Action.SHRINK_OUTPUT:
            turn.output_shrinks += 1
            turn.max_tokens = plan.max_tokens
        elif plan.action is Action.SHRINK_IMAGES:
            shrunk, changed = await ashrink_images_in_messages(turn.messages)
            if not changed:
                raise _Stop("⚠️ The model rejected an image as too large, and no image in this conversation "
                            "could be re-encoded. Use /new to start without it.")
            turn.messages = [dict(m) for m in shrunk]
            turn.images_shrunk += changed
        elif plan.action is Action.COMPRESS:
            if turn.compressions_used:
                # The previous recovery compression of this turn did not make the request fit.
                _record_ineffective(self.engine)
            elif self._failed_recoveries >= _FAILED_RECOVERY_LIMIT:
                raise _Stop(still_too_large_text())
            turn.compressions_used += 1
            tokens = self._exact_request_tokens(turn.messages, self.schemas())
            result = await self._compress(turn, "recovery", tokens, force=True)
            if result.aborted:
                raise _Stop(aborted_notice(result.reason).text, notified=turn.told_aborted)
            if not result.compressed:
                self._failed_recoveries += 1
                raise _Stop(budget_spent_text(turn.compressions_used, can_compress=False)
                            if turn.compressions_used > 1 else
                            "⚠️ The conversation is too large for the model and nothing more can be compressed. "
                            "Use /new to start a fresh session.")
        elif plan.budget_spent or plan.no_output_room:
            framed = [{"role": "system", "content": self.system_prompt}, *turn.messages]
            can_compress = self.engine.has_content_to_compress(framed)
            if plan.no_output_room:
                raise _Stop(no_output_room_text(can_compress=can_compress))
            self._failed_recoveries += 1
            raise _Stop(budget_spent_text(turn.compressions_used, can_compress=can_compress))
        else:
            raise _Stop(plan.text)

    # --- compression and what follows it (R-S4) --------------------------------------------------------

    async def _compress(self, turn: _Turn, trigger: str, tokens: int, *, force: bool = False) -> CompressionResult:
        framed = [{"role": "system", "content": self.system_prompt}, *turn.messages]
        self.engine.set_request_overhead(self.counter.count_tools(self.schemas()))
        counts: dict[str, Any] = {}
        if getattr(self.engine, "accepts_token_counts", False):
            self._meter.ledger.sync(turn.messages)
            counts["token_counts"] = [self.counter.count_message(framed[0]), *self._meter.ledger.counts]
        if await before_compaction(self.engine, self.memory, framed, force=force, notices=self.notices,
                                   announce=not turn.told_compacting, **counts):
            turn.told_compacting = True
        result = await compress_with_progress(self.engine, framed, notices=self.notices,
                                              every_s=self.config.progress_every_s, current_tokens=tokens,
                                              force=force, **counts)
        # Every later check of the turn is still over the threshold and aborts again: warn once per turn.
        if result.aborted and not turn.told_aborted:
            turn.told_aborted = True
            await emit_notice(self.notices, aborted_notice(result.reason))
        if result.compressed:
            await self._after_compaction(turn, trigger, result)
        return result

    async def _after_compaction(self, turn: _Turn, trigger: str, result: CompressionResult) -> None:
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

    # --- tools -------------------------------------------------------------------------------------------

    async def _run_tools(self, turn: _Turn, calls: list[dict[str, Any]]) -> None:
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


def _protected_counts(engine: ContextEngine) -> tuple[int, int]:
    """The engine's protected head and tail sizes for the preflight gate (spec defaults when it has none)."""
    first = getattr(engine, "protect_first_n", _DEFAULT_PROTECT_FIRST_N)
    last = getattr(engine, "protect_last_n", _DEFAULT_PROTECT_LAST_N)
    return int(first), int(last)


def _ineffective_streak(engine: ContextEngine) -> int:
    """Ineffective compressions in a row the engine reports (`ContextCompressor.ineffective_count`)."""
    return int(getattr(engine, "ineffective_count", 0) or 0)


def _defers_to_real_usage(engine: ContextEngine) -> bool:
    """Whether the engine says real usage already proved the list fits (`ContextCompressor.deferred_to_real_usage`)."""
    return bool(getattr(engine, "deferred_to_real_usage", False))


def _record_ineffective(engine: ContextEngine) -> None:
    """Count a recovery compression that did not help toward the engine's anti-thrashing, where it has one."""
    record = getattr(engine, "record_ineffective", None)
    if callable(record):
        record()


def _use_window(engine: ContextEngine, context_length: int, max_tokens: int | None) -> None:
    """Give the engine the window of the model now answering, where it can change windows
    (`ContextCompressor.use_window`); an engine without it keeps its own."""
    use = getattr(engine, "use_window", None)
    if callable(use):
        use(context_length, max_tokens)


def _lower_context_length(engine: ContextEngine, context_length: int) -> None:
    """Shrink the engine's window to what the provider stated; the threshold follows."""
    lower = getattr(engine, "lower_context_length", None)
    if callable(lower):
        lower(context_length)
    elif context_length < engine.context_length:
        engine.context_length = context_length
