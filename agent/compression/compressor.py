"""`ContextCompressor`: the built-in context engine — prune, cut, summarize, assemble (R-C0…R-C10).

The stages are pure functions in their own modules; this class owns the per-conversation state
(`CompressorState`) and the order of the pipeline:

    plan (clip, guard R-C0, prune R-C1, boundaries R-C2, summary budget — at the escalation level)
        → summary (R-C3/4, R-C8; in parts when the middle is larger than the summary window) → shorten
        → assemble (R-C5) → anti-thrash by escalation (R-C6)

Notes for the agent loop author:
- ``should_compress(tokens)`` is the trigger: False below ``threshold_tokens``. Compression is never switched
  off: a compression that saved less than 10% (or left the request nearly full) makes the next one cut
  harder (`agent.compression.escalation`), until one helps.
- After a compression ``last_prompt_tokens`` is -1 ("just compressed, waiting for real usage"); call
  ``update_from_response(usage)`` after every main-model call (only ``prompt_tokens`` is used).
- ``deferred_to_real_usage`` (R-P1): True once, after a compression, the provider's real ``prompt_tokens`` were
  below the threshold, and while every later report stays below it. The preflight may then skip its rough
  (schema-heavy, over-counting) estimate and leave the decision to the post-response check, which uses real
  numbers. It turns False on the next compression, on a report at/over the threshold, or on a call that
  reported no usage.
- ``set_request_overhead(tokens)``: what every request carries besides its messages (the tool schemas), so
  a compaction plans its result against the whole request.
- A compression that aborts (R-C8) returns the messages unchanged with ``aborted=True`` and a ``reason``
  ending in "conversation frozen, run /compress to retry or /new" — show it to the user.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent.compression.assemble import AssemblyResult, assemble, sanitize_tool_pairs, strip_historical_media
from agent.compression.boundaries import Boundaries
from agent.compression.clip import ClipResult
from agent.compression.engine import CompressionResult, ContextEngine
from agent.compression.escalation import STILL_FULL_SHARE
from agent.compression.evidence import remember_facts
from agent.compression.fallback import build_static_summary
from agent.compression.feasibility import SummaryModelTooSmall, feasible_threshold
from agent.compression.ledger import Ledger, build_ledger, ledger_cap
from agent.compression.plan import CompactionPlan, PlanSettings, select_plan
from agent.compression.prune import PruneResult
from agent.compression.shorten import shorten_summary
from agent.compression.state import CompressorState
from agent.compression.summarizer import ABORT_WARNING, SummaryOutcome, summary_call_allowed
from agent.compression.summary import (
    derive_focus_topic,
    find_latest_summary,
    format_summary,
)
from agent.compression.summary_job import SummaryJob, summarize_in_parts
from agent.compression.threshold import (
    autoraised_threshold_percent,
    compute_threshold_tokens,
    max_summary_tokens,
    output_reserve,
    summary_ceiling,
    tail_token_budget,
)
from agent.llm.base import Provider, Usage
from agent.llm.window import LEARNED_OVERFLOW, ServedWindow
from agent.tokens import get_counter

__all__ = ["INEFFECTIVE_SAVINGS", "MIN_GUARD_MESSAGES", "ContextCompressor"]

log = logging.getLogger(__name__)

MIN_GUARD_MESSAGES = 4
INEFFECTIVE_SAVINGS = 0.10

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
        summary_window: ServedWindow | None = None,
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
        # The window and output reserve of the model the engine was built for, and of the one answering now
        # (`use_window`: failover, /model).
        self._home_window = self._model_window = (context_length, max_tokens)
        # Tokens every request carries besides its messages (tool schemas): the agent says (set_request_overhead).
        self._overhead = 0
        # The summary model's served window, shared by every session on it: what its server states is learned.
        self._summary_window = summary_window
        self._summary_frame = self._counter.count_text(format_summary(""))
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

    def set_request_overhead(self, tokens: int) -> None:
        """What every request carries besides its messages (the tool schemas), for planning a compaction."""
        self._overhead = max(0, int(tokens))

    def _plan_settings(self) -> PlanSettings:
        return PlanSettings(self.context_length, self.threshold_tokens, self.tail_token_budget, self.protect_first_n,
                            self.protect_last_n, self.max_tokens or 0, self._overhead, self._summary_frame)

    def lower_context_length(self, context_length: int) -> int:
        """Shrink the window (error recovery: the provider stated a smaller one); returns the new threshold."""
        if context_length <= 0:
            raise ValueError("context_length must be positive")
        if context_length < self.context_length:
            self._apply_context_length(context_length)
        return self.threshold_tokens

    def use_window(self, context_length: int, max_tokens: int | None) -> None:
        """The model that answers changed (failover, ``/model``): budgets follow its window and output reserve.

        A window lowered after an overflow belonged to the previous model and goes with it; while another
        model than the engine's own answers, the exported state keeps the engine's own window, so a restart
        mid-episode does not keep the other model's window once the engine's own model is back."""
        if context_length <= 0:
            raise ValueError("context_length must be positive")
        if (context_length, max_tokens) == self._model_window:
            return
        self._model_window = (context_length, max_tokens)
        self._configured_max_tokens = max_tokens
        self._apply_context_length(context_length)

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
        """Compressions in a row that did not help: the escalation level of the next one (R-C6)."""
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
        own = self._model_window == self._home_window
        return self._state.export(monotonic_now=self._clock(), wall_now=self._wall_clock(),
                                  context_length=self.context_length if own else self._home_window[0])

    def load_state(self, data: Mapping[str, Any]) -> None:
        """Restore `export_state` output; a smaller saved context length (error recovery) is re-applied."""
        self._state = CompressorState.load(dict(data), monotonic_now=self._clock(), wall_now=self._wall_clock())
        saved_length = data.get("context_length")
        if isinstance(saved_length, int) and 0 < saved_length < self.context_length:
            self._apply_context_length(saved_length)

    # -- ContextEngine hooks ----------------------------------------------------------------------------

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """True at or over the threshold. Never switched off: anti-thrashing escalates instead (R-C6)."""
        tokens = self._state.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return max(tokens, 0) >= self.threshold_tokens

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

    def on_messages_stored(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Find the evidence facts of ``messages`` now, so that the compaction that summarizes them only
        assembles them (a message's facts never change; they are kept in a bounded in-process cache)."""
        remember_facts(messages)

    def record_ineffective(self) -> None:
        """Count a compression that did not help although it saved tokens (overflow recovery whose retry
        overflowed again) toward anti-thrashing (R-C6)."""
        self._state.ineffective_count += 1

    def has_content_to_compress(self, messages: Sequence[Mapping[str, Any]],
                                token_counts: Sequence[int] | None = None) -> bool:
        """False when everything is in the protected head/tail and no message needs clipping, so /compress
        needs no LLM call (R-C10).

        ``token_counts`` as for `compress`."""
        plan = self._select_plan(messages, self._input_counts(messages, token_counts))
        return plan.clip.clipped > 0 or plan.bounds is not None

    def will_summarize(self, messages: Sequence[Mapping[str, Any]], *, force: bool = False,
                       token_counts: Sequence[int] | None = None) -> bool:
        """True only when compress() would call the summary model now: there is a middle, a summary provider,
        no cooldown (unless ``force``) and no escalation to the static summary. Otherwise it would insert the
        static summary or abort, unpaid."""
        if not summary_call_allowed(self._state, self._summary_provider, now=self._clock(), force=force):
            return False
        plan = self._select_plan(messages, self._input_counts(messages, token_counts))
        return plan.bounds is not None and not plan.escalation.static

    # -- the pipeline -----------------------------------------------------------------------------------

    def _rehydrate(self, messages: Sequence[Mapping[str, Any]]) -> None:
        # A remembered summary absent from these messages came from another session: drop it.
        self._state.previous_summary = find_latest_summary(messages)

    def _select_plan(self, messages: Sequence[Mapping[str, Any]], counts: Sequence[int],
                     has_summary: bool | None = None) -> CompactionPlan:
        """The compaction to make now (see `agent.compression.plan`).

        ``has_summary``: whether ``messages`` hold a handoff summary, when the caller has just looked. Decided
        from the messages, not the remembered summary: compress() drops a summary these messages do not
        contain (R-C7), and has_content_to_compress must predict that compress() exactly (R-C10).
        """
        if has_summary is None:
            has_summary = find_latest_summary(messages) is not None
        decayed = self._state.compression_count >= 1 or has_summary
        return select_plan(messages, counts, self._plan_settings(), self._state.ineffective_count, decayed=decayed,
                           counter=self._counter)

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
        counted once, and that one list serves planning, the summary budget and the totals.
        The result's ``token_counts`` are those of its messages.
        """
        original: Messages = [m if isinstance(m, dict) else dict(m) for m in messages]
        self._rehydrate(original)
        counts = self._input_counts(original, token_counts)
        tokens_before = sum(counts)
        # _rehydrate has just looked for a summary in these very messages.
        plan = self._select_plan(original, counts, self._state.previous_summary is not None)
        if plan.bounds is None and plan.clip.clipped:
            return self._commit_clip(original, plan.clip, counts)
        if plan.pruned is None:
            return self._unchanged(original, counts, "nothing to compress: too few messages")
        if plan.bounds is None:
            return self._unchanged(original, counts,
                                   "nothing to compress: everything is in the protected head and tail",
                                   ineffective=True)
        work, bounds = plan.pruned.messages, plan.bounds
        middle = work[bounds.head_end : bounds.tail_start]
        outcome = await self._summarize(plan, middle, work, focus_topic, force)
        if outcome.abort:
            if plan.clip.clipped:
                return self._commit_clip(original, plan.clip, counts)
            return self._unchanged(original, counts,
                                   f"Context compression aborted ({outcome.reason}): {ABORT_WARNING}", aborted=True)
        kind, failure = ("llm" if outcome.body is not None else "static"), outcome.reason
        if outcome.body is not None:
            # Paid for: a summary longer than asked (or cut at max_tokens) is shortened, never thrown away.
            text = shorten_summary(outcome.body, plan.summary_budget, self._counter, cut_off=outcome.cut_off)
        else:
            # The static summary has caps of its own, meant for large windows: here it takes at most what any
            # summary may take in this window.
            ceiling = summary_ceiling(self.context_length, self.threshold_tokens)
            text = shorten_summary(self._static_body(middle),
                                   max(plan.summary_budget, int(ceiling * plan.escalation.summary_share)),
                                   self._counter)
        ledger = self._ledger(original, counts, bounds, plan.summary_budget)
        kept = self._kept_counts(work, plan.work_counts, bounds)
        assembled, after_counts = self._assemble(work, kept, bounds, ledger.merge(text))
        if sum(after_counts) >= tokens_before:
            # Still no shorter than what it replaces (a tiny middle): a summary half as long, then none but the
            # ledger's facts, before giving up.
            for share in (0.5, 0.0):
                text = shorten_summary(text, int(plan.summary_budget * share), self._counter)
                assembled, after_counts = self._assemble(work, kept, bounds, ledger.merge(text))
                if sum(after_counts) < tokens_before:
                    break
        if sum(after_counts) >= tokens_before:
            return self._unchanged(original, counts, "compression would not reduce tokens", ineffective=True)
        return self._commit(original, assembled.messages, tokens_before, after_counts, bounds, plan.pruned, kind,
                            failure, ledger.merge(text))

    # -- the summary: in parts, within the summary model's window ---------------------------------------

    async def _summarize(self, plan: CompactionPlan, middle: Messages, work: Messages, focus_topic: str | None,
                         force: bool) -> SummaryOutcome:
        """The summary of ``middle`` (None body: the caller writes the static one), learning the summary
        model's window and asking once more, in smaller parts, when its server refuses a prompt as too long."""
        if plan.escalation.static:
            return SummaryOutcome(None, reason="earlier compressions saved too little")
        outcome = await self._summarize_parts(plan, middle, work, focus_topic, force)
        if outcome.stated_window is not None:
            await self._learn_summary_window(outcome.stated_window)
            outcome = await self._summarize_parts(plan, middle, work, focus_topic, force)
        return outcome

    async def _learn_summary_window(self, tokens: int) -> None:
        self.summary_context_length = tokens
        if self._summary_window is not None:
            await self._summary_window.learn(tokens, LEARNED_OVERFLOW)
        try:
            self._apply_context_length(self.context_length)
        except SummaryModelTooSmall:  # too small to lower the threshold for: the parts cover the middle
            log.warning("the summary model's window (%s tokens) is far too small; summarizing in parts", tokens)

    async def _summarize_parts(self, plan: CompactionPlan, middle: Messages, work: Messages,
                               focus_topic: str | None, force: bool) -> SummaryOutcome:
        job = SummaryJob(middle, plan.summary_budget, self.summary_context_length or self.context_length,
                         focus_topic or derive_focus_topic(work), focus_topic is None, self._state.previous_summary,
                         self._today(), self.summary_template, self._counter)
        return await summarize_in_parts(job, self._state, summary_provider=self._summary_provider,
                                        main_provider=self._main_provider, now=self._clock, force=force,
                                        abort_on_failure=self.abort_on_summary_failure,
                                        deadline_s=self.summary_deadline_seconds)

    # -- ledger, counts, assembly, commit ---------------------------------------------------------------

    def _ledger(self, original: Messages, counts: Sequence[int], bounds: Boundaries, budget: int) -> Ledger:
        """The evidence ledger of the middle, taken from the unpruned messages (pruning drops error lines)."""
        middle = original[bounds.head_end : bounds.tail_start]
        offset = 1 if original and original[0].get("role") == "system" else 0
        numbers = [self._first_seq + i - offset for i in range(bounds.head_end, bounds.tail_start)]
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

    def _helped(self, before: int, after: int) -> bool:
        """Whether a compression helped: it saved 10% (R-C6) and left room below the threshold for new turns."""
        saved = 1.0 - after / before if before > 0 else 0.0
        return saved >= INEFFECTIVE_SAVINGS and after + self._overhead < self.threshold_tokens * STILL_FULL_SHARE

    def _commit_clip(self, original: Messages, clip: ClipResult, counts: Sequence[int]) -> CompressionResult:
        """Only clipping changed the list (no middle to summarize, or the summary aborted): keep that."""
        state, before = self._state, sum(counts)
        # The same repairs as every assembled list (tool pairs, unparsable arguments, historical media).
        messages = strip_historical_media(sanitize_tool_pairs(clip.messages)[0])[0]
        after_counts = self._counter.count_each(messages)
        after = sum(after_counts)
        if after >= before:
            return self._unchanged(original, counts, "compression would not reduce tokens", ineffective=True)
        state.ineffective_count = 0 if self._helped(before, after) else state.ineffective_count + 1
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
        assembled = assemble(work[: bounds.head_end], format_summary(body), work[bounds.tail_start :])
        counts = [kept.get(id(m)) for m in assembled.messages]
        return assembled, [self._counter.count_message(m) if c is None else c
                           for m, c in zip(assembled.messages, counts, strict=True)]

    def _commit(
        self, original: Messages, result: Messages, before: int, after_counts: list[int], bounds: Boundaries,
        pruned: PruneResult, kind: str, failure: str, body: str,
    ) -> CompressionResult:
        state = self._state
        after = sum(after_counts)
        state.ineffective_count = 0 if self._helped(before, after) else state.ineffective_count + 1
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
