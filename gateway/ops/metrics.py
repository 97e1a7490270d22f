"""Process-wide observability (docs/rules.md §8): counters since start, a bounded ring of turn times, and one
structured log line per compaction.

`Metrics` is an `EventSink`: the router, hygiene, /compress and the sweep hand it their ``AgentEvent``s. What
events cannot tell is recorded by direct calls: messages and turns (the router), and the compressor's own
summary calls, which never pass the agent loop (`MeteredProvider` wraps the engine's providers). Memory is
bounded: fixed counters, one tally per compression kind from a closed set, and ``window`` recent turn times.
Nothing here holds or logs message content, summaries or secrets.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.compression.engine import CompressionResult
from agent.events import (
    EVENT_COMPRESS,
    EVENT_LLM_RESPONSE,
    EVENT_TOOL_RESULT,
    AgentEvent,
    EventSink,
    emit_event,
)
from agent.llm.base import Completion, Provider, TextProgress, Usage
from agent.llm.errors import LLMError
from gateway.ops.instruments import Instruments, trigger_of

__all__ = [
    "EVENT_COMPRESS_ABORTED",
    "KIND_SWEEP",
    "CompressionTally",
    "MeteredProvider",
    "Metrics",
    "compression_kind",
    "fan_out",
    "percentile",
]

event_log = logging.getLogger("concord.events")

# A compression that gave up and left the conversation unchanged (the loop and `compress_session` emit
# ``session:compress`` only for compressions that happened). Data: {"reason": str}.
EVENT_COMPRESS_ABORTED = "session:compress_aborted"
KIND_SWEEP = "sweep"
KIND_OTHER = "other"
TURN_WINDOW = 1_000
# Distinct model names kept as labels; a server answering with ever-new model strings shares "other".
MAX_MODEL_LABELS = 16

# Stored compaction reasons (gateway.conversation.hygiene, gateway.conversation.session_commands, the loop's triggers) → the kinds /stats shows.
_KINDS: dict[str, str] = {
    "hygiene: tokens": "hygiene: tokens",
    "hygiene: message count": "hygiene: messages",
    "manual /compress": "manual /compress",
    "preflight": "agent: preflight",
    "post_response": "agent: post_response",
    "recovery": "agent: recovery",
    "agent": "agent",
    "ahead of need": "ahead of need",
}


def compression_kind(reason: str) -> str:
    """The /stats kind of a compaction reason; unknown reasons share one kind, so the tallies stay bounded."""
    return _KINDS.get(reason.removeprefix("agent: "), KIND_OTHER)  # the store's "agent: preflight" too


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(round(len(ordered) * fraction, 9)))  # round: 0.95 × 20 must be rank 19, not 20
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class CompressionTally:
    """Compressions of one kind: done, aborted, static-fallback summaries, tokens saved."""

    count: int = 0
    aborted: int = 0
    static: int = 0
    tokens_saved: int = 0
    savings_sum: float = 0.0

    @property
    def average_savings(self) -> float:
        """Mean fraction of tokens saved per compression (0.0 when none)."""
        return self.savings_sum / self.count if self.count else 0.0


class Metrics:
    """Counters since process start; call it with an `AgentEvent` to record one.

    The same calls feed ``instruments`` (Prometheus, served at ``/metrics`` when ``metrics.port`` is set);
    the plain counters are what /stats shows.
    """

    def __init__(self, *, window: int = TURN_WINDOW, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.messages = 0
        self.turns = 0
        self.turn_failures = 0
        self.turn_seconds: deque[float] = deque(maxlen=window)
        self.agent_llm_calls = 0
        self.summary_calls = 0
        self.summary_failures = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cache_read_tokens = 0
        self.cache_write_tokens = 0
        # Of the tokens above, the summary calls' (they are charged to budgets like the agent's).
        self.summary_prompt_tokens = 0
        self.summary_completion_tokens = 0
        self.summary_cache_read_tokens = 0
        self.summary_cache_write_tokens = 0
        self.tool_calls = 0
        self.tool_failures = 0
        self.compressions: dict[str, CompressionTally] = {}
        self.instruments = Instruments()
        self._models: set[str] = set()

    # --- what the gateway reports directly --------------------------------------------------------------

    def record_message(self, platform: str = "console") -> None:
        """One inbound message reached its session's queue."""
        self.messages += 1
        self.instruments.messages_in.labels(platform).inc()

    def record_sent(self, platform: str) -> None:
        """The platform confirmed one reply."""
        self.instruments.messages_out.labels(platform).inc()

    def record_duplicate(self, platform: str) -> None:
        """An inbound message was dropped because it had been handled already (here or by another worker)."""
        self.instruments.duplicates.labels(platform).inc()

    def record_turn(self, seconds: float, *, failed: bool) -> None:
        """One agent turn (hygiene included) took ``seconds``; ``failed``: it raised or ended on an error."""
        self.turns += 1
        self.turn_failures += failed
        self.turn_seconds.append(seconds)
        self.instruments.turns.labels("failed" if failed else "ok").observe(seconds)

    def record_agent_call(self) -> None:
        """A conversation began a model call (answered, failed or stopped mid-answer by /stop)."""
        self.agent_llm_calls += 1

    def record_summary_call(self, usage: Usage | None, *, model: str = "", seconds: float | None = None,
                            error: str | None = None) -> None:
        """One call by the context engine; ``usage`` None when it failed (``error``: the error's kind)."""
        self.summary_calls += 1
        label = self._model_label(model)
        if seconds is not None:
            self.instruments.llm_seconds.labels(label, "summary").observe(seconds)
        if usage is None:
            self.summary_failures += 1
            self.instruments.summary_failures.labels(error or "unknown").inc()
        else:
            self.summary_prompt_tokens += usage.prompt_tokens
            self.summary_completion_tokens += usage.completion_tokens
            self.summary_cache_read_tokens += usage.cache_read_tokens
            self.summary_cache_write_tokens += usage.cache_write_tokens
            self._add_usage(usage, label, "summary")

    def record_lock_wait(self, seconds: float) -> None:
        """A turn waited ``seconds`` for its session's lock."""
        self.instruments.lock_wait.observe(seconds)

    def record_lock_error(self, operation: str) -> None:
        """The lock backend failed one ``operation`` (acquire, renew, release)."""
        self.instruments.lock_errors.labels(operation).inc()

    def record_redelivery(self, outcome: str) -> None:
        """The delivery ledger sent a stored answer again (``outcome``: sent or failed)."""
        self.instruments.redelivered.labels(outcome).inc()

    @property
    def llm_calls(self) -> int:
        """Every LLM call made: the agent's (answered, failed or stopped) and the engine's."""
        return self.agent_llm_calls + self.summary_calls

    @property
    def uptime_s(self) -> float:
        """Seconds since this object was built (with the runtime, at start-up)."""
        return self.clock() - self.started

    def turn_latency(self) -> tuple[float | None, float | None]:
        """p50 and p95 of the recent turn times, in seconds."""
        recent = list(self.turn_seconds)
        return percentile(recent, 0.50), percentile(recent, 0.95)

    # --- the event sink ---------------------------------------------------------------------------------

    async def __call__(self, event: AgentEvent) -> None:
        """Record ``event`` (an `EventSink`)."""
        self.observe(event)

    def tagged(self, kind: str) -> EventSink:
        """A sink that files every compression under ``kind`` (the sweep's compressions carry hygiene's reasons)."""

        async def sink(event: AgentEvent) -> None:
            self.observe(event, kind=kind)

        return sink

    def observe(self, event: AgentEvent, *, kind: str | None = None) -> None:
        """Record ``event``; ``kind`` overrides the compression kind derived from its reason."""
        data = event.data
        if event.kind == EVENT_LLM_RESPONSE:  # counted as a call by the agent's `MeteredProvider`
            model = self._model_label(str(data.get("model") or ""))
            seconds = data.get("seconds")
            if isinstance(seconds, int | float):
                self.instruments.llm_seconds.labels(model, "agent").observe(seconds)
            usage = data.get("usage")
            if isinstance(usage, Usage):
                self._add_usage(usage, model, "agent")
        elif event.kind == EVENT_TOOL_RESULT:
            self.tool_calls += 1
            self.tool_failures += not data.get("ok", False)
        elif event.kind == EVENT_COMPRESS:
            result, compaction = data.get("result"), data.get("compaction")
            reason = str(getattr(compaction, "trigger", "") or "")
            if isinstance(result, CompressionResult):
                self._compressed(event.session_id, kind or compression_kind(reason), reason, result)
        elif event.kind == EVENT_COMPRESS_ABORTED:
            reason = str(data.get("reason") or "")
            self._aborted(event.session_id, kind or compression_kind(reason), reason)

    def _add_usage(self, usage: Usage, model: str, purpose: str) -> None:
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        tokens = self.instruments.tokens
        for kind, count in (("prompt", usage.prompt_tokens), ("completion", usage.completion_tokens),
                            ("cache_read", usage.cache_read_tokens), ("cache_write", usage.cache_write_tokens)):
            if count:
                tokens.labels(model, purpose, kind).inc(count)

    def _model_label(self, model: str) -> str:
        model = model or "unknown"
        if model in self._models or len(self._models) < MAX_MODEL_LABELS:
            self._models.add(model)
            return model
        return "other"

    def _tally(self, kind: str) -> CompressionTally:
        return self.compressions.setdefault(kind, CompressionTally())

    def _compressed(self, session: str, kind: str, reason: str, result: CompressionResult) -> None:
        tally = self._tally(kind)
        tally.count += 1
        tally.static += result.summary_kind == "static"
        tally.tokens_saved += max(0, result.tokens_before - result.tokens_after)
        tally.savings_sum += result.savings_pct
        trigger = trigger_of(kind)
        self.instruments.compressions.labels(trigger).inc()
        self.instruments.tokens_saved.labels(trigger).inc(max(0, result.tokens_before - result.tokens_after))
        self.instruments.savings.labels(trigger).observe(max(0.0, min(1.0, result.savings_pct)))
        if result.summary_kind == "static":
            self.instruments.static_fallbacks.labels(trigger).inc()
        _log_compression(session, kind, reason, {
            "messages_before": result.messages_before, "messages_after": result.messages_after,
            "tokens_before": result.tokens_before, "tokens_after": result.tokens_after,
            "savings_pct": round(result.savings_pct * 100, 1), "summary_kind": result.summary_kind,
            "aborted": False})

    def _aborted(self, session: str, kind: str, reason: str) -> None:
        self._tally(kind).aborted += 1
        self.instruments.aborted.labels(trigger_of(kind)).inc()
        _log_compression(session, kind, reason, {"aborted": True})


