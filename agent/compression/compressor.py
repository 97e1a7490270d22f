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
from agent.compression.ledger import Ledger, build_ledger, ledger_cap
from agent.compression.prune import PruneResult, find_prune_boundary, prune_messages
from agent.compression.state import CompressorState
from agent.compression.summarizer import ABORT_WARNING, request_summary, summary_call_allowed
from agent.compression.summary import (
    SUMMARIZER_SYSTEM,
    build_summary_prompt,
    derive_focus_topic,
    find_latest_summary,
    format_summary,
    serialize_newest_within,
    summary_output_cap,
)
from agent.compression.threshold import (
    autoraised_threshold_percent,
    compute_threshold_tokens,
    max_summary_tokens,
    output_reserve,
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

    accepts_token_counts = True

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
        reserve_output: bool = False,
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
        self._configured_max_tokens = max_tokens
        # True (the gateway): without max_tokens, answers get a share of the window, which follows the window.
        self._reserve_output = reserve_output
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
        self._first_seq = 1
        self._apply_context_length(context_length)

    # -- thresholds -------------------------------------------------------------------------------------

    @property
    def max_tokens(self) -> int | None:
        """The output reserve: what every answer may take of the window (R-T4)."""
        if self._reserve_output:
            return output_reserve(self._configured_max_tokens, self.context_length)
        return self._configured_max_tokens

    def _apply_context_length(self, context_length: int) -> None:
        """Set the window and derive the threshold, lowered to what the summary model can read (R-C9)."""
        self.context_length = context_length
        configured = compute_threshold_tokens(context_length, self.threshold_percent, self.max_tokens)
        self.threshold_tokens = feasible_threshold(configured, context_length, self.summary_context_length)

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

    def number_messages(self, first_seq: int) -> None:
        """Message numbers for the ledger: the first non-system message is ``first_seq`` (default 1)."""
        self._first_seq = first_seq

    def record_ineffective(self) -> None:
        """Count a compression that did not help although it saved tokens (overflow recovery whose retry
        overflowed again) toward anti-thrashing (R-C6)."""
        self._state.ineffective_count += 1

    def has_content_to_compress(self, messages: Sequence[Mapping[str, Any]],
                                token_counts: Sequence[int] | None = None) -> bool:
        """False when everything is in the protected head/tail and no message needs clipping, so /compress
        needs no LLM call (R-C10).

        ``token_counts`` as for `compress`."""
        counts = None if token_counts is None else self._input_counts(messages, token_counts)
        if self._clip(messages, counts).clipped > 0:
            return True
        return self._plan(messages, counts)[1] is not None

    def will_summarize(self, messages: Sequence[Mapping[str, Any]], *, force: bool = False,
                       token_counts: Sequence[int] | None = None) -> bool:
        """True only when compress() would call the summary model now: there is a middle, a summary provider,
        and no cooldown (unless ``force``). Otherwise it would insert the static summary or abort, unpaid."""
        allowed = summary_call_allowed(self._state, self._summary_provider, now=self._clock(), force=force)
        if not allowed:
            return False
        held = None if token_counts is None else self._input_counts(messages, token_counts)
        clip = self._clip(messages, held)
        counts = None if held is None else self._clipped_counts(messages, clip, held)
        return self._plan(clip.messages, counts)[1] is not None

    # -- the pipeline -----------------------------------------------------------------------------------

    def _decayed(self) -> bool:
        return self._state.compression_count >= 1 or self._state.previous_summary is not None

    def _rehydrate(self, messages: Sequence[Mapping[str, Any]]) -> None:
        # A remembered summary absent from these messages came from another session: drop it.
        self._state.previous_summary = find_latest_summary(messages)

    def _clip(self, messages: Sequence[Mapping[str, Any]], counts: Sequence[int] | None = None) -> ClipResult:
        tail = min_tail_count(len(messages), 0, self.protect_last_n)
        return clip_oversized(messages, clip_limit(self.threshold_tokens, tail), self._counter, counts)

    def _clipped_counts(self, messages: Sequence[Mapping[str, Any]], clip: ClipResult,
                        token_counts: Sequence[int] | None) -> list[int]:
        """Counts of ``clip.messages``: the input's, recounted only where clipping replaced the content."""
        counts = self._input_counts(messages, token_counts)
        if not clip.clipped:
            return counts
        return [count if out.get("content") is src.get("content") else self._counter.count_message(out)
                for src, out, count in zip(messages, clip.messages, counts, strict=True)]

    def _plan(
        self, messages: Sequence[Mapping[str, Any]], counts: Sequence[int] | None = None,
        has_summary: bool | None = None,
    ) -> tuple[PruneResult | None, Boundaries | None, list[int]]:
        """Prune + boundaries; (None, None, []) when the guard applies, (pruned, None, …) when there is no middle.

        With ``counts`` (one per message) nothing already counted is counted again, and the third item holds
        the counts of the pruned list; without them the stages count lazily, only as far as they walk.
        ``has_summary``: whether ``messages`` hold a handoff summary, when the caller has just looked.
        """
        # Decided from the messages, not the remembered summary: compress() drops a summary these messages
        # do not contain (R-C7), and has_content_to_compress must predict that compress() exactly (R-C10).
        if has_summary is None:
            has_summary = find_latest_summary(messages) is not None
        decayed = self._state.compression_count >= 1 or has_summary
        head = head_size(messages, self.protect_first_n, decayed)
        if len(messages) <= head + MIN_GUARD_MESSAGES:
            return None, None, []
        min_tail = min_tail_count(len(messages), head, self.protect_last_n)
        protect_from = find_prune_boundary(messages, self.tail_token_budget, min_tail, self._counter, counts)
        pruned = prune_messages(messages, protect_from)
        # Pruning replaces only the messages it changes: the others keep their counts.
        work_counts = [] if counts is None else [
            c if p is m else self._counter.count_message(p)
            for p, m, c in zip(pruned.messages, messages, counts, strict=True)]
        bounds = find_boundaries(
            pruned.messages,
            protect_first_n=self.protect_first_n,
            decayed=decayed,
            protect_last_n=self.protect_last_n,
            tail_budget=self.tail_token_budget,
            counter=self._counter,
            counts=work_counts if counts is not None else None,
        )
        return pruned, None if bounds.empty else bounds, work_counts

    def _unchanged(
        self, messages: Messages, counts: Sequence[int], reason: str, *, aborted: bool = False,
        ineffective: bool = False,
    ) -> CompressionResult:
        state = self._state
        if ineffective:
            state.ineffective_count += 1
        state.last_compress_aborted = aborted
        state.last_compress_reason = reason
        return self._record(CompressionResult(messages, False, len(messages), len(messages), sum(counts),
                                              sum(counts), "none", aborted, reason, token_counts=tuple(counts)))

    def _record(self, result: CompressionResult) -> CompressionResult:
        self.last_compression = result
        self._state.last_stats = result.stats()
        return result

    def _summary_prompt(
        self, middle: Messages, middle_tokens: int, messages: Messages, focus_topic: str | None
    ) -> tuple[str, int]:
        """The summary prompt and its ``max_tokens``; the middle is trimmed (oldest first) to the summary window.

        The prompt's size is its frame's count plus the serialized blocks' counts (each block is counted once,
        as it is kept), never a second tokenization of the whole prompt. That sum is a hair above the exact
        count (a separator may merge with its neighbour), so ``max_tokens`` errs on the side of fitting.
        """
        budget = summary_budget(middle_tokens, self.context_length)
        focus = focus_topic or derive_focus_topic(messages)

        def build(middle_text: str) -> str:
            return build_summary_prompt(middle_text, budget=budget, today=self._today(),
                                        previous_summary=self._state.previous_summary, focus_topic=focus,
                                        auto_focus=focus_topic is None, kind=self.summary_template)

        # An unknown summary window is taken to be the main one: the summary call must fit the same model.
        window = self.summary_context_length or self.context_length
        frame_text = build("")
        frame = self._counter.count_text(frame_text) + self._counter.count_text(SUMMARIZER_SYSTEM)
        limit = window - frame - summary_output_reserve(self.context_length)
        middle_text, middle_text_tokens = serialize_newest_within(middle, max(limit, 1), self._counter)
        # The serialized middle is the prompt's last part: build(text) == build("") + text.
        prompt = frame_text + middle_text
        room = window - frame - middle_text_tokens - _FRAMING
        return prompt, summary_output_cap(budget, room)

    async def compress(
        self,
        messages: Sequence[Mapping[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
        token_counts: Sequence[int] | None = None,
    ) -> CompressionResult:
        """Compress ``messages`` once; the input is never mutated.

        ``current_tokens`` (the caller's request-level figure) is not used for decisions: before/after and
        savings are exact counts of the message lists, so they compare like with like. ``force`` (manual
        /compress) bypasses summary-model cooldowns. ``token_counts``, one exact count per message (the
        agent's ledger and the store hold them), spare re-tokenizing the input; each message is otherwise
        counted once, and that one list serves pruning, the tail walk, the summary budget and the totals.
        The result's ``token_counts`` are those of its messages.
        """
        original: Messages = [m if isinstance(m, dict) else dict(m) for m in messages]
        self._rehydrate(original)
        counts = self._input_counts(original, token_counts)
        tokens_before = sum(counts)
        clip = self._clip(original, counts)
        clip_counts = self._clipped_counts(original, clip, counts)
        # _rehydrate has just looked for a summary in these very messages.
        pruned, bounds, work_counts = self._plan(clip.messages, clip_counts, self._state.previous_summary is not None)
        if bounds is None and clip.clipped:
            return self._commit_clip(original, clip, counts)
        if pruned is None:
            return self._unchanged(original, counts, "nothing to compress: too few messages")
        if bounds is None:
            return self._unchanged(original, counts,
                                   "nothing to compress: everything is in the protected head and tail",
                                   ineffective=True)
        work = pruned.messages
        middle = work[bounds.head_end : bounds.tail_start]
        middle_tokens = sum(work_counts[bounds.head_end : bounds.tail_start])
        outcome = await request_summary(
            self._state, summary_provider=self._summary_provider, main_provider=self._main_provider,
            build_prompt=lambda: self._summary_prompt(middle, middle_tokens, work, focus_topic), now=self._clock(),
            force=force, abort_on_failure=self.abort_on_summary_failure, deadline_s=self.summary_deadline_seconds,
        )
        if outcome.abort:
            if clip.clipped:
                return self._commit_clip(original, clip, counts)
            return self._unchanged(original, counts,
                                   f"Context compression aborted ({outcome.reason}): {ABORT_WARNING}", aborted=True)
        kind, failure = ("llm" if outcome.body is not None else "static"), outcome.reason
        ledger = self._ledger(original, counts, bounds)
        body = ledger.merge(outcome.body or self._static_body(middle))
        kept = self._kept_counts(work, work_counts, bounds)
        assembled, after_counts = self._assemble(work, kept, bounds, body)
        if sum(after_counts) >= tokens_before and kind == "llm":
            # A summary longer than what it replaces (a small model rambling to its output cap) is a failed
            # summary (R-C8): the deterministic one still lets the conversation shrink.
            kind, failure, body = "static", "the model's summary was longer than the turns it replaced", \
                ledger.merge(self._static_body(middle))
            assembled, after_counts = self._assemble(work, kept, bounds, body)
        if sum(after_counts) >= tokens_before:
            return self._unchanged(original, counts, "compression would not reduce tokens", ineffective=True)
        return self._commit(original, assembled.messages, tokens_before, after_counts, bounds, pruned, kind,
                             failure, body)

    def _ledger(self, original: Messages, counts: Sequence[int], bounds: Boundaries) -> Ledger:
        """The evidence ledger of the middle, taken from the unpruned messages (pruning drops error lines)."""
        middle = original[bounds.head_end : bounds.tail_start]
        offset = 1 if original and original[0].get("role") == "system" else 0
        numbers = [self._first_seq + i - offset for i in range(bounds.head_end, bounds.tail_start)]
        budget = summary_budget(sum(counts[bounds.head_end : bounds.tail_start]), self.context_length)
        return build_ledger(middle, numbers, previous_summary=self._state.previous_summary,
                            cap_tokens=ledger_cap(budget), cost=self._counter.count_text)

    def _input_counts(self, messages: Sequence[Mapping[str, Any]], token_counts: Sequence[int] | None) -> list[int]:
        if token_counts is None:
            return self._counter.count_each(messages)
        if len(token_counts) != len(messages):
            raise ValueError(f"{len(messages)} messages but {len(token_counts)} token counts")
        return [int(c) for c in token_counts]

    @staticmethod
    def _kept_counts(work: Messages, counts: Sequence[int], bounds: Boundaries) -> dict[int, int]:
        """Counts of the head and tail messages by identity, for those assembly keeps as they are (identity is
        safe: every one of them stays alive in ``work`` while the map is used)."""
        head = zip(work[: bounds.head_end], counts[: bounds.head_end], strict=True)
        tail = zip(work[bounds.tail_start :], counts[bounds.tail_start :], strict=True)
        return {id(m): c for m, c in (*head, *tail)}

    def _commit_clip(self, original: Messages, clip: ClipResult, counts: Sequence[int]) -> CompressionResult:
        """Only clipping changed the list (no middle to summarize, or the summary aborted): keep that."""
        state, before = self._state, sum(counts)
        # The same repairs as every assembled list (tool pairs, unparsable arguments, historical media).
        messages = strip_historical_media(sanitize_tool_pairs(clip.messages)[0])[0]
        after_counts = self._counter.count_each(messages)
        after = sum(after_counts)
        if after >= before:
            return self._unchanged(original, counts, "compression would not reduce tokens", ineffective=True)
        state.ineffective_count = 0
        state.last_prompt_tokens = -1
        state.awaiting_real_usage = True
        state.real_usage_fits = False
        state.last_compress_aborted = False
        state.last_compress_reason = f"clipped {clip.clipped} oversized message(s)"
        return self._record(CompressionResult(
            messages, True, len(original), len(messages), before, after, "none", False,
            state.last_compress_reason, 0, 0, 0, tuple(after_counts),
        ))

    def _static_body(self, middle: Messages) -> str:
        return build_static_summary(middle, today=self._today(), previous_summary=self._state.previous_summary)

    def _assemble(
        self, work: Messages, kept: Mapping[int, int], bounds: Boundaries, body: str
    ) -> tuple[AssemblyResult, list[int]]:
        """The assembled list and its per-message counts: only what assembly created or changed is counted."""
        assembled = assemble(work[: bounds.head_end], format_summary(body), work[bounds.tail_start :],
                             first_compression=not self._decayed())
        counts = [kept.get(id(m)) for m in assembled.messages]
        return assembled, [self._counter.count_message(m) if c is None else c
                           for m, c in zip(assembled.messages, counts, strict=True)]

    def _commit(
        self, original: Messages, result: Messages, before: int, after_counts: list[int], bounds: Boundaries,
        pruned: PruneResult, kind: str, failure: str, body: str,
    ) -> CompressionResult:
        state = self._state
        after = sum(after_counts)
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
            bounds.head_end, bounds.tail_start, pruned.pruned, tuple(after_counts),
        ))
