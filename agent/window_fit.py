"""How the agent loop keeps each request within the served window: `WindowFitting`, a mixin of `AgentLoop`.

Budgets follow the model the next call goes to; trigger ① (preflight, R-P1) compresses before a call when the
request has reached the threshold, the guard never sends one larger than the window less its answer, trigger ②
(post-response, R-P2) checks the real prompt tokens after each tool round, and what a server states about its
window (a silent truncation in its usage figures, an overflow error) is learned by this session's engine and by
every session on the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.compression.engine import ContextEngine
from agent.compression.threshold import output_reserve, request_room, tool_schema_budget
from agent.engine_hooks import (
    defers_to_real_usage,
    ineffective_streak,
    lower_context_length,
    protected_counts,
    use_window,
)
from agent.events import NoticeSink, aborted_notice, compression_skipped_notice, emit_notice
from agent.llm.base import Completion, ModelLimits, Provider
from agent.llm.window import LEARNED_TRUNCATION, ServedWindow
from agent.metering import RequestMeter
from agent.recovery import no_output_room_text, too_small_window_text
from agent.tokens import TokenCounter, estimate_request_tokens_rough
from agent.tools.registry import ToolRegistry
from agent.triggers import cheap_gate, made_progress, post_response_tokens
from agent.turn import LoopConfig
from agent.turn_state import Stop, Turn

__all__ = ["WindowFitting"]

# The guard asks for a shorter answer only while one of at least this many tokens (or a quarter of the usual
# reserve, when that is less) still fits; below that the request is not sent.
_MIN_ANSWER_TOKENS = 256
# The least a message clipped to fit (its head, tail and the note saying what was cut) takes.
_MIN_MESSAGE_TOKENS = 128


class WindowFitting:
    """Preflight, the guard, the post-response check and learning the window; `AgentLoop`'s methods (it sets
    these fields; compressing is `TurnCompaction._compress`)."""

    provider: Provider
    engine: ContextEngine
    system_prompt: str
    tools: ToolRegistry
    max_tokens: int | None
    notices: NoticeSink | None
    counter: TokenCounter
    config: LoopConfig
    window: ServedWindow | None
    hold_compaction: bool
    _skip_noticed: bool
    _meter: RequestMeter
    _limits: ModelLimits | None

    def _follow_model(self, turn: Turn) -> None:
        """Budgets follow the model the next call goes to (a provider that fails over, or a chat's /model):
        the engine takes its window, and the answer's reserve is derived from it as configured."""
        limits = self.provider.planned()
        if limits is None or limits == self._limits:
            return
        if self._limits is not None:
            self._meter.forget_anchor()  # real usage another model (another tokenizer) measured
        self._limits = limits
        use_window(self.engine, limits.context_length, limits.max_tokens)
        self.max_tokens = limits.max_tokens
        turn.max_tokens = self._output_reserve()

    # --- trigger ①: preflight -------------------------------------------------------------------------

    def schemas(self) -> list[dict[str, Any]]:
        """The tool schemas sent with each request: within a tenth of the window (`ToolRegistry.schemas`)."""
        window = self.engine.context_length
        return self.tools.schemas(tool_schema_budget(window) if window else None, self.counter)

    async def _preflight(self, turn: Turn) -> None:
        if not self.config.auto_compress or self.hold_compaction:
            return
        engine, schemas = self.engine, self.schemas()
        first, last = protected_counts(engine)
        rough = estimate_request_tokens_rough(turn.messages, system=self.system_prompt, tools=schemas)
        if not cheap_gate(len(turn.messages), rough, engine.threshold_tokens, first, last):
            return
        tokens = self._anchored_tokens(turn.messages)
        if tokens is None:
            if defers_to_real_usage(engine):
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

    async def _fit(self, turn: Turn) -> None:
        """Never send a request larger than the served window less its ``max_tokens`` (and a small margin):
        compress (escalating), then ask for a shorter answer (which then says it was cut), else stop without
        sending — at once when the system prompt, pins and tools alone leave no room."""
        window, schemas = self.engine.context_length, self.schemas()
        if not window or turn.max_tokens is None:
            return
        anchored = self._anchored_tokens(turn.messages)
        if anchored is None and defers_to_real_usage(self.engine):
            return  # R-P1: the server's own count proved this list fits; ours over-counts it
        estimate = anchored if anchored is not None else 2 * estimate_request_tokens_rough(
            turn.messages, system=self.system_prompt, tools=schemas)
        if request_room(window, estimate) >= turn.max_tokens:
            return  # certainly fits (a rough count errs by well under half): no exact count needed
        least = min(turn.max_tokens, max(_MIN_ANSWER_TOKENS, turn.max_tokens // 4))
        if request_room(window, self._exact_request_tokens([], schemas) + _MIN_MESSAGE_TOKENS) < least:
            # The system prompt and the tools leave no room for a message and an answer: nothing to compress.
            raise Stop(too_small_window_text(window))
        for _ in range(self.config.preflight_passes):
            tokens = self._request_tokens(turn.messages, schemas)
            if request_room(window, tokens) >= turn.max_tokens:
                return
            result = await self._compress(turn, "guard", tokens)
            if result.aborted:
                raise Stop(aborted_notice(result.reason).text, notified=turn.told_aborted)
            if not result.compressed:
                break
        room = request_room(window, self._request_tokens(turn.messages, schemas))
        if room >= least:
            turn.max_tokens = min(turn.max_tokens, room)
            return
        framed = [{"role": "system", "content": self.system_prompt}, *turn.messages]
        raise Stop(no_output_room_text(can_compress=self.engine.has_content_to_compress(framed)))

    def _anchored_tokens(self, messages: Sequence[Mapping[str, Any]]) -> int | None:
        """The server's figure for the request it measured plus what came after (`RequestMeter.anchored`)."""
        return self._meter.anchored(messages, self.system_prompt)

    def _request_tokens(self, messages: Sequence[Mapping[str, Any]], schemas: list[dict[str, Any]]) -> int:
        """The request's size, anchored on real usage when the provider already measured a prefix of it."""
        return self._meter.request(messages, self.system_prompt, schemas)

    def _exact_request_tokens(self, messages: Sequence[Mapping[str, Any]], schemas: list[dict[str, Any]]) -> int:
        return self._meter.exact(messages, self.system_prompt, schemas)

    # --- trigger ②: post-response -----------------------------------------------------------------------

    async def _post_response(self, turn: Turn) -> None:
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
        streak = ineffective_streak(self.engine)
        if tokens >= self.engine.threshold_tokens and streak and not self._skip_noticed:
            self._skip_noticed = True
            await emit_notice(self.notices, compression_skipped_notice(streak))
        return False


    def _output_reserve(self) -> int | None:
        """``max_tokens`` for this turn's calls: the configured cap, else a share of the current window."""
        return output_reserve(self.max_tokens, self.engine.context_length or 0)

    async def _record_usage(self, turn: Turn, completion: Completion, sent: list[dict[str, Any]],
                            schemas: list[dict[str, Any]]) -> None:
        usage = completion.usage
        turn.usage.append(usage)
        served = self._meter.record(usage, sent, self.system_prompt, schemas, self.engine.threshold_tokens)
        if served is not None:
            # A server that truncates silently (Ollama past num_ctx) says so only through its usage figures.
            await self._learn_window(turn, served, LEARNED_TRUNCATION)
        self.engine.update_from_response(usage)

    async def _learn_window(self, turn: Turn, tokens: int, source: str) -> None:
        """The server serves ``tokens``: this session's engine, every session on the model (``window``, kept
        across restarts) and this turn's ``max_tokens`` follow."""
        lower_context_length(self.engine, tokens)
        # The window of the model that answered: the chat's own or a fallback's (failover), else the main one.
        window = self._limits.window if self._limits is not None and self._limits.window is not None \
            else self.window
        if window is not None:
            await window.learn(tokens, source)
        reserve = self._output_reserve()
        if reserve is not None and (turn.max_tokens is None or reserve < turn.max_tokens):
            turn.max_tokens = reserve