def _log_compression(session: str, kind: str, reason: str, figures: Mapping[str, Any]) -> None:
    """One INFO line per compaction; the fields also go in ``extra`` for a JSON formatter. The text has no
    double quotes (the kind is single-quoted), so it stays valid inside ``logging.json_logs``' JSON line."""
    fields = {"event": EVENT_COMPRESS, "session": session, "kind": kind, "reason": reason, **figures}
    if figures.get("aborted"):
        text = f"compression session={session} kind='{kind}' aborted=true"
    else:
        text = (f"compression session={session} kind='{kind}' "
                f"messages={figures['messages_before']}->{figures['messages_after']} "
                f"tokens={figures['tokens_before']}->{figures['tokens_after']} "
                f"saved={figures['savings_pct']}% summary={figures['summary_kind']} aborted=false")
    event_log.info(text, extra=fields)


def fan_out(*sinks: EventSink | None) -> EventSink:
    """One sink delivering to each of ``sinks`` in order; a failing one is logged and the rest still run."""
    targets = [s for s in sinks if s is not None]

    async def sink(event: AgentEvent) -> None:
        for target in targets:
            await emit_event(target, event)

    return sink


class MeteredProvider(Provider):
    """Counts the calls a context engine makes through ``inner`` (summaries never reach the agent loop's
    ``llm:response`` events), and hands each call's usage to ``on_usage`` (the budgets' `charge_summary`).
    Name and model are the inner provider's, so "same model?" checks still hold."""

    def __init__(self, inner: Provider, metrics: Metrics,
                 on_usage: Callable[[Usage], Awaitable[None]] | None = None) -> None:
        self.inner = inner
        self.metrics = metrics
        self._on_usage = on_usage
        self.name = inner.name
        self.model = inner.model

    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        model: str | None = None,
        stream: bool = False,
        temperature: float | None = None,
        on_text: TextProgress | None = None,
        cache: bool = True,
    ) -> Completion:
        """Delegate to the inner provider, counting the call, its time and usage (or its failure)."""
        started = time.perf_counter()
        try:
            completion = await self.inner.complete(messages, system=system, tools=tools, max_tokens=max_tokens,
                                                   model=model, stream=stream, temperature=temperature,
                                                   on_text=on_text, cache=cache)
        except LLMError as exc:
            self.metrics.record_summary_call(None, model=model or self.model, seconds=time.perf_counter() - started,
                                             error=type(exc).__name__)
            raise
        self.metrics.record_summary_call(completion.usage, model=completion.model or model or self.model,
                                         seconds=time.perf_counter() - started)
        if self._on_usage is not None:
            await self._on_usage(completion.usage)
        return completion

    async def aclose(self) -> None:
        """Close the inner provider."""
        await self.inner.aclose()
