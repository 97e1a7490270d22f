"""`ContextCompressor`: the built-in context engine — prune, cut, summarize, assemble (R-C0…R-C10).

The stages are pure functions in their own modules; this class owns the per-conversation state
(`CompressorState`) and the order of the pipeline:

    clip (oversized single messages) → guard (R-C0) → prune (R-C1) → boundaries (R-C2)
        → summary (R-C3/4, R-C8) → assemble (R-C5) → anti-thrash (R-C6)

Notes for the agent loop author:
- ``should_compress(tokens)`` is the trigger: False below ``threshold_tokens`` or after two consecutive
  ineffective (<10% savings) compressions, until a successful one or ``on_session_reset``.
- After a compression ``last_prompt_tokens`` is -1 ("just compressed, waiting for real usage"); call
  ``update_from_response(usage)`` after every main-model call (only ``prompt_tokens`` is used).
- ``deferred_to_real_usage`` (R-P1): True once, after a compression, the provider's real ``prompt_tokens`` were
  below the threshold, and while every later report stays below it. The preflight may then skip its rough
  (schema-heavy, over-counting) estimate and leave the decision to the post-response check, which uses real
  numbers. It turns False on the next compression, on a report at/over the threshold, or on a call that
  reported no usage.
- A compression that aborts (R-C8) returns the messages unchanged with ``aborted=True`` and a ``reason``
  ending in "conversation frozen, run /compress to retry or /new" — show it to the user.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.compression.assemble import AssemblyResult, assemble, sanitize_tool_pairs, strip_historical_media
from agent.compression.boundaries import Boundaries, find_boundaries, head_size, min_tail_count
from agent.compression.clip import ClipResult, clip_limit, clip_oversized
from agent.compression.engine import CompressionResult, ContextEngine
from agent.compression.fallback import build_static_summary
from agent.compression.feasibility import feasible_threshold, summary_output_reserve
from agent.compression.prune import PruneResult, find_prune_boundary, prune_messages
from agent.compression.state import CompressorState
from agent.compression.summarizer import ABORT_WARNING, request_summary, summary_call_allowed
from agent.compression.summary import (
    SUMMARIZER_SYSTEM,
    build_summary_prompt,
    derive_focus_topic,
    find_latest_summary,
    format_summary,
    serialize_within,
    summary_output_cap,
)
from agent.compression.threshold import (
    autoraised_threshold_percent,
    compute_threshold_tokens,
    max_summary_tokens,
    summary_budget,
    tail_token_budget,
)
from agent.llm.base import Provider, Usage
from agent.tokens import get_counter

__all__ = ["INEFFECTIVE_LIMIT", "INEFFECTIVE_SAVINGS", "MIN_GUARD_MESSAGES", "ContextCompressor"]

MIN_GUARD_MESSAGES = 4
INEFFECTIVE_SAVINGS = 0.10
INEFFECTIVE_LIMIT = 2
# Chat framing tokens around the summary request's two messages.
_FRAMING = 16

Messages = list[dict[str, Any]]


class ContextCompressor(ContextEngine):
    """Lossy compression into protected head + structured summary + verbatim tail."""

    def __init__(
        self,
        *,
        context_length: int,
        threshold: float = 0.50,
        target_ratio: float = 0.20,
        protect_first_n: int = 3,
        protect_last_n: int = 20,
        max_tokens: int | None = None,
        summary_provider: Provider | None,
        main_provider: Provider | None = None,
        summary_context_length: int | None = None,
        abort_on_summary_failure: bool = False,
        encoding: str = "o200k_base",
        clock: Callable[[], float] = time.monotonic,
        today: Callable[[], datetime.date] | None = None,
        provider_name: str = "",
        model: str = "",
        autoraise: bool = True,
        wall_clock: Callable[[], float] = time.time,
        summary_deadline_seconds: float | None = None,
    ) -> None:
        if context_length <= 0:
            raise ValueError("context_length must be positive")
        if not 0 < threshold <= 1 or not 0 < target_ratio < 1:
            raise ValueError("threshold must be in (0, 1] and target_ratio in (0, 1)")
        if protect_first_n < 0 or protect_last_n < 0:
            raise ValueError("protect_first_n and protect_last_n must be >= 0")
        self.threshold_percent = autoraised_threshold_percent(provider_name, model, threshold, enabled=autoraise)
        self.target_ratio = target_ratio
        self.protect_first_n = protect_first_n
        self.protect_last_n = protect_last_n
        self.max_tokens = max_tokens
        self.summary_context_length = summary_context_length
        self.abort_on_summary_failure = abort_on_summary_failure
        self.summary_deadline_seconds = summary_deadline_seconds
        self._summary_provider = summary_provider
        self._main_provider = main_provider
        self._counter = get_counter(encoding)
        self._clock = clock
        self._wall_clock = wall_clock
        self._today = today or datetime.date.today
        self._state = CompressorState()
        self.session_id: str | None = None
        self.last_compression: CompressionResult | None = None
        self._apply_context_length(context_length)

    # -- thresholds -------------------------------------------------------------------------------------

    def _apply_context_length(self, context_length: int) -> None:
        """Set the window and derive the threshold, lowered to what the summary model can read (R-C9)."""
        configured = compute_threshold_tokens(context_length, self.threshold_percent, self.max_tokens)
        self.threshold_tokens = feasible_threshold(configured, context_length, self.summary_context_length)
        self.context_length = context_length

    def lower_context_length(self, context_length: int) -> int:
        """Shrink the window (error recovery: the provider stated a smaller one); returns the new threshold."""
        if context_length <= 0:
            raise ValueError("context_length must be positive")
        if context_length < self.context_length:
            self._apply_context_length(context_length)
        return self.threshold_tokens

    @property
    def tail_token_budget(self) -> int:
        """Tokens the verbatim tail may hold: threshold × target_ratio (R-T5)."""
        return tail_token_budget(self.threshold_tokens, self.target_ratio)

    @property
    def max_summary_tokens(self) -> int:
        """Largest summary budget: 5% of the window, at most 12,000 (R-T5)."""
        return max_summary_tokens(self.context_length)

    # -- state ------------------------------------------------------------------------------------------

    @property
    def compression_count(self) -> int:
        """Compressions done in this conversation."""
        return self._state.compression_count

    @compression_count.setter
    def compression_count(self, value: int) -> None:
        self._state.compression_count = value

    @property
    def last_prompt_tokens(self) -> int:
        """Real prompt tokens of the last main-model call; -1 just after a compression; 0 when unknown.

        Settable (the ContextEngine contract has it as a field): setting -1 marks "waiting for real usage".
        """
        return self._state.last_prompt_tokens

    @last_prompt_tokens.setter
    def last_prompt_tokens(self, value: int) -> None:
        self._state.last_prompt_tokens = value
        if value == -1:
            self._state.awaiting_real_usage = True
            self._state.real_usage_fits = False

    @property
    def ineffective_count(self) -> int:
        """Consecutive compressions that saved less than 10%."""
        return self._state.ineffective_count

    @property
    def previous_summary(self) -> str | None:
        """Body of the summary the next compression will update."""
        return self._state.previous_summary

    @property
    def last_compress_aborted(self) -> bool:
        """Whether the last compression was aborted (R-C8)."""
        return self._state.last_compress_aborted

    @property
    def last_compress_reason(self) -> str:
        """Why the last compression aborted, fell back, or did nothing ('' after a clean LLM summary)."""
        return self._state.last_compress_reason

    @property
    def auth_failure(self) -> bool:
        """The last summary attempt failed with 401/403."""
        return self._state.auth_failure

    @property
    def network_failure(self) -> bool:
        """The last summary attempt failed because the connection or stream closed early."""
        return self._state.network_failure

    @property
    def cooldown_remaining(self) -> float:
        """Seconds before the summary model is tried again (0 when it may be)."""
        return max(0.0, self._state.cooldown_until - self._clock())

    @property
    def deferred_to_real_usage(self) -> bool:
        """See the module docstring: the preflight may trust real usage instead of its rough estimate."""
        return self._state.real_usage_fits

    @property
    def last_compression_stats(self) -> dict[str, Any] | None:
        """Figures of the last compression (also after a restart, from exported state)."""
        return self._state.last_stats

    def export_state(self) -> dict[str, Any]:
        """JSON-serializable state for persistence (cooldowns as wall-clock expiry)."""
        return self._state.export(
            monotonic_now=self._clock(), wall_now=self._wall_clock(), context_length=self.context_length
        )

    def load_state(self, data: Mapping[str, Any]) -> None:
        """Restore `export_state` output; a smaller saved context length (error recovery) is re-applied."""
        self._state = CompressorState.load(dict(data), monotonic_now=self._clock(), wall_now=self._wall_clock())
        saved_length = data.get("context_length")
        if isinstance(saved_length, int) and 0 < saved_length < self.context_length:
            self._apply_context_length(saved_length)

    # -- ContextEngine hooks ----------------------------------------------------------------------------

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """True at or over the threshold unless anti-thrashing blocks it (R-C6)."""
        tokens = self._state.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        if max(tokens, 0) < self.threshold_tokens:
            return False
        return self._state.ineffective_count < INEFFECTIVE_LIMIT

    def update_from_response(self, usage: Usage | None) -> None:
        """Record the real prompt tokens of the last call (completion tokens are ignored: reasoning inflates them)."""
        state = self._state
        prompt = usage.prompt_tokens if usage is not None else 0
        state.last_prompt_tokens = max(prompt, 0)
        if prompt <= 0:
            state.real_usage_fits = False
            return
        if state.awaiting_real_usage:
            state.awaiting_real_usage = False
            state.real_usage_fits = prompt < self.threshold_tokens
        elif prompt >= self.threshold_tokens:
            state.real_usage_fits = False

    def on_session_start(self, session_id: str, messages: Sequence[Mapping[str, Any]] = ()) -> None:
        """Bind to a session and rehydrate the previous summary from a handoff found in ``messages`` (R-C7)."""
        self.session_id = session_id
        self._rehydrate(messages)

    def on_session_end(self, session_id: str) -> None:
        """The session ended: its summary must not leak into another one."""
        self._state.previous_summary = None

    def on_session_reset(self) -> None:
        """``/new``: forget counters, summary and failure flags (provider cooldowns stay)."""
        self._state.reset()
        self.last_compression = None

    def has_content_to_compress(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """False when everything is in the protected head/tail and no message needs clipping, so /compress
        needs no LLM call (R-C10)."""
        return self._clip(messages).clipped > 0 or self._plan(messages)[1] is not None

    def record_ineffective(self) -> None:
        """Count a compression that did not help although it saved tokens (overflow recovery whose retry
        overflowed again) toward anti-thrashing (R-C6)."""
        self._state.ineffective_count += 1

    def will_summarize(self, messages: Sequence[Mapping[str, Any]], *, force: bool = False) -> bool:
        """True only when compress() would call the summary model now: there is a middle, a summary provider,
        and no cooldown (unless ``force``). Otherwise it would insert the static summary or abort, unpaid."""
        allowed = summary_call_allowed(self._state, self._summary_provider, now=self._clock(), force=force)
        return allowed and self._plan(self._clip(messages).messages)[1] is not None

    # -- the pipeline -----------------------------------------------------------------------------------

    def _decayed(self) -> bool:
        return self._state.compression_count >= 1 or self._state.previous_summary is not None

    def _rehydrate(self, messages: Sequence[Mapping[str, Any]]) -> None:
        # A remembered summary absent from these messages came from another session: drop it.
        self._state.previous_summary = find_latest_summary(messages)

    def _clip(self, messages: Sequence[Mapping[str, Any]]) -> ClipResult:
        tail = min_tail_count(len(messages), 0, self.protect_last_n)
        return clip_oversized(messages, clip_limit(self.threshold_tokens, tail), self._counter)

    def _plan(self, messages: Sequence[Mapping[str, Any]]) -> tuple[PruneResult | None, Boundaries | None]:
        """Prune + boundaries; (None, None) when the guard applies, (pruned, None) when there is no middle."""
        # Decided from the messages, not the remembered summary: compress() drops a summary these messages
        # do not contain (R-C7), and has_content_to_compress must predict that compress() exactly (R-C10).
        decayed = self._state.compression_count >= 1 or find_latest_summary(messages) is not None
        head = head_size(messages, self.protect_first_n, decayed)
        if len(messages) <= head + MIN_GUARD_MESSAGES:
            return None, None
        min_tail = min_tail_count(len(messages), head, self.protect_last_n)
        protect_from = find_prune_boundary(messages, self.tail_token_budget, min_tail, self._counter)
        pruned = prune_messages(messages, protect_from)
        bounds = find_boundaries(
            pruned.messages,
            protect_first_n=self.protect_first_n,
            decayed=decayed,
            protect_last_n=self.protect_last_n,
            tail_budget=self.tail_token_budget,
            counter=self._counter,
        )
        return pruned, None if bounds.empty else bounds

    def _unchanged(
        self, messages: Messages, tokens: int, reason: str, *, aborted: bool = False, ineffective: bool = False
    ) -> CompressionResult:
        state = self._state
        if ineffective:
            state.ineffective_count += 1
        state.last_compress_aborted = aborted
        state.last_compress_reason = reason
        return self._record(CompressionResult(messages, False, len(messages), len(messages), tokens, tokens,
                                              "none", aborted, reason))

    def _record(self, result: CompressionResult) -> CompressionResult:
        self.last_compression = result
        self._state.last_stats = result.stats()
        return result

    def _summary_prompt(self, middle: Messages, messages: Messages, focus_topic: str | None) -> tuple[str, int]:
        """The summary prompt and its ``max_tokens``; the middle is trimmed (oldest first) to the summary window."""
        budget = summary_budget(self._counter.count_messages(middle), self.context_length)
        focus = focus_topic or derive_focus_topic(messages)

        def build(middle_text: str) -> str:
            return build_summary_prompt(middle_text, budget=budget, today=self._today(),
                                        previous_summary=self._state.previous_summary, focus_topic=focus,
                                        auto_focus=focus_topic is None, kind=self.summary_template)

        # An unknown summary window is taken to be the main one: the summary call must fit the same model.
        window = self.summary_context_length or self.context_length
        frame = self._counter.count_text(build("")) + self._counter.count_text(SUMMARIZER_SYSTEM)
        limit = window - frame - summary_output_reserve(self.context_length)
        prompt = build(serialize_within(middle, max(limit, 1), self._counter))
        room = window - self._counter.count_text(prompt) - self._counter.count_text(SUMMARIZER_SYSTEM) - _FRAMING
        return prompt, summary_output_cap(budget, room)

    async def compress(
        self,
        messages: Sequence[Mapping[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
    ) -> CompressionResult:
        """Compress ``messages`` once; the input is never mutated.

        ``current_tokens`` (the caller's request-level figure) is not used for decisions: before/after and
        savings are exact counts of the message lists, so they compare like with like. ``force`` (manual
        /compress) bypasses summary-model cooldowns.
        """
        original: Messages = [m if isinstance(m, dict) else dict(m) for m in messages]
        self._rehydrate(original)
        tokens_before = self._counter.count_messages(original)
        clip = self._clip(original)
        pruned, bounds = self._plan(clip.messages)
        if bounds is None and clip.clipped:
            return self._commit_clip(original, clip, tokens_before)
        if pruned is None:
            return self._unchanged(original, tokens_before, "nothing to compress: too few messages")
        if bounds is None:
            return self._unchanged(original, tokens_before,
                                   "nothing to compress: everything is in the protected head and tail",
                                   ineffective=True)
        work = pruned.messages
        middle = work[bounds.head_end : bounds.tail_start]
        outcome = await request_summary(
            self._state, summary_provider=self._summary_provider, main_provider=self._main_provider,
            build_prompt=lambda: self._summary_prompt(middle, work, focus_topic), now=self._clock(), force=force,
            abort_on_failure=self.abort_on_summary_failure, deadline_s=self.summary_deadline_seconds,
        )
        if outcome.abort:
            if clip.clipped:
                return self._commit_clip(original, clip, tokens_before)
            return self._unchanged(original, tokens_before,
                                   f"Context compression aborted ({outcome.reason}): {ABORT_WARNING}", aborted=True)
        kind, failure = ("llm" if outcome.body is not None else "static"), outcome.reason
        body = outcome.body or self._static_body(middle)
        assembled, tokens_after = self._assemble(work, bounds, body)
        if tokens_after >= tokens_before and kind == "llm":
            # A summary longer than what it replaces (a small model rambling to its output cap) is a failed
            # summary (R-C8): the deterministic one still lets the conversation shrink.
            kind, failure, body = "static", "the model's summary was longer than the turns it replaced", \
                self._static_body(middle)
            assembled, tokens_after = self._assemble(work, bounds, body)
        if tokens_after >= tokens_before:
            return self._unchanged(original, tokens_before, "compression would not reduce tokens", ineffective=True)
        return self._commit(original, assembled.messages, tokens_before, tokens_after, bounds, pruned, kind,
                             failure, body)

    def _commit_clip(self, original: Messages, clip: ClipResult, before: int) -> CompressionResult:
        """Only clipping changed the list (no middle to summarize, or the summary aborted): keep that."""
        state = self._state
        # The same repairs as every assembled list (tool pairs, unparsable arguments, historical media).
        messages = strip_historical_media(sanitize_tool_pairs(clip.messages)[0])[0]
        after = self._counter.count_messages(messages)
        if after >= before:
            return self._unchanged(original, before, "compression would not reduce tokens", ineffective=True)
        state.ineffective_count = 0
        state.last_prompt_tokens = -1
        state.awaiting_real_usage = True
        state.real_usage_fits = False
        state.last_compress_aborted = False
        state.last_compress_reason = f"clipped {clip.clipped} oversized message(s)"
        return self._record(CompressionResult(
            messages, True, len(original), len(messages), before, after, "none", False,
            state.last_compress_reason, 0, 0, 0,
        ))

    def _static_body(self, middle: Messages) -> str:
        return build_static_summary(middle, today=self._today(), previous_summary=self._state.previous_summary)

    def _assemble(self, work: Messages, bounds: Boundaries, body: str) -> tuple[AssemblyResult, int]:
        assembled = assemble(work[: bounds.head_end], format_summary(body), work[bounds.tail_start :],
                             first_compression=not self._decayed())
        return assembled, self._counter.count_messages(assembled.messages)

    def _commit(
        self, original: Messages, result: Messages, before: int, after: int, bounds: Boundaries,
        pruned: PruneResult, kind: str, failure: str, body: str,
    ) -> CompressionResult:
        state = self._state
        savings = 1.0 - after / before
        state.ineffective_count = state.ineffective_count + 1 if savings < INEFFECTIVE_SAVINGS else 0
        state.compression_count += 1
        state.previous_summary = body
        state.last_prompt_tokens = -1
        state.awaiting_real_usage = True
        state.real_usage_fits = False
        state.last_compress_aborted = False
        state.last_compress_reason = f"static fallback summary ({failure})" if kind == "static" else ""
        return self._record(CompressionResult(
            result, True, len(original), len(result), before, after, kind, False, state.last_compress_reason,
            bounds.head_end, bounds.tail_start, pruned.pruned,
        ))
